package faultinject_test

import (
	"bufio"
	"context"
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
	exited  chan struct{}
	stderr  strings.Builder // guarded by mu
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
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: cfg.Name, cmd: cmd, stdin: stdin, waiting: map[int]chan faultinject.Event{},
		changed: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder %s: %v", cfg.Name, err)
	}
	p.pid = cmd.Process.Pid
	ready := make(chan faultinject.Event, 1)
	go p.read(stdout, ready)
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // works on a stopped process too
		<-p.exited
		p.mu.Lock()
		stderr := p.stderr.String()
		p.mu.Unlock()
		switch {
		case len(raceReportsBeyondUpstream(stderr)) > 0:
			t.Errorf("holder %s: the race detector fired:\n%s", p.name, stderr)
		case strings.Contains(stderr, "DATA RACE"):
			t.Logf("holder %s: only go-zookeeper's known lastZxid race fired (upstream; see raceReportsBeyondUpstream)", p.name)
		case stderr != "" && t.Failed():
			t.Logf("holder %s stderr:\n%s", p.name, stderr)
		}
	})
	select {
	case ev := <-ready:
		if ev.Ev != "ready" {
			t.Fatalf("holder %s: %s: %s", cfg.Name, ev.Ev, ev.Err)
		}
	case <-p.exited:
		t.Fatalf("holder %s exited before it was ready: %s", cfg.Name, p.stderrText())
	case <-time.After(90 * time.Second):
		t.Fatalf("holder %s not ready after 90s", cfg.Name)
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

func (p *proc) read(r io.Reader, ready chan<- faultinject.Event) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev faultinject.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
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

// await waits for a reply, failing the test after timeout.
func (p *proc) await(ch <-chan faultinject.Event, timeout time.Duration, what string) faultinject.Event {
	p.t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-p.exited:
		p.t.Fatalf("holder %s exited while %s: %s", p.name, what, p.stderrText())
	case <-time.After(timeout):
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
		select {
		case <-changed:
		case <-timer.C:
			return faultinject.Event{}, 0, false
		case <-p.exited:
			return faultinject.Event{}, 0, false
		}
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
	case <-time.After(30 * time.Second):
		p.t.Fatalf("holder %s did not exit after close", p.name)
	}
	code := p.cmd.ProcessState.ExitCode()
	if code == raceExitCode && len(raceReportsBeyondUpstream(p.stderrText())) == 0 {
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

// within runs f in a goroutine and returns its result, or fails the test
// after timeout: a watchdog for calls that could hang.
func within[T any](t *testing.T, timeout time.Duration, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v, err := f(ctx)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}
