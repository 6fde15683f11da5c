package faultinject_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/zkrace"
)

// proc is a holder process.
type proc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan faultinject.Event // guarded by mu
	notices []faultinject.Event            // done, lease…; guarded by mu
	changed chan struct{}                  // closed and replaced when notices grows; guarded by mu
	stderr  strings.Builder                // guarded by mu

	// reaped is closed once the process has been waited for. exited is
	// closed after that, once the reader has also delivered every line
	// the holder wrote before it went: a reply or notice written just
	// before exiting is never beaten by the exit, however the two
	// goroutines are scheduled (see await).
	reaped chan struct{}
	exited chan struct{}

	// beforeDeliver, if set, is called by the reader with each event just
	// before delivering it: a test seam that lets TestAwaitReplyBeforeExit
	// hold a reply back until the exit has been noticed.
	beforeDeliver func(p *proc, ev faultinject.Event)
}

// startHolder starts a holder process: the test binary itself, or the weak
// holder program when weak is set.
func startHolder(t *testing.T, cfg faultinject.HolderConfig, weak bool) *proc {
	t.Helper()
	exe := os.Args[0]
	if weak {
		exe = weakBinary(t)
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), faultinject.HolderEnv+"="+string(b))
	return launch(t, cfg.Name, cmd, nil)
}

// launch starts cmd as the holder process called name, which speaks the
// holder protocol on its stdin and stdout, and waits until it is ready.
// beforeDeliver, if not nil, becomes the process's test seam.
func launch(t *testing.T, name string, cmd *exec.Cmd, beforeDeliver func(*proc, faultinject.Event)) *proc {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The holder's stdout is a pipe of our own rather than cmd.StdoutPipe:
	// Wait closes a StdoutPipe as soon as the process has exited, which
	// would throw away lines still in the pipe that the reader has not
	// read yet (the reply to close, typically). Ours is closed by the
	// reader, after EOF. os.Pipe's ends are close-on-exec, so no other
	// process started meanwhile inherits the write end: EOF comes when
	// the holder exits.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	p := &proc{t: t, name: name, cmd: cmd, stdin: stdin, waiting: map[int]chan faultinject.Event{},
		changed: make(chan struct{}), reaped: make(chan struct{}), exited: make(chan struct{}),
		beforeDeliver: beforeDeliver}
	cmd.Stderr = &lockedWriter{p: p}
	err = cmd.Start()
	_ = w.Close() // the holder has its own copy
	if err != nil {
		_ = stdout.Close()
		t.Fatalf("start holder %s: %v", name, err)
	}
	p.pid = cmd.Process.Pid
	ready := make(chan faultinject.Event, 1)
	go func() {
		_ = cmd.Wait()
		close(p.reaped)
	}()
	go func() {
		// The process has exited, for the harness, only once both its
		// exit status and the end of its output are in.
		p.read(stdout, ready)
		<-p.reaped
		_ = stdout.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // works on a stopped process too
		<-p.exited
		p.mu.Lock()
		stderr := p.stderr.String()
		p.mu.Unlock()
		switch {
		case len(zkrace.Others(stderr)) > 0:
			t.Errorf("holder %s: the race detector fired:\n%s", p.name, stderr)
		case strings.Contains(stderr, "DATA RACE"):
			t.Logf("holder %s: only go-zookeeper's known lastZxid race fired (upstream; see package zkrace)", p.name)
		case stderr != "" && t.Failed():
			t.Logf("holder %s stderr:\n%s", p.name, stderr)
		}
	})
	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	var ev faultinject.Event
	select {
	case ev = <-ready:
	case <-p.exited:
		// A fatal event written before exiting is in ready by now.
		select {
		case ev = <-ready:
		default:
			t.Fatalf("holder %s exited before it was ready: %s", name, p.stderrText())
		}
	case <-timer.C:
		t.Fatalf("holder %s not ready after 90s", name)
	}
	if ev.Ev != "ready" {
		t.Fatalf("holder %s: %s: %s", name, ev.Ev, ev.Err)
	}
	return p
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.stderr.Len() < 64<<10 {
		w.p.stderr.Write(b)
	}
	return len(b), nil
}

func (p *proc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// read delivers the holder's events, in order, until the end of its output:
// replies to their waiting channels, notices to the list. It returns only at
// EOF (after a line too long to parse, it discards the rest), so that a
// holder never blocks on a full pipe and every line is delivered before
// exited is closed.
func (p *proc) read(r io.Reader, ready chan<- faultinject.Event) {
	defer func() { _, _ = io.Copy(io.Discard, r) }()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev faultinject.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if p.beforeDeliver != nil {
			p.beforeDeliver(p, ev)
		}
		switch {
		case ev.Ev == "ready" || ev.Ev == "fatal":
			select {
			case ready <- ev:
			default:
			}
		case ev.ID != 0:
			p.mu.Lock()
			ch := p.waiting[ev.ID]
			delete(p.waiting, ev.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- ev
			}
		default:
			p.mu.Lock()
			p.notices = append(p.notices, ev)
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
	}
}

// send sends c and returns the channel its reply arrives on.
func (p *proc) send(c faultinject.Command) <-chan faultinject.Event {
	p.mu.Lock()
	p.nextID++
	c.ID = p.nextID
	ch := make(chan faultinject.Event, 1)
	p.waiting[c.ID] = ch
	p.mu.Unlock()
	b, _ := json.Marshal(c)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Errorf("holder %s: send %s: %v", p.name, c.Op, err)
	}
	return ch
}

