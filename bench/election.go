package main

// The election section: how fast leadership changes hands and how fast an
// observer learns of a change, on dlock's three backends (Client.Election)
// beside etcd's concurrency.Election, on the same servers in the same run.
//
// Three runs per library, each with fresh clients and a fresh key:
//   - hand-over: candidates take turns leading (Campaign, hold, Resign,
//     Campaign again at the end of the line); measured from the leader's
//     Resign call starting to the next candidate's Campaign returning;
//   - observed hand-over: the same, with an observer on a client of its
//     own; measured from the Resign call starting to the observer
//     receiving the successor's value;
//   - Proclaim: one leader publishes a new value; measured from the
//     Proclaim call starting to the observer receiving that value.
//
// Each run is bounded in count (events measured) and in time, and in
// everything it waits for (an observer gets electionWait per change).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// electionCandidates take turns leading in the hand-over runs. With
	// three, the candidate elected at a hand-over has been waiting for a
	// whole term at least (the resigner re-joins at the end of the line,
	// behind the other waiter), so every grant is to a candidate already
	// queued on the server, never to one still on its way.
	electionCandidates = 3
	// electionHold is how long each leader leads: a sleep standing for the
	// leader's work.
	electionHold = time.Millisecond
	// electionWait bounds the wait for an observer to receive one change.
	electionWait = 5 * time.Second
)

// electionSizes are the bounds of the three runs: events measured (after
// warm events not measured) and time.
type electionSizes struct {
	warm                                      int
	handovers, observed, proclaims            int
	handoverLimit, observedLimit, proclaimLim time.Duration
}

func electionSize(quick bool) electionSizes {
	if quick {
		return electionSizes{warm: 5, handovers: 60, observed: 30, proclaims: 30,
			handoverLimit: 2 * time.Second, observedLimit: 2 * time.Second, proclaimLim: 2 * time.Second}
	}
	return electionSizes{warm: 10, handovers: 600, observed: 300, proclaims: 300,
		handoverLimit: 8 * time.Second, observedLimit: 6 * time.Second, proclaimLim: 5 * time.Second}
}

// electionResult is one library's figures in the election section.
type electionResult struct {
	Lib, Backend, Module string
	IsDlock              bool
	// Missing: the library could not run at all (not available).
	Missing    string
	Candidates int
	Hold       time.Duration
	// Handover: Resign start → the next candidate's Campaign returning.
	Handover electionRun
	// ObservedLeader: Resign start → the observer receiving the
	// successor's value (observer attached; its requests are counted).
	ObservedLeader electionRun
	// Proclaim: Proclaim start → the observer receiving the new value;
	// Call* is the Proclaim call itself.
	Proclaim electionRun
}

// electionRun is one measured run.
type electionRun struct {
	// The run's bounds: Max latencies measured after Warm events not
	// measured, within Limit.
	Max, Warm int
	Limit     time.Duration
	N         int // latencies measured
	P50, P99  time.Duration
	// CallP50, CallP99: the Proclaim run's Proclaim calls, start to return.
	CallP50, CallP99 time.Duration
	// Events are the hand-overs (or Proclaims) between the two counter
	// snapshots: Delta's requests divided by Events are per event.
	Events int
	Window time.Duration
	Delta  counters
	// Overlaps: times a candidate's Campaign returned while another still
	// led (by the clients' view, which lies within the server's grant).
	Overlaps int
	Errors   int
	FirstErr string
	// Missing: the backend cannot do what this run measures in this build
	// ("not available: ..."); the run measured nothing.
	Missing string
	// Stuck: clients still running 15 s after the run's end (closed).
	Stuck bool
}

// reqPerEvent is the server requests per event of the run.
func (r electionRun) reqPerEvent() float64 { return perGrant(r.Delta.Requests, r.Events) }

// Why a run measured nothing: the backend lacks the feature in the code
// measured (electionRun.Missing is "not available: " and these, joined).
const (
	observeMissing = "Observe's channel closed at once, before any state (the backend does not implement driver.Observer in this build)"
	publishMissing = "Proclaim failed with errors.ErrUnsupported (the backend's grant does not implement driver.Publisher in this build)"
)

// notAvailable is electionRun.Missing for the reasons given.
func notAvailable(reasons ...string) string {
	if len(reasons) == 0 {
		return ""
	}
	return "not available: " + strings.Join(reasons, "; ")
}

