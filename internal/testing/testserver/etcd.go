package testserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Etcd is a single-member etcd server process: by default the etcd binary
// of the version etcddlock's client is built against (see EtcdBinary; EtcdBin
// picks another). It listens for clients on a free loopback port and keeps
// its data in a temporary directory.
//
// It runs as a process of its own rather than embedded in the test binary
// so that the etcddlock module needs only etcd's client: a library user
// who imports etcddlock must not download etcd's server for dlock's tests.
//
// Raft ticks are short (50 ms, election 500 ms) so that startup is quick and
// etcd grants leases of one second: its minimum lease TTL is 1.5 election
// timeouts rounded up to whole seconds (2 s with etcd's defaults). fsync is
// off; a restart of the process keeps the data, which is all tests need.
type Etcd struct {
	mu      sync.Mutex
	bin     string
	dir     string
	addr    string // client host:port
	peer    string // peer host:port (listened on by nobody else)
	opts    etcdConfig
	ownsDir bool // remove dir on Stop
	cmd     *exec.Cmd
	exited  chan struct{}
	log     io.Writer
}

// EtcdOption changes how StartEtcd configures the server.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	bin               string // "": EtcdBinary
	certFile, keyFile string
	flags             []string
}

// EtcdBin runs the etcd binary at path (another version, such as
// EtcdDebianBinary's) instead of EtcdBinary's.
func EtcdBin(path string) EtcdOption {
	return func(c *etcdConfig) { c.bin = path }
}

// EtcdTLS makes the client listener speak TLS with the given certificate.
func EtcdTLS(certFile, keyFile string) EtcdOption {
	return func(c *etcdConfig) { c.certFile, c.keyFile = certFile, keyFile }
}

// EtcdFlags passes extra command-line flags to etcd, e.g. "--bcrypt-cost=4".
func EtcdFlags(flags ...string) EtcdOption {
	return func(c *etcdConfig) { c.flags = append(c.flags, flags...) }
}

var (
	sharedEtcdMu sync.Mutex
	sharedEtcd   *Etcd
)

// SharedEtcd returns the etcd server of this test binary, starting it on
// first use (etcd's NewLazyCluster pattern). Its state is shared by every
// test of the package: isolate tests by key. TestMain should call
// StopSharedEtcd after m.Run. Its log is discarded: it outlives the test
// that started it, and t.Logf after a test ends panics.
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
		e, err := startEtcd(EtcdBinary(t), dir, true, io.Discard, nil)
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

// StartEtcd starts an etcd for t alone, logging to t, stopped when t ends.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	SkipIfShort(t)
	var c etcdConfig
	for _, o := range opts {
		o(&c)
	}
	bin := c.bin
	if bin == "" {
		bin = EtcdBinary(t)
	}
	e, err := startEtcd(bin, t.TempDir(), false, &testWriter{t: t}, opts)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

