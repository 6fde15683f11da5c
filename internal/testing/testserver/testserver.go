// Package testserver starts real lock servers (redis-server, ZooKeeper, etcd)
// for tests: on a free loopback port, in a temporary directory, with their
// logs sent to the test log, and stopped when the test ends.
//
// A missing server binary fails the test with the command that installs it;
// it never skips, because CI must not pass by testing nothing. Only
// `go test -short` skips server tests.
package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// LookBinary finds a server binary: first in the environment variable env
// (a path), then name on PATH, then the fallbacks. It fails the test with
// install instructions when none exists.
func LookBinary(t testing.TB, env, name, install string, fallbacks ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testserver: %s=%s: %v", env, p, err)
		}
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range fallbacks {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("testserver: %s not found on PATH (or in $%s). Install it: %s — or run ./test.sh, which does.", name, env, install)
	return ""
}

// SkipIfShort skips server tests under go test -short.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real server; skipped with -short")
	}
}

// Process is a running server process whose output goes to a test log.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu  sync.Mutex
	log func(string) // nil once the test has ended
}

// StartProcess starts bin with args in dir, sending its output to t.Logf
// while the test runs. The process is killed when the test ends.
func StartProcess(t testing.TB, name, dir, bin string, args []string, env ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &Process{cmd: cmd, done: make(chan struct{}), log: func(s string) { t.Logf("%s: %s", name, s) }}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testserver: start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			if p.log != nil {
				p.log(sc.Text())
			}
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		p.mu.Lock()
		p.log = nil // t.Logf after the test ends panics
		p.mu.Unlock()
	})
	return p
}

// Kill stops the process with SIGKILL and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// WaitReady calls ready until it returns nil, the process exits, or the
// timeout passes.
func (p *Process) WaitReady(timeout time.Duration, ready func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
		last = ready(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("server exited before it was ready (%v); last check: %w", p.err, last)
		case <-ctx.Done():
			return fmt.Errorf("server not ready after %v: %w", timeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DialReady is a ready check that succeeds once addr accepts TCP connections.
func DialReady(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// Addr formats a loopback address.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
