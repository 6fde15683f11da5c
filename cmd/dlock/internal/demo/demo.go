// Package demo is `dlock demo`: the seeds' scenario — a scheduled job that
// closes expired orders and must run on one instance at a time — played by
// real worker processes against a shared ledger, with the two classic
// faults injected: a holder killed mid-job, and a holder frozen for longer
// than its lease (a long GC pause) that wakes up and writes anyway.
//
// The parent process runs the Ledger, starts the workers, injects the
// faults, prints what happens, and computes a Verdict from what the ledger
// saw. Each worker is a separate process running RunWorker; or, with
// Config.Gateway (`dlock demo --gateway`), a Python or Java program taking
// its lock through a lock gateway with the clients of clients/.
package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The faults hit these jobs (numbered in the order the ledger saw them
// start): the second job's holder is killed, the fourth's is frozen. Job 3
// redoes the killed job's order; job 5 redoes the frozen one's.
const (
	killJob   = 2
	freezeJob = 4
)

// MinWorkers and MinOrders are what the fault schedule needs: one worker
// is killed and one frozen while another carries on, and the frozen job
// must exist.
const (
	MinWorkers = 3
	MinOrders  = 3
)

// WorkerSpec is what one worker process needs to know.
type WorkerSpec struct {
	Index   int // 1, 2, …
	Name    string
	Backend string // lock server URL
	Ledger  string // base URL of the ledger
	TTL     time.Duration
	JobTime time.Duration
	DB      string // the orders' database (Config.DB); "" when they are in the ledger
	Fencing bool   // with DB: close through sqlfence
}

// Config configures Run.
type Config struct {
	Backend     string // lock server URL for the workers
	BackendDesc string // how to name it in the output
	Workers     int
	Orders      int
	TTL         time.Duration
	JobTime     time.Duration
	Fencing     bool          // the store rejects stale tokens
	Timeout     time.Duration // bound on the whole run
	Out         io.Writer     // progress lines, and the workers' own output
	// DB, if set, is the database to close the orders in, through
	// sqlfence, instead of the ledger: the path of a SQLite file, which
	// must not exist, or a postgres:// URL, where the demo sets up tables
	// of its own (CreateOrderDB) and removes them at the end unless
	// KeepTables.
	DB         string
	KeepTables bool
	// Worker returns the command that runs one worker process.
	Worker func(WorkerSpec) *exec.Cmd
	// Gateway, if set, is the gateway the workers take their lock
	// through (Worker runs them with Gateway.Command): Run names it in
	// its introduction and prints its log among the progress lines.
	Gateway *Gateway
}

// demo is one run's state.
type demo struct {
	cfg    Config
	start  time.Time
	ledger *Ledger

	mu       sync.Mutex
	procs    map[string]*exec.Cmd // guarded by mu
	waiting  []string             // workers waiting for the lock, in arrival order; guarded by mu
	grants   map[uint64]*grant    // guarded by mu
	faults   []Fault              // guarded by mu
	killed   string               // guarded by mu
	frozen   string               // guarded by mu
	frozeTok uint64               // token of the frozen worker; guarded by mu
	thawed   bool                 // guarded by mu
	changed  chan struct{}        // poked after every ledger record
	closed   map[int]string       // order -> who closed it first; guarded by mu
	waitFrom map[string]time.Time // worker -> when it last began to wait; guarded by mu
}

// Run plays the scenario and returns its verdict. It returns an error
// (with the verdict so far, if any) when the run could not be completed:
// a worker failed on its own, or the timeout passed.
//
// With cfg.DB on PostgreSQL, Run removes the demo's tables before it
// returns, unless cfg.KeepTables, whatever the outcome; it returns an error
// (with the verdict) if it cannot.
func Run(ctx context.Context, cfg Config) (v *Verdict, err error) {
	if cfg.Workers < MinWorkers || cfg.Orders < MinOrders {
		return nil, fmt.Errorf("the demo needs at least %d workers and %d jobs", MinWorkers, MinOrders)
	}
	ledger := NewLedger(cfg.Orders, cfg.Fencing)
	var tables *OrderTables
	if cfg.DB != "" {
		if tables, err = CreateOrderDB(ctx, cfg.DB, cfg.Orders); err != nil {
			return nil, err
		}
		ledger = NewReportLedger(cfg.Orders, cfg.Fencing)
	}
	d := &demo{
		cfg:      cfg,
		start:    time.Now(),
		ledger:   ledger,
		procs:    map[string]*exec.Cmd{},
		grants:   map[uint64]*grant{},
		changed:  make(chan struct{}, 1),
		closed:   map[int]string{},
		waitFrom: map[string]time.Time{},
	}
	d.ledger.onStep = d.onStep
	d.ledger.onRecord = d.onRecord
	if tables != nil {
		// After the verdict, which counts the refunds in the tables; on
		// a context of its own, so that it runs after ^C too. The workers
		// have exited or been killed by then: PostgreSQL ends a dead
		// client's transaction when its connection closes, so no lock of
		// theirs outlives them.
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if ferr := tables.Finish(fctx, cfg.KeepTables); ferr != nil {
				err = errors.Join(err, ferr)
			} else if msg := tables.Finished(cfg.KeepTables); msg != "" {
				d.printf("%s", msg)
			}
		}()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/read", d.ledger)
	mux.Handle("/step", d.ledger)
	mux.Handle("/close", d.ledger)
	mux.HandleFunc("/event", d.serveEvent)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	ledgerURL := "http://" + ln.Addr().String()

	fencing := "checks fencing tokens (httpfence): it rejects a write whose token is older than one it has seen"
	if !cfg.Fencing {
		fencing = "does NOT check fencing tokens (--no-fencing): it accepts every write"
	}
	fmt.Fprintf(cfg.Out, "dlock demo: %d worker processes close %d expired orders, one job at a time under the lock %q.\n", cfg.Workers, cfg.Orders, Key)
	fmt.Fprintf(cfg.Out, "  backend  %s, lock TTL %v; each job takes %v\n", cfg.BackendDesc, cfg.TTL, cfg.JobTime)
	if cfg.DB == "" {
		fmt.Fprintf(cfg.Out, "  ledger   %s %s\n", ledgerURL, fencing)
	} else {
		store, _ := storeOf(cfg.DB) // CreateOrderDB has checked it
		fencing = fmt.Sprintf("each job reads and closes its order in a transaction fenced by sqlfence (fence %q): the database rejects a token older than one it has recorded", Fence)
		if !cfg.Fencing {
			fencing = "does NOT check fencing tokens (--no-fencing): plain transactions"
		}
		fmt.Fprintf(cfg.Out, "  orders   %s database %s; %s\n", store.engine(), strings.TrimPrefix(store.String(), "sqlite "), fencing)
		fmt.Fprintf(cfg.Out, "  tables   %s\n", tables.Describe(cfg.KeepTables))
		fmt.Fprintf(cfg.Out, "  ledger   %s records what the workers read and closed there\n", ledgerURL)
	}
	if cfg.Gateway != nil {
		var langs []string
		for i := 1; i <= cfg.Workers; i++ {
			langs = append(langs, fmt.Sprintf("w%d %s", i, Language(i)))
		}
		fmt.Fprintf(cfg.Out, "  gateway  %s, in this process over the backend; the workers take the lock through it with the clients (clients/python, clients/java): %s\n",
			cfg.Gateway.URL, strings.Join(langs, ", "))
		cfg.Gateway.setLog(d.printf)
		defer cfg.Gateway.setLog(nil)
	}
	fmt.Fprintf(cfg.Out, "  faults   SIGKILL the holder of job %d mid-job; SIGSTOP the holder of job %d mid-job for longer than the TTL, then SIGCONT\n\n", killJob, freezeJob)

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	type exit struct {
		name string
		err  error
	}
	exits := make(chan exit, cfg.Workers)
	for i := 1; i <= cfg.Workers; i++ {
		name := fmt.Sprintf("w%d", i)
		cmd := cfg.Worker(WorkerSpec{Index: i, Name: name, Backend: cfg.Backend, Ledger: ledgerURL, TTL: cfg.TTL, JobTime: cfg.JobTime,
			DB: cfg.DB, Fencing: cfg.Fencing})
		out, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout = nil
		if err := cmd.Start(); err != nil {
			d.stopAll()
			return nil, fmt.Errorf("start worker %s: %w", name, err)
		}
		d.mu.Lock()
		d.procs[name] = cmd
		d.mu.Unlock()
		go func() {
			d.copyOutput(name, out) // Wait closes the pipe: read it all first
			exits <- exit{name, cmd.Wait()}
		}()
	}
	go d.thaw(ctx)

	var failures []string
	for range cfg.Workers {
		select {
		case e := <-exits:
			d.mu.Lock()
			expected := e.name == d.killed
			d.mu.Unlock()
			if e.err != nil && !expected {
				failures = append(failures, fmt.Sprintf("worker %s: %v", e.name, e.err))
				d.printf("%s exited: %v", e.name, e.err)
			}
		case <-ctx.Done():
			d.stopAll()
			v = d.verdict()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return v, fmt.Errorf("the demo did not finish within %v", cfg.Timeout)
			}
			return v, ctx.Err()
		}
	}
	v = d.verdict()
	if len(failures) > 0 {
		return v, fmt.Errorf("%s", strings.Join(failures, "; "))
	}
	return v, nil
}