func startEtcd(bin, dir string, ownsDir bool, log io.Writer, opts []EtcdOption) (*Etcd, error) {
	e := &Etcd{bin: bin, dir: dir, ownsDir: ownsDir, log: log}
	for _, o := range opts {
		o(&e.opts)
	}
	var err error
	// A free port may be taken between the check and etcd's bind: try a
	// few pairs.
	for range 3 {
		e.addr, e.peer = Addr(freePort()), Addr(freePort())
		if err = e.start(); err == nil {
			return e, nil
		}
	}
	return nil, err
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (e *Etcd) scheme() string {
	if e.opts.certFile != "" {
		return "https"
	}
	return "http"
}

func (e *Etcd) start() error {
	client := e.scheme() + "://" + e.addr
	peer := "http://" + e.peer
	args := []string{
		"--name=dlocktest",
		"--data-dir=" + filepath.Join(e.dir, "data"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=dlocktest=" + peer,
		"--heartbeat-interval=50",
		"--election-timeout=500",
		"--unsafe-no-fsync",
		"--log-level=error",
	}
	if e.opts.certFile != "" {
		args = append(args, "--cert-file="+e.opts.certFile, "--key-file="+e.opts.keyFile)
	}
	args = append(args, e.opts.flags...)
	cmd := exec.Command(e.bin, args...)
	cmd.Dir = e.dir
	cmd.Stdout, cmd.Stderr = e.log, e.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd (%s): %w", e.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.cmd, e.exited = cmd, exited
	if err := e.waitReady(60 * time.Second); err != nil {
		e.kill()
		return fmt.Errorf("etcd on %s: %w", e.addr, err)
	}
	return nil
}

// waitReady polls etcd's /health until it reports healthy.
func (e *Etcd) waitReady(timeout time.Duration) error {
	hc := &http.Client{
		Timeout: time.Second,
		// The test's own certificate: readiness is not about trust.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		resp, err := hc.Get(e.scheme() + "://" + e.addr + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/health: %s %s", resp.Status, body)
		}
		last = err
		select {
		case <-e.exited:
			return fmt.Errorf("exited before it was ready (last check: %v)", last)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

func (e *Etcd) kill() {
	if e.cmd != nil {
		_ = e.cmd.Process.Kill()
		<-e.exited
		e.cmd = nil
	}
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

// Restart kills the server (SIGKILL) and starts it again on the same ports
// and data directory, as a crash and restart would: etcd keeps its keys,
// leases and revision on disk, so they survive. Connected clients see their
// connections drop and reconnect by themselves.
func (e *Etcd) Restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kill()
	// The ports were ours a moment ago; retry briefly in case the kernel
	// has not released them yet.
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
	e.kill()
	if e.ownsDir {
		_ = os.RemoveAll(e.dir)
	}
}

// EtcdDebianBinary returns the path of Debian's etcd server,
// $DLOCK_ETCD_DEBIAN_BIN when set, or else /usr/bin/etcd from the package
// etcd-server (3.4.23 on Debian 12): a version that revokes leases a new
// leader renewed, which etcddlock refuses. Its flags are those StartEtcd
// passes. A missing binary fails the test.
func EtcdDebianBinary(t testing.TB) string {
	t.Helper()
	p := os.Getenv("DLOCK_ETCD_DEBIAN_BIN")
	if p == "" {
		p = "/usr/bin/etcd"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testserver: Debian's etcd: %v. Install it: apt-get install etcd-server — or run ./test.sh, which does.", err)
	}
	return p
}

var (
	etcdBinOnce sync.Once
	etcdBin     string
	etcdBinErr  error
)

// EtcdBinary returns the path of an etcd server binary: $DLOCK_ETCD_BIN when
// set (./test.sh builds one and sets it), or else one built once per test
// process with `go build go.etcd.io/etcd/server/v3` in this repository's
// internal/tools module, which pins the etcd version that etcddlock's client
// speaks. Building needs the Go toolchain and the module proxy (or a warm
// module cache); a failure fails the test, it never skips it.
func EtcdBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("DLOCK_ETCD_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testserver: DLOCK_ETCD_BIN=%s: %v", p, err)
		}
		return p
	}
	etcdBinOnce.Do(func() { etcdBin, etcdBinErr = buildEtcd() })
	if etcdBinErr != nil {
		t.Fatalf("testserver: %v", etcdBinErr)
	}
	return etcdBin
}

func buildEtcd() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot find the source directory to build etcd in; set DLOCK_ETCD_BIN")
	}
	tools := filepath.Join(filepath.Dir(file), "..", "tools")
	dir, err := os.MkdirTemp("", "dlock-etcd-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/server/v3")
	cmd.Dir = tools
	// The tools module stands alone, even when the tests run in a workspace.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd in %s (or set DLOCK_ETCD_BIN): %v\n%s", tools, err, out)
	}
	// The binary is left in the temp dir: other test processes of the same
	// run may build their own, and the OS cleans temp dirs.
	return bin, nil
}

// testWriter sends a process's output to a test's log while the test runs.
// Stop, run by t.Cleanup, waits for the process and its output, so no
// write comes after the test has ended.
type testWriter struct {
	mu sync.Mutex
	t  testing.TB
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("etcd: %s", p)
	return len(p), nil
}
