package demo

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/clients"
	"github.com/dlockdev/dlock/gateway"
)

// The workers of `dlock demo --gateway`, one in each language, beside the
// client they use.
//
//go:embed workers/demo_worker.py workers/DemoWorker.java
var workerSources embed.FS

// ErrMissingTool is what StartGateway returns when python3, javac or java
// cannot be found: the gateway's workers are Python and Java programs.
var ErrMissingTool = errors.New("a tool the gateway's workers need is not installed")

// Tools are the programs StartGateway looks for in PATH, and the Debian
// package that brings each.
var Tools = []struct{ Name, Package string }{
	{"python3", "python3"},
	{"javac", "default-jdk-headless"},
	{"java", "default-jdk-headless"},
}

// Gateway is a lock gateway (package gateway) served on loopback over the
// demo's backend, and what its workers need: the Python client and worker
// written out, the Java client and worker compiled. With Config.Gateway set,
// Run starts its workers through it (Command) and prints the gateway's log
// among its progress lines.
type Gateway struct {
	URL string // http://127.0.0.1:PORT

	dir          string // the workers' files; removed by Close
	python, java string // the interpreters' paths
	gw           *gateway.Gateway
	srv          *http.Server

	mu   sync.Mutex
	logf func(format string, args ...any) // guarded by mu; nil: the log is dropped
}

// StartGateway writes the Python client and worker into a temporary
// directory, compiles the Java client and worker there with javac, and
// serves a gateway over client on a loopback port. Close it when the demo
// is over, then close client. It returns an error wrapping ErrMissingTool
// when python3, javac or java is not in PATH.
func StartGateway(ctx context.Context, client *dlock.Client) (*Gateway, error) {
	paths := map[string]string{}
	for _, t := range Tools {
		p, err := exec.LookPath(t.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not in PATH (Debian package %s)", ErrMissingTool, t.Name, t.Package)
		}
		paths[t.Name] = p
	}
	dir, err := os.MkdirTemp("", "dlock-demo-gateway-")
	if err != nil {
		return nil, err
	}
	g := &Gateway{dir: dir, python: paths["python3"], java: paths["java"]}
	if err := g.prepare(ctx, paths["javac"]); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	log := slog.New(logHandler{g.log})
	if g.gw, err = gateway.New(client, gateway.Logger(log)); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.URL = "http://" + ln.Addr().String()
	g.srv = &http.Server{Handler: g.gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// prepare writes the sources out and compiles the Java ones.
func (g *Gateway) prepare(ctx context.Context, javac string) error {
	write := func(fsys fs.FS, name, dst string) error {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	}
	// The Python worker imports dlockgw from its own directory.
	if err := write(clients.Sources, clients.PythonModule, filepath.Join(g.dir, "python", "dlockgw.py")); err != nil {
		return err
	}
	if err := write(workerSources, "workers/demo_worker.py", filepath.Join(g.dir, "python", "demo_worker.py")); err != nil {
		return err
	}
	javaFiles := []string{filepath.Join(g.dir, "java", "DemoWorker.java")}
	if err := write(workerSources, "workers/DemoWorker.java", javaFiles[0]); err != nil {
		return err
	}
	entries, err := fs.ReadDir(clients.Sources, clients.JavaSources)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dst := filepath.Join(g.dir, "java", filepath.FromSlash(clients.JavaSources), e.Name())
		if err := write(clients.Sources, path.Join(clients.JavaSources, e.Name()), dst); err != nil {
			return err
		}
		javaFiles = append(javaFiles, dst)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := append([]string{"-d", filepath.Join(g.dir, "classes")}, javaFiles...)
	if out, err := exec.CommandContext(ctx, javac, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("javac: compile the Java client and worker: %w\n%s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Language returns the language of the worker with index i (1, 2, …):
// odd ones are Python, even ones Java.
func Language(i int) string {
	if i%2 == 1 {
		return "Python"
	}
	return "Java"
}

// Command returns the command that runs worker w: a Python or a Java
// program (Language(w.Index)) taking its lock through the gateway.
func (g *Gateway) Command(w WorkerSpec) *exec.Cmd {
	args := []string{g.URL, w.Ledger, w.Name, strconv.FormatInt(w.JobTime.Milliseconds(), 10)}
	if Language(w.Index) == "Python" {
		cmd := exec.Command(g.python, append([]string{filepath.Join(g.dir, "python", "demo_worker.py")}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		return cmd
	}
	// A small heap and the quick compiler: the JVM starts sooner, and four
	// of them share a small machine.
	return exec.Command(g.java, append([]string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m",
		"-cp", filepath.Join(g.dir, "classes"), "DemoWorker"}, args...)...)
}

// Close stops the gateway, releasing the leases it still holds, and removes
// the workers' files.
func (g *Gateway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.gw.Close(ctx)
	_ = g.srv.Close()
	return errors.Join(err, os.RemoveAll(g.dir))
}

// setLog sends the gateway's log lines to logf (nil: drop them).
func (g *Gateway) setLog(logf func(format string, args ...any)) {
	g.mu.Lock()
	g.logf = logf
	g.mu.Unlock()
}

func (g *Gateway) log(line string) {
	g.mu.Lock()
	logf := g.logf
	g.mu.Unlock()
	if logf != nil {
		logf("%s", line)
	}
}

// logHandler passes each record to fn as one line, its message then its
// attributes; the demo stamps its lines itself.
type logHandler struct{ fn func(line string) }

func (h logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.fn(b.String())
	return nil
}

// The gateway logs no groups and adds no attributes: kept flat.
func (h logHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logHandler) WithGroup(string) slog.Handler      { return h }