// runElectionSection runs the three runs on every election library.
func runElectionSection(s *servers, libs []*library, cfg config) []electionResult {
	keep := func(name string) bool { return cfg.only == nil || cfg.only.MatchString(name) }
	sz := electionSize(cfg.quick)
	var out []electionResult
	for _, el := range electionLibs(libs, keep) {
		r := electionResult{Lib: el.Name, Backend: el.Backend, Module: el.Module, IsDlock: el.IsDlock, Missing: el.Missing,
			Candidates: electionCandidates, Hold: electionHold}
		if el.Missing != "" {
			log.Printf("election %-18s %s", el.Name, el.Missing)
			out = append(out, r)
			continue
		}
		r.Handover = runElectionHandovers(s, el, "election-handover", false, sz.handovers, sz.warm, sz.handoverLimit)
		logElectionRun(el.Name, "hand-over", r.Handover)
		r.ObservedLeader = runElectionHandovers(s, el, "election-observed", true, sz.observed, sz.warm, sz.observedLimit)
		logElectionRun(el.Name, "observe leader", r.ObservedLeader)
		r.Proclaim = runElectionProclaims(s, el, "election-proclaim", sz.proclaims, sz.warm, sz.proclaimLim)
		logElectionRun(el.Name, "observe proclaim", r.Proclaim)
		out = append(out, r)
	}
	return out
}

func logElectionRun(lib, what string, r electionRun) {
	if r.Missing != "" {
		log.Printf("election %-18s %-16s %s", lib, what, r.Missing)
		return
	}
	call := ""
	if r.CallP50 > 0 {
		call = fmt.Sprintf(" call p50 %v p99 %v", r.CallP50, r.CallP99)
	}
	log.Printf("election %-18s %-16s n=%-4d p50 %8v p99 %8v%s req/event %.2f (%d events in %v) overlaps %d errs %d %s",
		lib, what, r.N, r.P50, r.P99, call, r.reqPerEvent(), r.Events, r.Window.Round(time.Millisecond), r.Overlaps, r.Errors, r.FirstErr)
}

// electionClients are the clients of one run, closed once.
type electionClients struct {
	cs   []electionClient
	once sync.Once
}

func (e *electionClients) close() {
	e.once.Do(func() {
		var wg sync.WaitGroup
		for _, c := range e.cs {
			wg.Go(c.Close)
		}
		wg.Wait()
	})
}

