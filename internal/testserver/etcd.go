package testserver

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a single-member etcd running inside the test binary
// (go.etcd.io/etcd/server/v3/embed): nothing to install. It listens for
// clients on a free loopback port and keeps its data in a temporary
// directory. Its log is discarded: a shared server outlives the test that
// started it, and t.Logf after a test ends panics.
//
// Raft ticks are short (50 ms, election 500 ms) so that startup is quick and
// etcd grants leases of one second: its minimum lease TTL is 1.5 election
// timeouts rounded up to whole seconds (2 s with etcd's defaults). fsync is
// off; a restart of the process keeps the data, which is all tests need.
type Etcd struct {
	mu        sync.Mutex
	cfg       *embed.Config
	srv       *embed.Etcd
	addr      string // client host:port
	ownsDir   bool   // remove cfg.Dir on Stop
	configure []func(*embed.Config)
}

var (
	sharedEtcdMu sync.Mutex
	sharedEtcd   *Etcd
)

// SharedEtcd returns the embedded etcd of this test binary, starting it on
// first use (etcd's NewLazyCluster pattern). Its state is shared by every
// test of the package: isolate tests by key. TestMain should call
// StopSharedEtcd after m.Run.
func SharedEtcd(t testing.TB) *Etcd {
	t.Helper()
	SkipIfShort(t)
	sharedEtcdMu.Lock()
	defer sharedEtcdMu.Unlock()
	if sharedEtcd == nil {
		dir, err := os.MkdirTemp("", "dlock-etcd-")
		if err != nil {
			t.Fatalf("testserver: etcd data dir: %v", err)
		}
		e, err := startEtcd(dir, true, nil)
		if err != nil {
			_ = os.RemoveAll(dir)
			t.Fatalf("testserver: %v", err)
		}
		sharedEtcd = e
	}
	return sharedEtcd
}

// StopSharedEtcd stops the server started by SharedEtcd, if any, and removes
// its data.
func StopSharedEtcd() {
	sharedEtcdMu.Lock()
	defer sharedEtcdMu.Unlock()
	if sharedEtcd != nil {
		sharedEtcd.Stop()
		sharedEtcd = nil
	}
}

// StartEtcd starts an embedded etcd for t alone, stopped when t ends. The
// configure functions may change the configuration before the start, for
// example to enable TLS on the client listener (they run again on Restart).
func StartEtcd(t testing.TB, configure ...func(*embed.Config)) *Etcd {
	t.Helper()
	SkipIfShort(t)
	e, err := startEtcd(t.TempDir(), false, configure)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

func startEtcd(dir string, ownsDir bool, configure []func(*embed.Config)) (*Etcd, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcd: free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	e := &Etcd{addr: Addr(port), ownsDir: ownsDir, configure: configure}
	e.cfg = e.config(dir)
	if err := e.start(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Etcd) config(dir string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = "dlocktest"
	cfg.Dir = dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: e.addr}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	// A single member talks to no peer: advertise a peer URL (etcd needs
	// one) but do not listen on it, so that no second port can collide.
	cfg.ListenPeerUrls = nil
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	cfg.UnsafeNoFsync = true
	for _, f := range e.configure {
		f(cfg)
	}
	return cfg
}

func (e *Etcd) start() error {
	srv, err := embed.StartEtcd(e.cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd on %s: %w", e.addr, err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("embedded etcd on %s failed: %w", e.addr, err)
	case <-time.After(60 * time.Second):
		srv.Close()
		return fmt.Errorf("embedded etcd on %s not ready after 60s", e.addr)
	}
	e.srv = srv
	return nil
}

// Addr returns the client host:port.
func (e *Etcd) Addr() string { return e.addr }

// Port returns the client port.
func (e *Etcd) Port() int {
	_, p, _ := net.SplitHostPort(e.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// URL returns the dlock backend URL of the server, etcd://host:port.
func (e *Etcd) URL() string { return "etcd://" + e.addr }

// Restart stops the server and starts it again on the same port and data
// directory, as a crash and restart would: etcd keeps its keys, leases and
// revision on disk, so they survive. Connected clients see their
// connections drop and reconnect by themselves.
func (e *Etcd) Restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	e.cfg = e.config(e.cfg.Dir)
	// The port was ours a moment ago; retry briefly in case the kernel has
	// not released it yet.
	var err error
	for range 50 {
		if err = e.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Stop stops the server. A server started by SharedEtcd also loses its
// data directory.
func (e *Etcd) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		e.srv.Close()
		e.srv = nil
	}
	if e.ownsDir {
		_ = os.RemoveAll(e.cfg.Dir)
	}
}
