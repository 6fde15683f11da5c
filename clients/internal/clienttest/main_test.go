package clienttest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/leakcheck"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
)

// redisAddr is the Redis every test of the package shares, each on keys
// of its own.
var redisAddr string

func TestMain(m *testing.M) {
	addr, stop, err := testserver.StartRedisForMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "clienttest:", err)
		os.Exit(1)
	}
	redisAddr = addr
	code := m.Run()
	stop()
	testserver.StopSharedEtcd()
	if javaOut != "" {
		os.RemoveAll(javaOut)
	}
	leakcheck.Exit(code)
}

// waitFor bounds every wait of the tests: a condition not met by then
// fails the test, as a hang would otherwise.
const waitFor = 30 * time.Second

// clientsDir is the clients/ directory of this tree.
var clientsDir = func() string {
	d, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return d
}()

// env is a gateway in front of the shared Redis, served by httptest, and a
// Client of its own (the library used directly) to look at the backend.
type env struct {
	t      *testing.T
	gw     *gateway.Gateway
	srv    *httptest.Server
	direct *dlock.Client
	prefix string
}

var keySeq atomic.Int64

func newEnv(t *testing.T, opts ...gateway.Option) *env {
	t.Helper()
	return newEnvOn(t, "redis://"+redisAddr+"/0", opts...)
}

// newEnvOn is newEnv in front of the backend at url.
func newEnvOn(t *testing.T, url string, opts ...gateway.Option) *env {
	t.Helper()
	ctx := context.Background()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := gw.Close(context.Background()); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
		c.Close()
		direct.Close()
	})
	return &env{t: t, gw: gw, srv: srv, direct: direct, prefix: fmt.Sprintf("gwc/%s/%d/", t.Name(), keySeq.Add(1))}
}

func (e *env) key(name string) string { return e.prefix + name }

// info is the backend's view of key, through the library.
func (e *env) info(key string) *dlock.LockInfo {
	e.t.Helper()
	in, err := e.direct.Inspect(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// eventually waits until cond holds, at most waitFor.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("not within %v: %s", waitFor, what)
		}
		time.Sleep(delay) // polling the backend's state, which sends no event
	}
}

// deleteKeys deletes the Redis keys of key behind its holder's back: the
// backend ends the lease.
func (e *env) deleteKeys(key string) {
	e.t.Helper()
	ctx := context.Background()
	out, err := testserver.RedisCommand(ctx, redisAddr, "KEYS", "*"+key+"*")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, k := range strings.Fields(out) {
		if _, err := testserver.RedisCommand(ctx, redisAddr, "DEL", k); err != nil {
			e.t.Fatal(err)
		}
	}
}

// tool finds a client's toolchain program, or fails the test with the
// package that installs it: CI must run these tests, never skip them.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: apt-get install -y %s (test.sh installs it)", name, pkg)
	}
	return p
}

var (
	javaOnce sync.Once
	javaOut  string
	javaErr  error
)

// javaClasses compiles the Java client, its example and the test driver
// once per test binary, and returns the class directory.
func javaClasses(t *testing.T) string {
	t.Helper()
	javac := tool(t, "javac", "default-jdk-headless")
	javaOnce.Do(func() {
		javaOut, javaErr = os.MkdirTemp("", "clienttest-java")
		if javaErr != nil {
			return
		}
		var srcs []string
		for _, d := range []string{"java/src", "java/examples", "java/test"} {
			javaErr = filepath.WalkDir(filepath.Join(clientsDir, d), func(p string, _ os.DirEntry, err error) error {
				if err == nil && strings.HasSuffix(p, ".java") {
					srcs = append(srcs, p)
				}
				return err
			})
			if javaErr != nil {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, javac, append([]string{"-Xlint:all", "-Werror", "-d", javaOut}, srcs...)...).CombinedOutput()
		if err != nil {
			javaErr = fmt.Errorf("javac: %v\n%s", err, out)
		}
	})
	if javaErr != nil {
		t.Fatal(javaErr)
	}
	return javaOut
}
