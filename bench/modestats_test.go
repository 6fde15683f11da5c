package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// These tests pin analyzeModes on hand-made records (no servers): the
// hand-off rules of handoff, the utilization integral and the violation
// count that the report's modes section prints.

func ev(c int, shared bool, t0, t1, t2, t3 int64) modeEvent {
	return modeEvent{C: c, Shared: shared, T0: t0, T1: t1, T2: t2, T3: t3}
}

func TestAnalyzeModes_lockHandoffFromLatestRelease(t *testing.T) {
	evs := []modeEvent{
		ev(0, false, 0, 10, 20, 25),  // A holds 10..20
		ev(1, false, 5, 22, 40, 45),  // B waited since 5: hand-off 22-20
		ev(0, false, 30, 43, 50, 55), // A waited since 30: hand-off 43-40
		ev(1, false, 60, 62, 70, 75), // B came to a free lock: none
	}
	st := analyzeModes(evs, "lock", 1, 0, 100)
	if want := []time.Duration{2, 3}; !slices.Equal(st.Handoffs, want) {
		t.Errorf("hand-offs %v, want %v", st.Handoffs, want)
	}
	if st.Grants != 4 || st.Violations != 0 || st.MaxHolders != 1 {
		t.Errorf("grants %d violations %d max %d, want 4, 0, 1", st.Grants, st.Violations, st.MaxHolders)
	}
	// Held 10+18+7+8 = 43 of 100.
	if math.Abs(st.MeanHolders-0.43) > 1e-9 || math.Abs(st.ExclusiveHeld-0.43) > 1e-9 {
		t.Errorf("mean holders %v, exclusive %v, want 0.43", st.MeanHolders, st.ExclusiveHeld)
	}
}

func TestAnalyzeModes_windowClipsHoldsAndGrants(t *testing.T) {
	evs := []modeEvent{
		ev(0, false, 0, 10, 30, 31), // held 20..30 in the window; granted before it
		ev(1, false, 5, 32, 60, 61), // granted in the window, held 32..50
	}
	st := analyzeModes(evs, "lock", 1, 20, 50)
	if st.Grants != 1 || len(st.Handoffs) != 1 || st.Handoffs[0] != 2 {
		t.Errorf("grants %d hand-offs %v, want 1 and [2]", st.Grants, st.Handoffs)
	}
	if want := 28.0 / 30; math.Abs(st.MeanHolders-want) > 1e-9 {
		t.Errorf("mean holders %v, want %v", st.MeanHolders, want)
	}
}

func TestAnalyzeModes_semaphorePairsReleasesWithWaiters(t *testing.T) {
	// Limit 2, three contenders: A and B hold, C waits from 3.
	evs := []modeEvent{
		ev(0, true, 0, 1, 10, 12),   // A
		ev(1, true, 0, 2, 20, 22),   // B
		ev(2, true, 3, 14, 30, 32),  // C: A's release (10) lets it in
		ev(0, true, 13, 24, 40, 42), // A again, waiting from 13: B's release (20)
		ev(1, true, 23, 33, 50, 52), // B again, waiting from 23: C's release (30)
	}
	st := analyzeModes(evs, "semaphore", 2, 0, 100)
	if want := []time.Duration{4, 4, 3}; !slices.Equal(st.Handoffs, want) {
		t.Errorf("hand-offs %v, want %v", st.Handoffs, want)
	}
	if st.Violations != 0 || st.MaxHolders != 2 {
		t.Errorf("violations %d max %d, want 0 and 2", st.Violations, st.MaxHolders)
	}
}

func TestAnalyzeModes_semaphoreWithFreePermitsHasNoHandoffs(t *testing.T) {
	// Limit 4, two contenders: a release during the other's Acquire did
	// not let it in (a permit was free all along).
	evs := []modeEvent{
		ev(0, true, 0, 5, 10, 12),
		ev(1, true, 8, 14, 20, 22),
		ev(0, true, 13, 18, 30, 32),
	}
	st := analyzeModes(evs, "semaphore", 4, 0, 100)
	if len(st.Handoffs) != 0 {
		t.Errorf("hand-offs %v, want none", st.Handoffs)
	}
}

func TestAnalyzeModes_rwmutex(t *testing.T) {
	evs := []modeEvent{
		ev(0, true, 0, 1, 10, 11),   // reader R0
		ev(1, false, 2, 12, 20, 21), // writer waits for R0: hand-off 12-10
		ev(2, true, 3, 23, 30, 31),  // reader behind the writer: 23-20
		ev(3, true, 4, 24, 29, 30),  // reader granted with it: 24-20
		ev(0, true, 25, 26, 28, 29), // reader, no writer ahead: none
	}
	st := analyzeModes(evs, "rwmutex", 0, 0, 40)
	if want := []time.Duration{2, 3, 4}; !slices.Equal(st.Handoffs, want) {
		t.Errorf("hand-offs %v, want %v", st.Handoffs, want)
	}
	if len(st.SharedHandoffs) != 2 || len(st.ExclusiveHandoffs) != 1 {
		t.Errorf("shared %v exclusive %v", st.SharedHandoffs, st.ExclusiveHandoffs)
	}
	if st.Violations != 0 || st.MaxHolders != 3 || st.SharedGrants != 4 || st.ExclusiveGrants != 1 {
		t.Errorf("violations %d max %d shared %d excl %d, want 0, 3, 4, 1", st.Violations, st.MaxHolders, st.SharedGrants, st.ExclusiveGrants)
	}
	if want := 8.0 / 40; math.Abs(st.ExclusiveHeld-want) > 1e-9 {
		t.Errorf("writer held %v, want %v", st.ExclusiveHeld, want)
	}
}

func TestAnalyzeModes_violations(t *testing.T) {
	cases := []struct {
		kind  string
		limit int
		evs   []modeEvent
	}{
		{"lock", 1, []modeEvent{ev(0, false, 0, 1, 10, 11), ev(1, false, 0, 5, 12, 13)}},
		{"semaphore", 1, []modeEvent{ev(0, true, 0, 1, 10, 11), ev(1, true, 0, 5, 12, 13)}},
		{"rwmutex", 0, []modeEvent{ev(0, true, 0, 1, 10, 11), ev(1, false, 0, 5, 12, 13)}},
		{"rwmutex", 0, []modeEvent{ev(0, false, 0, 1, 10, 11), ev(1, true, 0, 5, 12, 13)}},
	}
	for _, c := range cases {
		if st := analyzeModes(c.evs, c.kind, c.limit, 0, 20); st.Violations != 1 {
			t.Errorf("%s %v: violations %d, want 1", c.kind, c.evs, st.Violations)
		}
	}
	// Readers together, and a lease beginning as another ends, are fine.
	ok := []modeEvent{ev(0, true, 0, 1, 10, 11), ev(1, true, 0, 5, 12, 13), ev(2, false, 0, 12, 14, 15)}
	if st := analyzeModes(ok, "rwmutex", 0, 0, 20); st.Violations != 0 {
		t.Errorf("violations %d, want 0", st.Violations)
	}
}
