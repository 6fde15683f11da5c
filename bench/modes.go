package main

// The workloads of the modes section: a semaphore and a read-write lock, on
// dlock's three backends, beside dlock's lock measured by the same harness
// (no Go peer offers a fair, crash-safe semaphore on these servers).

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock"
)

// modeWorkload is one workload of the modes section.
type modeWorkload struct {
	Name  string  // "lock", "semaphore" or "rwmutex"
	Limit int     // permits: 1 for the lock, 0 (any number of readers) for the RWMutex
	ReadP float64 // RWMutex: the probability that a cycle reads
}

// modeWorkloads are the workloads in the order of the tables. The lock is
// the reference: the same harness, hold time and contenders, so its
// figures compare with the others one for one.
var modeWorkloads = []modeWorkload{
	{Name: "lock", Limit: 1},
	{Name: "semaphore", Limit: 4},
	{Name: "rwmutex", ReadP: 0.9},
}

// modeContenders are the contender counts of the modes section: 32 for
// the main tables, and 2 and 128 for requests per grant.
var modeContenders = []int{2, 32, 128}

const (
	// modeHold is how long each holder holds its lease: a sleep standing
	// for the work a permit guards. Without it a lease would be held for
	// no time at all and utilization would measure nothing.
	// The default of -modes-hold; the report states the hold it used.
	modeHold = time.Millisecond
	// modeSeed seeds the readers' choice (one PRNG per contender, seeded
	// with modeSeed and the contender's number).
	modeSeed = 12
	// modeMaxGrants ends a window early once this many grants were made in
	// it (a bound in count beside the bound in time).
	modeMaxGrants = 20000
)

// modeResult is one run of one workload with one number of contenders.
type modeResult struct {
	Lib      string
	Workload string
	Limit    int     // 1 lock, 4 semaphore, 0 RWMutex (unlimited readers)
	ReadP    float64 // RWMutex: probability of a read
	N        int
	Round    int // the permits section's round (0 in the modes section)
	Hold     time.Duration
	Seed     uint64
	// Window is the measuring window: from the first counters snapshot to
	// the second (its time limit, or less when modeMaxGrants was reached).
	Window                           time.Duration
	Grants, SharedGrants, ExclGrants int
	GrantsPerS                       float64
	MeanHolders                      float64 // time-averaged leases held (T1..T2 of modeEvent)
	Utilization                      float64 // MeanHolders / Limit (lock, semaphore)
	WriterHeld                       float64 // RWMutex: fraction of the window a writer held
	MaxHolders                       int
	Violations                       int // leases begun that the grant rule did not admit
	Handoffs                         int
	HandoffP50, HandoffP99           time.Duration
	ReadHandoffs, WriteHandoffs      int
	ReadHandoffP50, ReadHandoffP99   time.Duration
	WriteHandoffP50, WriteHandoffP99 time.Duration
	Delta                            counters // server work during the window
	Errors                           int
	FirstErr                         string
	Stuck                            int // -1: contenders still running 15 s after the window (connections closed)
	Setup                            time.Duration
}

// modeSelection is what -only selects among the modes workloads: nil when
// the value is a library regexp.
func modeSelection(only string) []modeWorkload {
	if only == "" {
		return nil
	}
	var sel []modeWorkload
	for _, name := range strings.Split(only, ",") {
		switch strings.TrimSpace(name) {
		case "modes":
			return modeWorkloads
		case "semaphore", "rwmutex":
			sel = append(sel, modeWorkload{Name: strings.TrimSpace(name)})
		default:
			return nil
		}
	}
	// The lock always comes too, as the reference.
	var out []modeWorkload
	for _, w := range modeWorkloads {
		if w.Name == "lock" || slices.ContainsFunc(sel, func(s modeWorkload) bool { return s.Name == w.Name }) {
			out = append(out, w)
		}
	}
	return out
}

