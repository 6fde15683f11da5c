package clienttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/gateway"
	"github.com/dlockdev/dlock/internal/testing/gwenv"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	_ "github.com/dlockdev/dlock/redisdlock"
)

// redisAddr is the Redis every test of the package shares, each on keys
// of its own.
var redisAddr string

func TestMain(m *testing.M) {
	gwenv.Main(m, "clienttest", &redisAddr, func() {
		if javaOut != "" {
			os.RemoveAll(javaOut)
		}
	})
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

// env is a gateway in front of the shared Redis (gwenv.Env).
type env struct{ *gwenv.Env }

func newEnv(t *testing.T, opts ...gateway.Option) *env {
	t.Helper()
	return newEnvOn(t, "redis://"+redisAddr+"/0", opts...)
}

// newEnvOn is newEnv in front of the backend at url.
func newEnvOn(t *testing.T, url string, opts ...gateway.Option) *env {
	t.Helper()
	return &env{gwenv.Start(t, url, "gwc", func(c *dlock.Client) (gwenv.Gateway, error) {
		return gateway.New(c, opts...)
	}, nil)}
}

// eventually waits until cond holds, at most waitFor.
func (e *env) eventually(what string, cond func() bool) {
	e.T.Helper()
	gwenv.Eventually(e.T, waitFor, what, cond)
}

// deleteKeys deletes the Redis keys of key behind its holder's back: the
// backend ends the lease.
func (e *env) deleteKeys(key string) {
	e.T.Helper()
	ctx := context.Background()
	out, err := testserver.RedisCommand(ctx, redisAddr, "KEYS", "*"+key+"*")
	if err != nil {
		e.T.Fatal(err)
	}
	for _, k := range strings.Fields(out) {
		if _, err := testserver.RedisCommand(ctx, redisAddr, "DEL", k); err != nil {
			e.T.Fatal(err)
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