// await waits for a reply, failing the test after timeout (a watchdog) or
// when the holder exited without sending it.
func (p *proc) await(ch <-chan faultinject.Event, timeout time.Duration, what string) faultinject.Event {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ev := <-ch:
		return ev
	case <-p.exited:
		// exited is closed only after the reader has delivered every line
		// the holder wrote, so a reply written before the exit (the reply
		// to close, say) is in ch now: when both are ready, select may
		// have picked this case.
		select {
		case ev := <-ch:
			return ev
		default:
		}
		p.t.Fatalf("holder %s exited while %s: %s", p.name, what, p.stderrText())
	case <-timer.C:
		p.t.Fatalf("holder %s: no answer after %v while %s", p.name, timeout, what)
	}
	return faultinject.Event{}
}

// call sends c and waits for its reply.
func (p *proc) call(c faultinject.Command, timeout time.Duration) faultinject.Event {
	p.t.Helper()
	return p.await(p.send(c), timeout, c.Op)
}

// notice waits for a notice that satisfies match, among those received
// since index from; it returns the notice and its index.
func (p *proc) notice(from int, timeout time.Duration, what string, match func(faultinject.Event) bool) (faultinject.Event, int, bool) {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		// Looked at before the scan: once the holder has exited, every
		// notice it wrote is in the list, and one last scan is final.
		gone := closed(p.exited)
		p.mu.Lock()
		for i := from; i < len(p.notices); i++ {
			if match(p.notices[i]) {
				ev := p.notices[i]
				p.mu.Unlock()
				return ev, i, true
			}
		}
		from = len(p.notices)
		changed := p.changed
		p.mu.Unlock()
		if gone {
			return faultinject.Event{}, 0, false
		}
		select {
		case <-changed:
		case <-timer.C:
			return faultinject.Event{}, 0, false
		case <-p.exited:
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// mark returns the index of the holder's next notice: notice(p.mark(), …)
// sees only the notices that come after the call.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.notices)
}

// awaitDone waits for the holder's Done notice among those since from.
func (p *proc) awaitDone(from int, timeout time.Duration, what string) (faultinject.Event, bool) {
	p.t.Helper()
	ev, _, ok := p.notice(from, timeout, what, func(e faultinject.Event) bool { return e.Ev == "done" })
	return ev, ok
}

// leases returns the lease records the holder has reported.
func (p *proc) leases() []faultinject.LeaseRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []faultinject.LeaseRecord
	for _, ev := range p.notices {
		if ev.Lease != nil {
			out = append(out, *ev.Lease)
		}
	}
	return out
}

func (p *proc) signal(s syscall.Signal) {
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("holder %s: %v: %v", p.name, s, err)
	}
}

// freeze stops the holder with SIGSTOP: its lease renewal stops with it.
func (p *proc) freeze() { p.signal(syscall.SIGSTOP) }

// thaw resumes a frozen holder.
func (p *proc) thaw() { p.signal(syscall.SIGCONT) }

// kill ends the holder with SIGKILL: it cleans nothing up.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// close closes the holder's client and returns the goroutines it leaked:
// those still running 20 s after Close.
func (p *proc) close() string {
	p.t.Helper()
	return p.closeEv(false).Leaks
}

// closeEv closes the holder's client and returns the close report. With
// quick, it does not wait for goroutines that outlive Close.
func (p *proc) closeEv(quick bool) faultinject.Event {
	p.t.Helper()
	ev := p.call(faultinject.Command{Op: "close", Quick: quick}, 2*time.Minute)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute): // a watchdog: it exits at once
		p.t.Fatalf("holder %s did not exit after close", p.name)
	}
	code := p.cmd.ProcessState.ExitCode()
	if code == raceExitCode && len(zkrace.Others(p.stderrText())) == 0 {
		code = 0 // only the upstream race, which the cleanup logs
	}
	if code != 0 {
		p.t.Errorf("holder %s exited with status %d after close:\n%s", p.name, code, p.stderrText())
	}
	if ev.Lingered != "" {
		p.t.Logf("holder %s: goroutines outlived Close by %v: %s", p.name, ev.LingerFor.Round(time.Millisecond), ev.Lingered)
	}
	return ev
}

// The weak holder program, built once per test binary.
var weak struct {
	once sync.Once
	dir  string
	path string
	err  error
	took time.Duration
}

// weakBinary builds faultinject/weakholder with -tags dlock_weak (and
// -race when this binary has it, which reuses the build cache of the test
// run) and returns its path.
func weakBinary(t *testing.T) string {
	t.Helper()
	weak.once.Do(func() {
		start := time.Now()
		weak.dir, weak.err = os.MkdirTemp("", "dlock-weakholder-")
		if weak.err != nil {
			return
		}
		weak.path = filepath.Join(weak.dir, "weakholder")
		args := []string{"build", "-tags", "dlock_weak", "-o", weak.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./weakholder")
		// The go command that runs these tests: on PATH, or next to the
		// standard library this binary was built from.
		gobin, err := exec.LookPath("go")
		if err != nil {
			//lint:ignore SA1019 a test binary runs where it was built, beside its GOROOT
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(gobin, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			weak.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		weak.took = time.Since(start)
	})
	if weak.err != nil {
		t.Fatalf("build the weak holder: %v", weak.err)
	}
	return weak.path
}

func removeWeakBinary() {
	if weak.dir != "" {
		_ = os.RemoveAll(weak.dir)
	}
}