// runModesSection runs every selected workload on every dlock backend.
func runModesSection(s *servers, libs []*library, cfg config) []modeResult {
	var out []modeResult
	for _, l := range libs {
		if !l.IsDlock || l.Missing != "" {
			continue
		}
		for _, w := range cfg.modes {
			for _, n := range modeContenders {
				t0 := time.Now()
				cs, err := newContenders(s, l, n, fmt.Sprintf("modes-%s-%d", w.Name, n))
				if err != nil {
					log.Printf("modes %s %s n=%d: %v", l.Name, w.Name, n, err)
					out = append(out, modeResult{Lib: l.Name, Workload: w.Name, Limit: w.Limit, ReadP: w.ReadP, N: n, FirstErr: err.Error()})
					continue
				}
				setup := time.Since(t0)
				r := runModes(s, l, cs, w, cfg.modesHold, cfg.warmup, cfg.window, modeMaxGrants)
				r.Setup = setup
				log.Printf("modes %-18s %-9s n=%-3d grants/s %6.0f held %.2f (max %d) util %3.0f%% writer %3.0f%% handoff p50 %8v p99 %8v (%d) req/grant %.2f violations %d errs %d %s",
					l.Name, w.Name, n, r.GrantsPerS, r.MeanHolders, r.MaxHolders, 100*r.Utilization, 100*r.WriterHeld,
					r.HandoffP50, r.HandoffP99, r.Handoffs, perGrant(r.Delta.Requests, r.Grants), r.Violations, r.Errors, r.FirstErr)
				out = append(out, r)
				closeAll(cs)
			}
		}
	}
	return out
}

// acquireFunc returns what one contender calls to take the key in the
// workload's mode.
func acquireFunc(c *dlock.Client, key string, w modeWorkload) func(ctx context.Context, shared bool) (*dlock.Lease, error) {
	switch w.Name {
	case "semaphore":
		sem := c.Semaphore(key, w.Limit)
		return func(ctx context.Context, _ bool) (*dlock.Lease, error) { return sem.Acquire(ctx) }
	case "rwmutex":
		rw := c.RWMutex(key)
		return func(ctx context.Context, shared bool) (*dlock.Lease, error) {
			if shared {
				return rw.RLock(ctx)
			}
			return rw.Lock(ctx)
		}
	default:
		return func(ctx context.Context, _ bool) (*dlock.Lease, error) { return c.Lock(ctx, key) }
	}
}

// runModes runs the contenders (dlock's) through one workload on one key
// for warm-up + window. Each loops: choose the mode (RWMutex: read with
// probability ReadP), acquire, hold for hold, Unlock. Every cycle is
// recorded (modeEvent) and the figures are computed from the records
// afterwards (analyzeModes).
func runModes(s *servers, lib *library, cs []contender, w modeWorkload, hold, warmup, window time.Duration, maxGrants int) modeResult {
	return runModesOn(s, lib, cs, fmt.Sprintf("modes-%s-%d", w.Name, len(cs)), w, hold, warmup, window, maxGrants)
}

