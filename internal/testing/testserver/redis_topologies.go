package testserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartRedisCluster starts a Redis Cluster of n masters (no replicas) on
// loopback ports, assigns the 16384 slots evenly and waits until every node
// reports cluster_state:ok. It returns the nodes' addresses.
func StartRedisCluster(t testing.TB, n int) []string {
	t.Helper()
	return startRedisCluster(t, n, nil)
}

// StartRedisClusterTLS is StartRedisCluster with every node speaking only
// TLS, to clients and on the cluster bus (--tls-cluster yes).
func StartRedisClusterTLS(t testing.TB, n int, c *RedisTLS) []string {
	t.Helper()
	return startRedisCluster(t, n, c)
}

func startRedisCluster(t testing.TB, n int, c *RedisTLS) []string {
	t.Helper()
	var addrs []string
	for range n {
		dir := t.TempDir()
		args := []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000"}
		if c != nil {
			args = append(args, "--tls-cluster", "yes")
		}
		r := startRedisTLS(t, c, nil, args)
		addrs = append(addrs, r.Addr())
	}
	cmd := func(ctx context.Context, addr string, args ...string) (string, error) {
		return RedisCommandTLS(ctx, addr, c, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	per := 16384 / n
	for i, a := range addrs {
		start, end := i*per, (i+1)*per-1
		if i == n-1 {
			end = 16383
		}
		if _, err := cmd(ctx, a, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(start), strconv.Itoa(end)); err != nil {
			t.Fatalf("testserver: cluster addslots on %s: %v", a, err)
		}
		if i > 0 {
			host, port, _ := strings.Cut(a, ":")
			if _, err := cmd(ctx, addrs[0], "CLUSTER", "MEET", host, port); err != nil {
				t.Fatalf("testserver: cluster meet %s: %v", a, err)
			}
		}
	}
	for _, a := range addrs {
		for {
			info, err := cmd(ctx, a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("testserver: cluster not ok: %v %q", err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return addrs
}

// StartRedisSentinel starts a master and one Sentinel monitoring it under the
// name "mymaster". It returns the master and the Sentinel's addresses.
func StartRedisSentinel(t testing.TB) (master, sentinel string) {
	t.Helper()
	return startRedisSentinel(t, nil)
}

// StartRedisSentinelTLS is StartRedisSentinel with the master and the
// Sentinel speaking only TLS, the Sentinel's connections to the master
// included (tls-replication yes).
func StartRedisSentinelTLS(t testing.TB, c *RedisTLS) (master, sentinel string) {
	t.Helper()
	return startRedisSentinel(t, c)
}

func startRedisSentinel(t testing.TB, c *RedisTLS) (master, sentinel string) {
	t.Helper()
	m := startRedisTLS(t, c, nil, nil)
	bin := LookBinary(t, "REDIS_SERVER_BIN", "redis-server", "apt-get install -y redis-server")
	dir := t.TempDir()
	port := FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	host, mport, _ := strings.Cut(m.Addr(), ":")
	cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\nsentinel down-after-milliseconds mymaster 5000\n", port, dir, host, mport)
	if c != nil {
		a := c.args()
		cfg = fmt.Sprintf("port 0\ntls-port %d\ntls-replication yes\n", port)
		for i := 0; i < len(a); i += 2 {
			cfg += strings.TrimPrefix(a[i], "--") + " " + a[i+1] + "\n"
		}
		cfg += fmt.Sprintf("bind 127.0.0.1\ndir %s\nsentinel monitor mymaster %s %s 1\nsentinel down-after-milliseconds mymaster 5000\n", dir, host, mport)
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := StartProcess(t, "redis-sentinel", dir, bin, []string{conf, "--sentinel"})
	sentinel = Addr(port)
	err := p.WaitReady(30*time.Second, func(ctx context.Context) error {
		reply, err := RedisCommandTLS(ctx, sentinel, c, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
		if err != nil {
			return err
		}
		if a := strings.Split(reply, "\n"); len(a) != 2 || a[1] != mport {
			return fmt.Errorf("sentinel reports master %v", a)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testserver: sentinel on %s: %v", sentinel, err)
	}
	return m.Addr(), sentinel
}
