// Package testproc runs a part of a test in a child process that the test
// can freeze with SIGSTOP and thaw with SIGCONT: the lock holder paused past
// its TTL (a garbage-collection pause, a frozen VM) that the fencing tests
// need. The child is the test binary itself, started again with a role name;
// TestMain hands it to Main, which runs the role instead of the tests.
//
// Parent and child talk in lines: the child's Say lines arrive at the
// parent's Expect, the parent's Tell lines at the child's Await. The
// child's stderr goes to the test log, and is kept for Stderr.
//
// In the test package:
//
//	func TestMain(m *testing.M) {
//		testproc.Main(m, map[string]testproc.Role{"holder": holder})
//	}
//
//	func holder(ctx context.Context, p *testproc.Peer) error {
//		lease, err := client.Lock(ctx, p.Env("KEY"))
//		…
//		p.Say("token %d", lease.Token())
//		p.Await("write")
//		…
//	}
//
// and in a test:
//
//	h := testproc.Start(t, "holder", "KEY=orders")
//	token := h.Expect(t, "token")
//	h.Freeze(t)
//	…
//	h.Thaw(t)
//	h.Tell(t, "write")
package testproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// roleEnv carries the role's name to the child; envPrefix its variables.
const (
	roleEnv   = "DLOCK_TESTPROC_ROLE"
	envPrefix = "DLOCK_TESTPROC_"
)

// Timeout bounds every wait of the parent for a child's line or exit, and
// the child's whole run: a test never hangs on a child that went wrong.
const Timeout = 2 * time.Minute

// Role is the code a child runs. A nil return exits the child with status
// 0; an error is printed to stderr and exits it with 1.
type Role func(ctx context.Context, p *Peer) error

// Main runs the role named in the environment when the process is a child
// started by Start, and exits; otherwise it runs the tests (m.Run) and exits
// with their status.
func Main(m *testing.M, roles map[string]Role) {
	RunChild(roles)
	os.Exit(m.Run())
}

// RunChild runs the role named in the environment and exits, when the
// process is a child started by Start; otherwise it returns at once. A
// TestMain that sets up servers around m.Run calls it first:
//
//	func TestMain(m *testing.M) {
//		testproc.RunChild(roles)
//		… setup, m.Run(), teardown …
//	}
func RunChild(roles map[string]Role) {
	name, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	role, ok := roles[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testproc: no role %q\n", name)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	p := &Peer{in: bufio.NewScanner(os.Stdin), out: os.Stdout}
	if err := role(ctx, p); err != nil {
		fmt.Fprintf(os.Stderr, "testproc: role %s: %v\n", name, err)
		cancel()
		os.Exit(1)
	}
	cancel()
	os.Exit(0)
}

// Peer is the child's end of the conversation.
type Peer struct {
	in  *bufio.Scanner
	mu  sync.Mutex
	out io.Writer
}

// Env returns the child's variable name, as given to Start ("NAME=value").
func (p *Peer) Env(name string) string { return os.Getenv(envPrefix + name) }

// Say sends the parent one line.
func (p *Peer) Say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// Await reads the parent's lines until one equals line. It returns an error
// when the parent closed stdin first.
func (p *Peer) Await(line string) error {
	for p.in.Scan() {
		if p.in.Text() == line {
			return nil
		}
	}
	return fmt.Errorf("stdin closed before %q", line)
}

// Child is the parent's end: one child process.
type Child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited
	err   error         // Wait's result, set before done is closed

	mu      sync.Mutex
	stderr  strings.Builder // all the child wrote to stderr; guarded by mu
	lines   []string        // the child's stdout lines not yet taken by Expect
	eof     bool            // stdout has ended
	arrived chan struct{}   // closed and replaced when lines or eof change
}

// Start starts the test binary again as a child that runs role, with the
// variables env ("NAME=value", read back with Peer.Env). The child is
// killed when the test ends.
func Start(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	for _, kv := range env {
		cmd.Env = append(cmd.Env, envPrefix+kv)
	}
	c := &Child{name: role, cmd: cmd, done: make(chan struct{}), arrived: make(chan struct{})}
	cmd.Stderr = logWriter{t, c}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("testproc: %s: %v", role, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("testproc: %s: %v", role, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testproc: start %s: %v", role, err)
	}
	c.stdin = stdin
	go func() {
		// The lines are kept however many arrive, so the child never
		// blocks on a full pipe; cmd.Wait comes after the last read, as
		// os/exec requires.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.push(sc.Text(), false)
		}
		c.push("", true)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // SIGKILL ends a stopped process too
		<-c.done
	})
	return c
}

// Expect waits for the child's next line beginning with prefix and a space
// (or equal to prefix), skipping others, and returns the rest of it. It
// fails the test when the child exits first or Timeout passes.
func (c *Child) Expect(t testing.TB, prefix string) string {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		for len(c.lines) > 0 {
			line := c.lines[0]
			c.lines = c.lines[1:]
			if line == prefix {
				c.mu.Unlock()
				return ""
			}
			if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
				c.mu.Unlock()
				return rest
			}
			t.Logf("testproc: %s: %s", c.name, line)
		}
		eof, arrived := c.eof, c.arrived
		c.mu.Unlock()
		if eof {
			<-c.done
			t.Fatalf("testproc: %s exited (%v) before saying %q", c.name, c.err, prefix)
		}
		select {
		case <-arrived:
		case <-timer.C:
			t.Fatalf("testproc: %s said no %q within %v", c.name, prefix, Timeout)
		}
	}
}

// push adds a line from the child's stdout, or marks its end.
func (c *Child) push(line string, eof bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if eof {
		c.eof = true
	} else {
		c.lines = append(c.lines, line)
	}
	close(c.arrived)
	c.arrived = make(chan struct{})
}

// Tell sends the child one line.
func (c *Child) Tell(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("testproc: tell %s %q: %v", c.name, line, err)
	}
}

// Freeze stops the child with SIGSTOP: its lease renewals stop with it,
// and its lease runs out on the server while it sleeps.
func (c *Child) Freeze(t testing.TB) { c.signal(t, syscall.SIGSTOP) }

// Thaw resumes a frozen child with SIGCONT.
func (c *Child) Thaw(t testing.TB) { c.signal(t, syscall.SIGCONT) }

func (c *Child) signal(t testing.TB, s syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		t.Fatalf("testproc: %v to %s: %v", s, c.name, err)
	}
}

// Wait closes the child's stdin and waits for it to exit; it fails the test
// unless the child exited with status 0 within Timeout.
func (c *Child) Wait(t testing.TB) {
	t.Helper()
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(Timeout):
		t.Fatalf("testproc: %s did not exit within %v", c.name, Timeout)
	}
	if c.err != nil {
		t.Fatalf("testproc: %s: %v", c.name, c.err)
	}
}

// Stderr returns what the child has written to its stderr: after Wait, all
// of it. The tests that the library prints nothing assert on it.
func (c *Child) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// logWriter sends a child's stderr to the test log, line by line, and keeps
// it for Stderr.
type logWriter struct {
	t testing.TB
	c *Child
}

func (w logWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	w.c.stderr.Write(p)
	w.c.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("%s: %s", w.c.name, line)
	}
	return len(p), nil
}