func (d *demo) verdict() *Verdict {
	d.mu.Lock()
	grants := make([]grant, 0, len(d.grants))
	for _, g := range d.grants {
		grants = append(grants, *g)
	}
	faults := slices.Clone(d.faults)
	d.mu.Unlock()
	store, refunds, refundsErr := "ledger", map[int]int(nil), error(nil)
	if d.cfg.DB != "" {
		// The damage is counted where it was done: the refunds the
		// database paid, not the workers' reports of them.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		store = StoreName(d.cfg.DB)
		refunds, refundsErr = RefundsIn(ctx, d.cfg.DB)
		cancel()
	}
	v := computeVerdict(store, d.cfg.Fencing, d.cfg.Orders, d.cfg.TTL, d.ledger.Records(), grants, faults, refunds)
	if refundsErr != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("cannot count the refunds in the database: %v", refundsErr))
		v.Safe = false
	}
	v.ElapsedSeconds = time.Since(d.start).Seconds()
	return &v
}

// stopAll kills every worker, frozen or not.
func (d *demo) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cmd := range d.procs {
		_ = cmd.Process.Kill()
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
}

// printf writes one progress line, stamped with the time since the start.
// d.mu must not be held.
func (d *demo) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.printfLocked(format, args...)
}

func (d *demo) printfLocked(format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, "%7.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// copyOutput passes a worker's stderr on, prefixed with its name.
func (d *demo) copyOutput(name string, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		d.printf("%s says: %s", name, sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
}

func (d *demo) serveEvent(w http.ResponseWriter, r *http.Request) {
	var e Event
	if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch e.Kind {
	case EventWaiting:
		if !slices.Contains(d.waiting, e.Worker) {
			d.waiting = append(d.waiting, e.Worker)
		}
		d.waitFrom[e.Worker] = e.At
	case EventAcquired:
		d.waiting = slices.DeleteFunc(d.waiting, func(s string) bool { return s == e.Worker })
		how := ""
		// The previous holder is the grant with the next lower token: it
		// reported EventReleasing before it called Unlock, so before this
		// grant could happen.
		var prev *grant
		for _, g := range d.grants {
			if g.Token < e.Token && (prev == nil || g.Token > prev.Token) {
				prev = g
			}
		}
		switch {
		case prev == nil:
		case !prev.ReleaseAt.IsZero() && d.waitFrom[e.Worker].After(prev.ReleaseAt):
			// Nobody was waiting: not a hand-off.
		case !prev.ReleaseAt.IsZero():
			how = fmt.Sprintf(", handed off by %s in %v", prev.Worker, fmtDur(e.At.Sub(prev.ReleaseAt)))
		case prev.Worker == d.killed:
			how = fmt.Sprintf(", %v after %s was killed: its lease had to expire first", fmtDur(e.At.Sub(d.faultAt("SIGKILL"))), prev.Worker)
		case prev.Worker == d.frozen:
			how = fmt.Sprintf(", %v after %s froze: its lease expired while it was stopped", fmtDur(e.At.Sub(d.faultAt("SIGSTOP"))), prev.Worker)
		}
		d.grants[e.Token] = &grant{Worker: e.Worker, Token: e.Token, At: e.At, WaitFrom: d.waitFrom[e.Worker]}
		waiting := "nobody"
		if len(d.waiting) > 0 {
			waiting = strings.Join(d.waiting, " ")
		}
		d.printfLocked("%s holds %q (token %d)%s; waiting: %s", e.Worker, Key, e.Token, how, waiting)
	case EventReleasing:
		if g := d.grants[e.Token]; g != nil {
			g.ReleaseAt = e.At
		}
	case EventReleased:
		if g := d.grants[e.Token]; g != nil {
			// The hand-off starts when Unlock is called, not when the
			// worker announced it.
			g.Released, g.ReleaseAt = true, e.Since
		}
	case EventLost:
		d.printfLocked("%s unlocks and only now learns that its lease had been lost", e.Worker)
	case EventFinished:
		d.printfLocked("%s finds no expired order left and exits", e.Worker)
	}
}

// faultAt returns when the fault of a kind happened. d.mu must be held.
func (d *demo) faultAt(kind string) time.Time {
	for _, f := range d.faults {
		if f.Kind == kind {
			return f.At
		}
	}
	return time.Time{}
}

// onRecord prints what the ledger did and wakes the thaw loop.
func (d *demo) onRecord(r Record) {
	d.mu.Lock()
	switch {
	case r.Op == OpRead && r.Order != 0:
		d.printfLocked("%s starts job %d: the next expired order is #%d", r.Worker, r.Job, r.Order)
	case r.Op == OpClose && r.Accepted && d.closed[r.Order] != "":
		d.printfLocked("%s closes order #%d with token %d: ACCEPTED, though %s had closed it already: order #%d is closed TWICE",
			r.Worker, r.Order, r.Token, d.closed[r.Order], r.Order)
	case r.Op == OpClose && r.Accepted:
		d.closed[r.Order] = fmt.Sprintf("%s (token %d)", r.Worker, r.Token)
		d.printfLocked("%s closes order #%d with token %d: accepted", r.Worker, r.Order, r.Token)
	case r.Op == OpClose:
		d.printfLocked("%s closes order #%d with token %d: REJECTED by %s (%s)", r.Worker, r.Order, r.Token, d.store(), r.Reason)
	case !r.Accepted:
		d.printfLocked("%s's %s with token %d: REJECTED by %s (%s)", r.Worker, r.Op, r.Token, d.store(), r.Reason)
	}
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// store names where the orders are closed, for the progress lines.
func (d *demo) store() string {
	if d.cfg.DB != "" {
		return "the database"
	}
	return "the ledger"
}

// onStep injects the faults, halfway through a job, while the worker waits
// for the ledger's answer.
func (d *demo) onStep(r Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cmd := d.procs[r.Worker]
	if cmd == nil {
		return
	}
	switch {
	case r.Job == killJob && d.killed == "":
		d.killed = r.Worker
		d.faults = append(d.faults, Fault{Kind: "SIGKILL", Worker: r.Worker, Job: r.Job, At: time.Now()})
		_ = cmd.Process.Kill()
		d.printfLocked("FAULT: SIGKILL %s (pid %d) in the middle of job %d (order #%d); its lease lives on until the TTL runs out",
			r.Worker, cmd.Process.Pid, r.Job, r.Order)
	case r.Job == freezeJob && d.frozen == "":
		d.frozen, d.frozeTok = r.Worker, r.Token
		d.faults = append(d.faults, Fault{Kind: "SIGSTOP", Worker: r.Worker, Job: r.Job, At: time.Now()})
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		d.printfLocked("FAULT: SIGSTOP %s (pid %d) in the middle of job %d (order #%d), for longer than its TTL (%v): a long GC pause",
			r.Worker, cmd.Process.Pid, r.Job, r.Order, d.cfg.TTL)
		select {
		case d.changed <- struct{}{}: // start the thaw loop's clock
		default:
		}
	}
}

// thaw resumes the frozen worker once its lease has certainly expired and
// the next holder has closed the order the frozen one was working on: then
// the frozen worker's write is exactly the stale write fencing must stop.
// If that does not happen within a bound, it resumes the worker anyway.
func (d *demo) thaw(ctx context.Context) {
	var giveUp <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
		case <-giveUp:
			d.resume("no other worker wrote in the meantime")
			return
		}
		d.mu.Lock()
		frozen, tok, at := d.frozen, d.frozeTok, d.faultAt("SIGSTOP")
		d.mu.Unlock()
		if frozen == "" {
			continue
		}
		if giveUp == nil {
			giveUp = time.After(3*d.cfg.TTL + 10*time.Second)
		}
		newerWrote := slices.ContainsFunc(d.ledger.Records(), func(r Record) bool {
			return r.Op == OpClose && r.Accepted && r.Token > tok
		})
		if newerWrote {
			// The newer holder got the lock only after the frozen one's
			// lease expired, so the TTL has passed; wait out the rest of
			// it in case the backend handed over early (it must not).
			if rest := d.cfg.TTL - time.Since(at); rest > 0 {
				time.Sleep(rest)
			}
			d.resume("")
			return
		}
	}
}

func (d *demo) resume(why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.thawed {
		return
	}
	d.thawed = true
	cmd := d.procs[d.frozen]
	_ = cmd.Process.Signal(syscall.SIGCONT)
	d.faults = append(d.faults, Fault{Kind: "SIGCONT", Worker: d.frozen, Job: freezeJob, At: time.Now()})
	if why != "" {
		why = " (" + why + ")"
	}
	d.printfLocked("FAULT: SIGCONT %s after %v frozen%s: it wakes up believing it still holds %q, and writes",
		d.frozen, fmtDur(time.Since(d.faultAt("SIGSTOP"))), why, Key)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
