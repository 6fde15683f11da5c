package faultinject_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/redis/go-redis/v9"
)

// zkEnsemble is ZooKeeper servers on loopback ports, one JVM each, that a
// test can kill (SIGKILL) and restart one by one: three for an ensemble,
// or one standalone server that a test may restart without disturbing the
// tests that share testserver.SharedZooKeeper.
type zkEnsemble struct {
	t       *testing.T
	java    string
	cp      string
	dirs    []string
	clients []string // client host:port
	procs   []*testserver.Process
}

func startZKEnsemble(t *testing.T, n int) *zkEnsemble {
	t.Helper()
	return startOnFreePorts(t, "zookeeper", func() (*zkEnsemble, error) { return tryZKEnsemble(t, n) })
}

// newZKEnsemble finds Java and ZooKeeper's classpath for an ensemble of t
// (the Debian package's jars, or $ZOOKEEPER_JAVA and $ZOOKEEPER_CLASSPATH).
func newZKEnsemble(t *testing.T) *zkEnsemble {
	e := &zkEnsemble{t: t}
	e.java = testserver.LookBinary(t, "ZOOKEEPER_JAVA", "java", "apt-get install -y zookeeper", "/usr/bin/java")
	e.cp = os.Getenv("ZOOKEEPER_CLASSPATH")
	if e.cp == "" {
		e.cp = "/usr/share/java/zookeeper.jar"
		if _, err := os.Stat(e.cp); err != nil {
			t.Fatalf("%s not found: apt-get install -y zookeeper, or run ./test.sh", e.cp)
		}
		if _, err := os.Stat("/usr/share/java/slf4j-simple.jar"); err == nil {
			e.cp += ":/usr/share/java/slf4j-simple.jar"
		}
	}
	return e
}

func tryZKEnsemble(t *testing.T, n int) (*zkEnsemble, error) {
	e := newZKEnsemble(t)
	var servers []string
	for i := range n {
		e.dirs = append(e.dirs, t.TempDir())
		e.clients = append(e.clients, testserver.Addr(testserver.FreePort(t)))
		if n > 1 {
			servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, testserver.FreePort(t), testserver.FreePort(t)))
		}
	}
	for i, dir := range e.dirs {
		_, port, _ := net.SplitHostPort(e.clients[i])
		cfg := strings.Join(append([]string{
			"tickTime=100", "initLimit=20", "syncLimit=10",
			"dataDir=" + filepath.Join(dir, "data"),
			"clientPort=" + port, "clientPortAddress=127.0.0.1",
			"admin.enableServer=false", "4lw.commands.whitelist=*",
			"maxSessionTimeout=60000", "maxClientCnxns=0",
		}, servers...), "\n") + "\n"
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", "myid"), []byte(fmt.Sprint(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		e.procs = append(e.procs, nil)
		e.start(i)
	}
	if err := e.awaitQuorum(n, 90*time.Second); err != nil {
		for i, p := range e.procs {
			if p != nil {
				e.kill(i)
			}
		}
		return nil, err
	}
	return e, nil
}

func (e *zkEnsemble) start(i int) {
	e.procs[i] = testserver.StartProcess(e.t, fmt.Sprintf("zookeeper-%d", i+1), e.dirs[i], e.java, []string{
		"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.net.preferIPv4Stack=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.cnxTimeout=500",
		"-Dznode.container.checkIntervalMs=100",
		"-Dzookeeper.forceSync=no",
		"-cp", e.cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(e.dirs[i], "zoo.cfg"),
	})
}