// runModesOn is runModes on the key given.
func runModesOn(s *servers, lib *library, cs []contender, key string, w modeWorkload, hold, warmup, window time.Duration, maxGrants int) modeResult {
	n := len(cs)
	r := modeResult{Lib: lib.Name, Workload: w.Name, Limit: w.Limit, ReadP: w.ReadP, N: n, Hold: hold, Seed: modeSeed}
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) } // monotonic
	// The contenders stop when the second snapshot is taken (below); the
	// deadline is only a backstop for a snapshot that hangs.
	runCtx, cancel := context.WithDeadline(context.Background(), base.Add(warmup+window+15*time.Second))
	defer cancel()

	var (
		// ws and we bound the window: set by the snapshot goroutine,
		// read after it is done. Until then grants are counted from the
		// nominal start, for the count bound.
		ws, we      int64
		nominalWs   = int64(warmup)
		inWindow    atomic.Int64
		capReached  = make(chan struct{})
		capOnce     sync.Once
		rec         runRecorder
		before, aft counters
		snapErr     error
	)
	evs := make([][]modeEvent, n)

	acquires := make([]func(context.Context, bool) (*dlock.Lease, error), n)
	for i, c := range cs {
		d, ok := c.(*dlockContender)
		if !ok {
			r.FirstErr = fmt.Sprintf("%s: not a dlock client", lib.Name)
			return r
		}
		acquires[i] = acquireFunc(d.c, key, w)
	}

	snapDone := make(chan struct{})
	go func() {
		defer close(snapDone)
		defer cancel()
		time.Sleep(time.Duration(nominalWs - now()))
		if before, snapErr = s.counters(lib.Backend); snapErr != nil {
			ws, we = nominalWs, now()
			return
		}
		// The window is as long as asked even when the snapshot was slow
		// (a loaded machine, a server busy with 128 joins).
		ws = now()
		select {
		case <-time.After(window):
		case <-capReached:
		}
		we = now()
		aft, snapErr = s.counters(lib.Backend)
	}()

	var wg sync.WaitGroup
	finished := make(chan struct{})
	for i := range cs {
		acquire := acquires[i]
		rng := rand.New(rand.NewPCG(modeSeed, uint64(i)))
		wg.Go(func() {
			for runCtx.Err() == nil {
				shared := w.Name == "semaphore" || (w.Name == "rwmutex" && rng.Float64() < w.ReadP)
				t0 := now()
				l, err := acquire(runCtx, shared)
				t1 := now()
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					rec.fail(err)
					time.Sleep(time.Millisecond)
					continue
				}
				if hold > 0 {
					time.Sleep(hold) // the work under the lease
				}
				t2 := now()
				uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := l.Unlock(uctx); err != nil {
					rec.fail(fmt.Errorf("unlock: %w", err))
				}
				ucancel()
				evs[i] = append(evs[i], modeEvent{C: i, Shared: shared, T0: t0, T1: t1, T2: t2, T3: now()})
				if t1 >= nominalWs && inWindow.Add(1) >= int64(maxGrants) {
					capOnce.Do(func() { close(capReached) })
				}
			}
		})
	}
	go func() { wg.Wait(); close(finished) }()
	<-snapDone
	select {
	case <-finished:
	case <-time.After(15 * time.Second):
		// Contenders still in Unlock or in an Acquire that ignores its
		// context: closing their clients ends them.
		for _, c := range cs {
			c.Close()
		}
		r.Stuck = -1
		if !waitTimeout(finished, 10*time.Second) {
			// Their records are still being written: none can be read.
			r.FirstErr = "contenders still running 25 s after the window, even with their clients closed"
			return r
		}
	}
	if snapErr == nil {
		r.Delta = aft.sub(before)
	} else {
		r.FirstErr = "server counters: " + snapErr.Error()
	}

	var all []modeEvent
	for i := range evs {
		all = append(all, evs[i]...)
	}
	st := analyzeModes(all, w.Name, w.Limit, ws, we)
	r.Window = time.Duration(we - ws)
	r.Grants, r.SharedGrants, r.ExclGrants = st.Grants, st.SharedGrants, st.ExclusiveGrants
	if r.Window > 0 {
		r.GrantsPerS = float64(st.Grants) / r.Window.Seconds()
	}
	r.MeanHolders, r.MaxHolders, r.Violations = st.MeanHolders, st.MaxHolders, st.Violations
	if w.Limit > 0 {
		r.Utilization = st.MeanHolders / float64(w.Limit)
	}
	if w.Name == "rwmutex" {
		r.WriterHeld = st.ExclusiveHeld
		r.ReadHandoffs, r.ReadHandoffP50, r.ReadHandoffP99 = len(st.SharedHandoffs), percentile(st.SharedHandoffs, 50), percentile(st.SharedHandoffs, 99)
		r.WriteHandoffs, r.WriteHandoffP50, r.WriteHandoffP99 = len(st.ExclusiveHandoffs), percentile(st.ExclusiveHandoffs, 50), percentile(st.ExclusiveHandoffs, 99)
	}
	r.Handoffs, r.HandoffP50, r.HandoffP99 = len(st.Handoffs), percentile(st.Handoffs, 50), percentile(st.Handoffs, 99)
	rec.report(&r.Errors, &r.FirstErr)
	return r
}
