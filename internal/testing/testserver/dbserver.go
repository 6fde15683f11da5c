package testserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dbServer is what the SQL servers (Postgres, MariaDB) share: one server
// process in the foreground, in a temporary directory of its own, on a free
// loopback port, whose output goes to a detachableLog; Stop kills it and
// removes the directory; each test takes a database of its own. The
// server's specifics (its binaries, options, ready check and client) stay
// in its own file.
type dbServer struct {
	name    string         // "postgres", "mariadb": temp dir, log prefix, errors
	quit    syscall.Signal // the first signal kill sends
	dir     string         // everything the server writes; removed by Stop
	port    int
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped sync.Once
	dbs     atomic.Int64 // databases made by NewDatabase
}

// makeDir makes the server's temporary directory, dlock-<name>-*, and sub
// inside it.
func (s *dbServer) makeDir(sub string) error {
	var err error
	s.dir, err = os.MkdirTemp("", "dlock-"+s.name+"-")
	if err != nil {
		return fmt.Errorf("%s: temp dir: %w", s.name, err)
	}
	if err := os.Mkdir(filepath.Join(s.dir, sub), 0o700); err != nil {
		s.removeDir()
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// startOnFreePort sets a free port and calls start, three times at most: a
// free port may be taken between the check and the server's bind. When all
// fail it removes the directory and returns the last error.
func (s *dbServer) startOnFreePort(start func() error) error {
	var err error
	for range 3 {
		s.port = freePort()
		if err = start(); err == nil {
			return nil
		}
	}
	s.removeDir()
	return err
}

// run starts cmd, the server, and calls ready (five seconds a call, 50 ms
// apart) until it succeeds, for a minute at most. If the server is not
// ready by then, or exits first, run kills it.
func (s *dbServer) run(cmd *exec.Cmd, ready func(ctx context.Context) error) error {
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s): %w", filepath.Base(cmd.Path), cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(60*time.Second, ready); err != nil {
		s.kill()
		return fmt.Errorf("%s on %s: %w", s.name, s.Addr(), err)
	}
	return nil
}

func (s *dbServer) waitReady(timeout time.Duration, ready func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = ready(ctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited before it was ready (its log is in the test log; last check: %v)", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

// kill sends the server s.quit, then SIGKILL if it has not exited within
// ten seconds, and waits for it to exit.
func (s *dbServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(s.quit)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

func (s *dbServer) removeDir() { _ = os.RemoveAll(s.dir) }

// Stop stops the server and removes its data.
func (s *dbServer) Stop() {
	s.stopped.Do(func() {
		s.kill()
		s.removeDir()
	})
}

// Addr returns the server's host:port.
func (s *dbServer) Addr() string { return Addr(s.port) }

// Port returns the server's port.
func (s *dbServer) Port() int { return s.port }

// newDatabase names a new database, test_<n>, and has create make it,
// within a minute; it fails t with create's output if create fails. what
// names the step in that message.
func (s *dbServer) newDatabase(t testing.TB, what string, create func(ctx context.Context, name string) ([]byte, error)) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := create(ctx, name); err != nil {
		t.Fatalf("testserver: %s %s on %s: %v\n%s", what, name, s.Addr(), err, out)
	}
	return name
}

// sharedServer holds the one server of a kind that a test binary shares
// (SharedPostgres, SharedMariaDB): the first test that asks starts it,
// TestMain stops it.
type sharedServer[S interface{ Stop() }] struct {
	mu      sync.Mutex
	server  S
	started bool
}

// get returns the server, calling start on first use. The server's log
// goes to t's log while start runs and is discarded afterwards: the server
// outlives t, and t.Logf after a test ends panics.
func (h *sharedServer[S]) get(t testing.TB, name string, start func(log io.Writer) (S, error)) S {
	t.Helper()
	SkipIfShort(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		log := &detachableLog{t: t, prefix: name}
		s, err := start(log)
		log.detach()
		if err != nil {
			t.Fatalf("testserver: %v", err)
		}
		h.server, h.started = s, true
	}
	return h.server
}

// stop stops the server get started, if any.
func (h *sharedServer[S]) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		h.server.Stop()
		var none S
		h.server, h.started = none, false
	}
}

// startForTest starts a server for t alone with start, logging to t, and
// stops it when t ends.
func startForTest[S interface{ Stop() }](t testing.TB, name string, start func(log io.Writer) (S, error)) S {
	t.Helper()
	SkipIfShort(t)
	log := &detachableLog{t: t, prefix: name}
	s, err := start(log)
	if err != nil {
		log.detach()
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		log.detach()
	})
	return s
}

// detachableLog writes a server's output to a test's log, a line at a time,
// until detach, and discards it afterwards.
type detachableLog struct {
	mu     sync.Mutex
	t      testing.TB // nil once detached
	prefix string
	part   []byte // a line not yet ended
}

func (w *detachableLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		if w.t != nil {
			w.t.Logf("%s: %s", w.prefix, w.part[:i])
		}
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *detachableLog) detach() {
	w.mu.Lock()
	w.t = nil
	w.mu.Unlock()
}