// mode returns "leader", "follower" or "" (down, or not serving).
func (e *zkEnsemble) mode(i int) string {
	out, err := fourLetterWord(e.clients[i], "srvr")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

func fourLetterWord(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// leader returns the index of the leader, or -1.
func (e *zkEnsemble) leader() int {
	for i := range e.clients {
		if m := e.mode(i); e.procs[i] != nil && (m == "leader" || m == "standalone") {
			return i
		}
	}
	return -1
}

// waitQuorum waits until n servers serve, one of them as leader, failing
// the test after 90 s.
func (e *zkEnsemble) waitQuorum(n int) {
	e.t.Helper()
	if err := e.awaitQuorum(n, 90*time.Second); err != nil {
		e.t.Fatalf("zookeeper: %v", err)
	}
}

// awaitQuorum waits until n servers serve, one of them as leader (see
// awaitServers), polling the servers' srvr command.
func (e *zkEnsemble) awaitQuorum(n int, timeout time.Duration) error {
	server := func(i int) string { return fmt.Sprintf("server %d", i+1) }
	return awaitServers(e.procs, server, timeout, func() error {
		serving, leaders := 0, 0
		for i := range e.clients {
			if e.procs[i] == nil {
				continue
			}
			switch e.mode(i) {
			case "leader", "standalone":
				leaders++
				serving++
			case "follower":
				serving++
			}
		}
		if serving >= n && leaders == 1 {
			return nil
		}
		return fmt.Errorf("%d serving, %d leaders", serving, leaders)
	})
}

// kill stops server i with SIGKILL.
func (e *zkEnsemble) kill(i int) {
	e.procs[i].Kill()
	e.procs[i] = nil
}

// sentinelTopology is a Redis master behind a proxy (so that the test can
// hold its replication stream), one replica replicating through that proxy,
// and three Sentinels that monitor the master at the proxy's address.
type sentinelTopology struct {
	master    *testserver.Redis
	proxy     *faultproxy.Proxy
	replica   *testserver.Redis
	sentinels []string
	admin     *redis.Client // the master, directly
}

func startSentinelTopology(t *testing.T) *sentinelTopology {
	t.Helper()
	rr := testserver.StartReplicatedRedis(t, faultinject.Mono)
	st := &sentinelTopology{master: rr.Master, proxy: rr.Proxy, replica: rr.Replica}
	_, pport, _ := net.SplitHostPort(st.proxy.Addr())
	st.admin = redis.NewClient(&redis.Options{Addr: st.master.Addr()})
	t.Cleanup(func() { _ = st.admin.Close() })
	bin := testserver.LookBinary(t, "REDIS_SERVER_BIN", "redis-server", "apt-get install -y redis-server")
	for range 3 {
		dir := t.TempDir()
		port := testserver.FreePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 2\n"+
			"sentinel down-after-milliseconds mymaster 400\nsentinel failover-timeout mymaster 2000\n", port, dir, pport)
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		testserver.StartProcess(t, "redis-sentinel", dir, bin, []string{conf, "--sentinel", "--loglevel", "warning"})
		st.sentinels = append(st.sentinels, testserver.Addr(port))
	}
	// Ready: every Sentinel knows the replica and the two other Sentinels,
	// and the replica's link is up.
	testserver.Await(t, 60*time.Second, "Sentinels and replica ready", func(ctx context.Context) error {
		rc := redis.NewClient(&redis.Options{Addr: st.replica.Addr()})
		info, err := rc.Info(ctx, "replication").Result()
		_ = rc.Close()
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica link not up: %v", err)
		}
		for _, s := range st.sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s})
			reps, err := sc.Replicas(ctx, "mymaster").Result()
			others, err2 := sc.Sentinels(ctx, "mymaster").Result()
			_ = sc.Close()
			if err != nil || err2 != nil || len(reps) != 1 || len(others) != 2 {
				return fmt.Errorf("sentinel %s: %d replicas, %d other sentinels (%v %v)", s, len(reps), len(others), err, err2)
			}
		}
		return nil
	})
	return st
}

// failedOver reports whether every Sentinel names the replica as master.
func (st *sentinelTopology) failedOver(ctx context.Context) error {
	_, rport, _ := net.SplitHostPort(st.replica.Addr())
	for _, s := range st.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s})
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		_ = sc.Close()
		if err != nil || len(addr) != 2 || addr[1] != rport {
			return fmt.Errorf("sentinel %s names %v (%v)", s, addr, err)
		}
	}
	return nil
}
