package faultinject_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdMemberEnv makes the test binary an etcd member process (embedded
// etcd, go.etcd.io/etcd/server/v3/embed), so that a member can be killed
// with SIGKILL and restarted like a real one.
const etcdMemberEnv = "FAULTINJECT_ETCD_MEMBER"

type etcdMemberConfig struct {
	Name, Dir, Client, Peer, Cluster string
}

// etcd timing for the members: a 100 ms heartbeat and a 1 s election
// timeout stand up to race-instrumented members on a loaded 2-core machine.
// etcd's shortest lease is then 1.5 election timeouts, rounded up: 2 s.
const (
	etcdTickMs     = 100
	etcdElectionMs = 1000
)

func etcdMemberMain() {
	var c etcdMemberConfig
	if err := json.Unmarshal([]byte(os.Getenv(etcdMemberEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	client, peer := url.URL{Scheme: "http", Host: c.Client}, url.URL{Scheme: "http", Host: c.Peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = c.Cluster
	cfg.InitialClusterToken = "faultinject"
	cfg.TickMs, cfg.ElectionMs = etcdTickMs, etcdElectionMs
	cfg.UnsafeNoFsync = true // a SIGKILL keeps the page cache; tests survive no power cut
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(1)
	}
	err = <-e.Err()
	fmt.Fprintln(os.Stderr, "etcd member:", err)
	os.Exit(1)
}

// etcdCluster is n etcd member processes on loopback ports.
type etcdCluster struct {
	t       *testing.T
	cfgs    []etcdMemberConfig
	clients []string
	procs   []*testserver.Process
	admin   *clientv3.Client
}

func startEtcdCluster(t *testing.T, n int) *etcdCluster {
	t.Helper()
	return startOnFreePorts(t, "etcd cluster", func() (*etcdCluster, error) { return tryEtcdCluster(t, n) })
}

func tryEtcdCluster(t *testing.T, n int) (*etcdCluster, error) {
	e := &etcdCluster{t: t}
	var peers []string
	for i := range n {
		c := etcdMemberConfig{Name: fmt.Sprintf("m%d", i), Dir: t.TempDir(),
			Client: testserver.Addr(testserver.FreePort(t)), Peer: testserver.Addr(testserver.FreePort(t))}
		e.cfgs = append(e.cfgs, c)
		e.clients = append(e.clients, c.Client)
		peers = append(peers, fmt.Sprintf("%s=http://%s", c.Name, c.Peer))
	}
	for i := range e.cfgs {
		e.cfgs[i].Cluster = strings.Join(peers, ",")
		e.procs = append(e.procs, nil)
		e.start(i)
	}
	if err := e.awaitLeader(n, 90*time.Second); err != nil {
		for i, p := range e.procs {
			if p != nil {
				e.kill(i)
			}
		}
		return nil, err
	}
	var err error
	e.admin, err = clientv3.New(clientv3.Config{Endpoints: e.clients, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.admin.Close() })
	return e, nil
}

func (e *etcdCluster) start(i int) {
	b, _ := json.Marshal(e.cfgs[i])
	e.procs[i] = testserver.StartProcess(e.t, "etcd-"+e.cfgs[i].Name, e.cfgs[i].Dir, os.Args[0], []string{"-test.run=^$"},
		etcdMemberEnv+"="+string(b))
}

// kill stops member i with SIGKILL.
func (e *etcdCluster) kill(i int) {
	e.procs[i].Kill()
	e.procs[i] = nil
}

// status returns member i's view: its id and its leader's, or an error.
func (e *etcdCluster) status(i int) (self, leader uint64, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.clients[i]}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, e.clients[i])
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

// leader returns the index of the leader, or -1.
func (e *etcdCluster) leader() int {
	for i := range e.clients {
		if e.procs[i] == nil {
			continue
		}
		if self, leader, err := e.status(i); err == nil && self == leader {
			return i
		}
	}
	return -1
}

// waitLeader waits until n members run and agree on a leader, failing the
// test after 90 s.
func (e *etcdCluster) waitLeader(n int) {
	e.t.Helper()
	if err := e.awaitLeader(n, 90*time.Second); err != nil {
		e.t.Fatalf("etcd cluster: %v", err)
	}
}

// awaitLeader waits until n members run and agree on a leader that runs
// (see awaitServers), polling Status.
func (e *etcdCluster) awaitLeader(n int, timeout time.Duration) error {
	member := func(i int) string { return "member " + e.cfgs[i].Name }
	return awaitServers(e.procs, member, timeout, func() error {
		agree, leaders, alive := 0, map[uint64]bool{}, map[uint64]bool{}
		for i := range e.clients {
			if e.procs[i] == nil {
				continue
			}
			if self, leader, err := e.status(i); err == nil && leader != 0 {
				agree++
				leaders[leader] = true
				alive[self] = true
			}
		}
		if agree >= n && len(leaders) == 1 {
			for l := range leaders {
				if alive[l] {
					return nil // a leader that runs, that every running member follows
				}
			}
		}
		return fmt.Errorf("%d members with a leader (%d leaders)", agree, len(leaders))
	})
}

// etcd holders' leases: etcd's shortest (see etcdElectionMs).
const etcdTTL = 3 * time.Second

func newEtcdRig(t *testing.T, recipe string, ttl time.Duration) *rig {
	t.Helper()
	e := startEtcdCluster(t, 1)
	return etcdRig(t, e, recipe, ttl)
}

func etcdRig(t *testing.T, e *etcdCluster, recipe string, ttl time.Duration) *rig {
	r := newRig(t, "etcd", recipe, ttl)
	r.etcd = e
	r.addrs = e.clients
	r.proto = faultproxy.Raw
	return r
}

func (r *rig) etcdPrefix(key string) string {
	if r.recipe == "naive" {
		return faultinject.NaiveEtcdPrefix + key
	}
	return "dlock/" + key + "/"
}

func (r *rig) otherLeftovers(key string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.etcd.admin.Get(ctx, r.etcdPrefix(key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		r.t.Fatalf("leftovers: %v", err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		left = append(left, string(kv.Key))
	}
	return left
}

// revokeHolder revokes the lease of key's holder (the oldest entry), as
// etcd does when a lease expires.
func (r *rig) revokeHolder(key string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.etcd.admin.Get(ctx, r.etcdPrefix(key), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		r.t.Fatalf("no holder of %s to revoke: %v", key, err)
	}
	if _, err := r.etcd.admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) otherRestart() {
	r.etcd.kill(0)
	r.etcd.start(0)
	r.etcd.waitLeader(len(r.etcd.clients))
}

func newOtherRig(t *testing.T, kind, recipe string) *rig {
	t.Helper()
	if kind == "etcd" {
		return newEtcdRig(t, recipe, etcdTTL)
	}
	t.Fatalf("no rig for %s", kind)
	return nil
}
