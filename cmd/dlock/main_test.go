package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/rogpeppe/go-internal/testscript"
	"go.uber.org/goleak"
)

// TestMain makes the test binary double as the commands the scripts run:
// testscript.Main puts copies of it named dlock, sigchild and critical on
// $PATH, and each copy runs the function of its name. So every `dlock` in
// a script is a real process running main, and `dlock demo` starts its
// workers by running its own binary, as it does in production.
func TestMain(m *testing.M) {
	testscript.Main(leakChecked{m}, map[string]func(){
		"dlock":    main,
		"sigchild": sigchildMain,
		"critical": criticalMain,
		"tick":     tickMain,
		"spawn":    spawnMain,
	})
}

// leakChecked fails the test binary if goroutines outlive the tests: the
// in-process etcd, proxies and clients must all have been shut down.
type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	testserver.StopSharedZooKeeper() // a JVM: not a goroutine of ours
	testserver.StopSharedPostgres()  // started by the scripts' postgres command
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// TestScripts runs testdata/*.txtar against each backend the CLI tests use:
// an embedded etcd (the default backend, nothing to install) and Redis. All
// scripts of one backend share its server; each script uses its own keys.
func TestScripts(t *testing.T) {
	for _, scheme := range []string{"etcd", "redis"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			runScripts(t, startBackend(t, scheme), "testdata")
		})
	}
}

// TestScripts_zk runs testdata/zk/*.txtar against ZooKeeper: what differs
// there, the lease length that the session timeout fixes.
func TestScripts_zk(t *testing.T) {
	runScripts(t, startBackend(t, "zk"), filepath.Join("testdata", "zk"))
}

func runScripts(t *testing.T, b *backend, dir string) {
	testscript.Run(t, testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("DLOCK_BACKEND", b.url)
			env.Setenv("BACKEND_SCHEME", b.scheme)
			env.Setenv("BACKEND_ADDR", b.addr)
			env.Values[backendKey{}] = b
			env.Values[procsKey{}] = newProcs(env)
			// testscript's T is its shim over the script's *testing.T,
			// which it embeds: a testing.TB.
			if tb, ok := env.T().(testing.TB); ok {
				env.Values[scriptT{}] = tb
			}
			return nil
		},
		Cmds: scriptCommands(t),
		// [etcd], [zk]: the scripts run against that backend.
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "etcd", "redis", "zk":
				return b.scheme == cond, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

// backend is the lock server the scripts share.
type backend struct {
	scheme string // etcd or redis
	addr   string // host:port
	url    string
	path   string // appended to a URL built on another address ("/0" for Redis)
}

type backendKey struct{}

// startBackend starts a lock server for the scripts: etcd embedded in this
// process, with the code of `dlock serve`, or redis-server.
func startBackend(t *testing.T, scheme string) *backend {
	t.Helper()
	if !slices.Contains(dlock.Schemes(), scheme) {
		t.Fatalf("the %s backend is not built into dlock", scheme)
	}
	switch scheme {
	case "etcd":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Port 0 is resolved by listening and closing before etcd binds
		// the port: another test's server may take it in between. A few
		// tries with new ports settle it.
		var node *etcdNode
		var err error
		for range 5 {
			node, err = startEtcd(ctx, etcdConfig{listen: "127.0.0.1:0", dataDir: t.TempDir(), log: testLogWriter{t}})
			if !errors.Is(err, errAddrInUse) {
				break
			}
		}
		if err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		t.Cleanup(node.Close)
		return &backend{scheme: "etcd", addr: node.addr, url: node.URL()}
	case "redis":
		testserver.SkipIfShort(t)
		r := testserver.StartRedis(t)
		return &backend{scheme: "redis", addr: r.Addr(), url: r.URL(), path: "/0"}
	case "zk":
		// Leases of one second: the session timeout, which the scripts
		// check dlock run honours.
		z := testserver.SharedZooKeeper(t)
		path := "/dlock-cli?session_timeout=1s"
		return &backend{scheme: "zk", addr: z.Addr(), url: "zk://" + z.Addr() + path, path: path}
	}
	t.Fatalf("no test server for %s", scheme)
	return nil
}

// testLogWriter sends etcd's log lines to the test log, while the test
// runs.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// waitUntil polls cond until it holds or the bound passes. It is for
// conditions that nothing signals (a file another process writes, a
// server-side queue), never for letting time pass.
func waitUntil(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// waitBound bounds every wait in the scripts: far above what any step
// needs on a loaded machine, far below go test's own timeout.
const waitBound = 60 * time.Second

// procs are the background processes of one script.
type procs struct {
	mu      sync.Mutex
	m       map[string]*proc
	proxies map[string]*dlocktest.Proxy
}

type procsKey struct{}

func newProcs(env *testscript.Env) *procs {
	p := &procs{m: map[string]*proc{}}
	env.Defer(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pr := range p.m {
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	})
	return p
}

func (p *procs) get(name string) *proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[name]
}

func (p *procs) add(name string, pr *proc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[name] = pr
}