// newElectionClients opens n clients of el for key, in parallel.
func newElectionClients(s *servers, el *electionLib, key string, n int) (*electionClients, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := make([]electionClient, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = el.newClient(ctx, s.env, key) })
	}
	wg.Wait()
	ec := &electionClients{}
	for i, c := range cs {
		if errs[i] == nil {
			ec.cs = append(ec.cs, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		ec.close()
		return nil, err
	}
	return ec, nil
}

// runRecorder collects a run's errors from its goroutines (the election,
// modes and contention runs).
type runRecorder struct {
	errs     atomic.Int64
	firstErr atomic.Value
}

func (r *runRecorder) fail(err error) {
	if r.errs.Add(1) == 1 {
		r.firstErr.Store(err.Error())
	}
}

func (r *runRecorder) into(run *electionRun) {
	r.report(&run.Errors, &run.FirstErr)
}

// report sets errors to the count of errors and, unless it already says
// something, firstErr to the first error: every section's run ends so.
func (r *runRecorder) report(errors *int, firstErr *string) {
	*errors = int(r.errs.Load())
	if v := r.firstErr.Load(); v != nil && *firstErr == "" {
		*firstErr = v.(string)
	}
}

// setWindow records the measured window of a run, from ws to we (none if we
// is not after ws), with the server's work over it (before and after it),
// or why the server's counters could not be read.
func (r *electionRun) setWindow(ws, we int64, before, after counters, snapErr error) {
	if we > ws {
		r.Window = time.Duration(we - ws)
		r.Delta = after.sub(before)
	}
	if snapErr != nil {
		r.FirstErr = "server counters: " + snapErr.Error()
	}
}

// maxRunErrors ends a run early: a run failing this often measures nothing.
const maxRunErrors = 100

// runElectionHandovers runs the hand-over run, or with observe the
// observed hand-over run, on key: electionCandidates candidates, each
// looping Campaign (with a value unique to it and its term), hold
// electionHold, Resign. With observe, an observer follows the election on
// a client of its own, and each leader waits (up to electionWait) until
// the observer has received its value before it holds: changes are then
// one at a time, each measured from a quiet observer.
//
// The leader of term warm+1 takes the first counter snapshot while it
// leads; the leader of the term that makes maxN measured (or whose term
// began after limit) takes the second while it leads, and ends the run
// after it resigns. The hand-overs into the terms between are the run's
// events: the requests between the snapshots are exactly theirs (resign,
// grant, the resigner's new campaign, notices, and the observer's reads),
// plus keep-alives (renewals, ZooKeeper pings).
func runElectionHandovers(s *servers, el *electionLib, key string, observe bool, maxN, warm int, limit time.Duration) electionRun {
	r := electionRun{Max: maxN, Warm: warm, Limit: limit}
	n := electionCandidates
	if observe {
		n++
	}
	ec, err := newElectionClients(s, el, key, n)
	if err != nil {
		r.FirstErr = "clients: " + err.Error()
		return r
	}
	defer ec.close()
	cands := ec.cs[:electionCandidates]

	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) } // monotonic
	// The leader that takes the second snapshot ends the run; the deadline
	// is only a backstop for a run that stalls (nobody elected).
	ctx, cancel := context.WithTimeout(context.Background(), limit+10*time.Second)
	defer cancel()

	var seen *seenLog
	if observe {
		seen = newSeenLog(now)
		obsDone := ec.cs[electionCandidates].Observe(ctx, seen.add)
		go func() { <-obsDone; seen.close() }()
	}

	var (
		rec        runRecorder
		leaders    atomic.Int32
		overlaps   atomic.Int64
		mu         sync.Mutex // guards the rest
		terms      int
		lastResign int64 = -1 // when the latest Resign call began
		snapped    bool       // the first snapshot is taken: the window is open
		finished   bool
		before     counters
		after      counters
		snapErr    error
		ws, we     int64
		lats, obs  []time.Duration
	)
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				value := fmt.Sprintf("c%d-%d", i, k)
				tc := now()
				term, err := c.Campaign(ctx, value)
				t1 := now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					rec.fail(fmt.Errorf("campaign: %w", err))
					if rec.errs.Load() >= maxRunErrors {
						cancel()
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if leaders.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				terms++
				myTerm := terms
				prev := lastResign
				measuring := snapped && !finished
				over := finished // elected by the last leader's Resign, after the run
				mu.Unlock()
				// A hand-over: this candidate was campaigning when the
				// previous leader began to resign (with three candidates,
				// every term after the first few).
				handover := prev >= 0 && prev >= tc
				seenAt := int64(-1)
				if seen != nil && !over {
					t, err := seen.wait(value, electionWait)
					switch {
					case err == nil:
						seenAt = t
					case errors.Is(err, errObserveClosed) && seen.neverReceived():
						mu.Lock()
						r.Missing, finished = notAvailable(observeMissing), true
						mu.Unlock()
					case ctx.Err() != nil:
						// The run ended meanwhile (its end closes the
						// observer): not the observer's failure.
					default:
						rec.fail(fmt.Errorf("observe %s: %w", value, err))
					}
				}
				mu.Lock()
				if measuring && handover {
					lats = append(lats, time.Duration(t1-prev))
					if seenAt >= 0 {
						obs = append(obs, time.Duration(seenAt-prev))
					}
				}
				measured := len(lats)
				if seen != nil {
					measured = len(obs)
				}
				switch {
				case finished:
				case !snapped && myTerm == warm+1:
					// Other candidates wait in Campaign: nothing runs but
					// keep-alives while the snapshot is read.
					before, snapErr = s.counters(el.Backend)
					ws, snapped = now(), true
				case snapped && (measured >= maxN || now() > int64(limit)):
					var err error
					if after, err = s.counters(el.Backend); err != nil && snapErr == nil {
						snapErr = err
					}
					we, finished = now(), true
					r.Events = myTerm - (warm + 1)
				case !snapped && now() > int64(limit):
					finished = true
				}
				end := finished
				mu.Unlock()

				time.Sleep(electionHold) // the leader's work
				leaders.Add(-1)
				mu.Lock()
				lastResign = now()
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := term.Resign(rctx); err != nil {
					rec.fail(fmt.Errorf("resign: %w", err))
				}
				rcancel()
				if end {
					cancel()
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	<-ctx.Done()
	if !waitTimeout(done, 15*time.Second) {
		// Candidates stuck in a call that ignores its context: closing
		// their clients ends them.
		ec.close()
		r.Stuck = true
		if !waitTimeout(done, 10*time.Second) {
			r.FirstErr = "candidates still running 25 s after the run, even with their clients closed"
			return r
		}
	}
	ec.close()
	if seen != nil {
		lats = obs // the observer's latencies are the figures of this run
	}
	r.N, r.P50, r.P99 = len(lats), percentile(lats, 50), percentile(lats, 99)
	r.Overlaps = int(overlaps.Load())
	r.setWindow(ws, we, before, after, snapErr)
	rec.into(&r)
	if r.Missing == "" && r.N == 0 && r.FirstErr == "" {
		r.FirstErr = fmt.Sprintf("no hand-over measured within %v", limit)
	}
	return r
}

// runElectionProclaims runs the Proclaim run on key: one leader, an
// observer on another client; the leader proclaims "p-1", "p-2", … one at a
// time, each after the observer received the previous one. The first
// counter snapshot is taken before Proclaim warm+1, the second after the
// observer received the last measured one: the requests between are those
// of the Proclaims (the observer's reads included) plus keep-alives.
func runElectionProclaims(s *servers, el *electionLib, key string, maxN, warm int, limit time.Duration) electionRun {
	r := electionRun{Max: maxN, Warm: warm, Limit: limit}
	ec, err := newElectionClients(s, el, key, 2)
	if err != nil {
		r.FirstErr = "clients: " + err.Error()
		return r
	}
	defer ec.close()
	leader, observer := ec.cs[0], ec.cs[1]
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	defer cancel()

	term, err := leader.Campaign(ctx, "p-0")
	if err != nil {
		r.FirstErr = "campaign: " + err.Error()
		return r
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		_ = term.Resign(rctx)
	}()
	// The observer starts once there is a leader: etcd's Observe sends
	// nothing before.
	seen := newSeenLog(now)
	obsDone := observer.Observe(ctx, seen.add)
	go func() { <-obsDone; seen.close() }()
	var missing []string
	observing := true
	if _, err := seen.wait("p-0", electionWait); err != nil {
		if !seen.neverReceived() {
			r.FirstErr = "observe p-0: " + err.Error()
			return r
		}
		// Go on without the observer: whether Proclaim works is worth
		// knowing (its call latency is measured then).
		missing, observing = append(missing, observeMissing), false
	}

	var (
		rec            runRecorder
		lats, calls    []time.Duration
		before, after  counters
		snapErr        error
		ws, we         int64
		snapped        bool
		proclaimFailed bool
	)
	for i := 1; ctx.Err() == nil && rec.errs.Load() < maxRunErrors; i++ {
		if i == warm+1 {
			before, snapErr = s.counters(el.Backend)
			ws, snapped = now(), true
		}
		v := fmt.Sprintf("p-%d", i)
		t0 := now()
		err := term.Proclaim(ctx, v)
		t1 := now()
		if errors.Is(err, errors.ErrUnsupported) {
			missing, proclaimFailed = append(missing, publishMissing), true
			break
		}
		if err != nil {
			rec.fail(fmt.Errorf("proclaim: %w", err))
			continue
		}
		if observing {
			t2, err := seen.wait(v, electionWait)
			if err != nil {
				rec.fail(fmt.Errorf("observe %s: %w", v, err))
				continue
			}
			if snapped {
				lats = append(lats, time.Duration(t2-t0))
			}
		}
		if snapped {
			calls = append(calls, time.Duration(t1-t0))
		}
		if snapped && (len(calls) >= maxN || now() > int64(limit)) {
			var err error
			if after, err = s.counters(el.Backend); err != nil && snapErr == nil {
				snapErr = err
			}
			we, r.Events = now(), i-warm
			break
		}
		if !snapped && now() > int64(limit) {
			break
		}
	}
	r.Missing = notAvailable(missing...)
	if proclaimFailed {
		// The reasons are the figures: nothing was measured.
		return r
	}
	r.N, r.P50, r.P99 = len(lats), percentile(lats, 50), percentile(lats, 99)
	r.CallP50, r.CallP99 = percentile(calls, 50), percentile(calls, 99)
	r.setWindow(ws, we, before, after, snapErr)
	rec.into(&r)
	if len(calls) == 0 && r.FirstErr == "" {
		r.FirstErr = fmt.Sprintf("no Proclaim measured within %v", limit)
	}
	return r
}
