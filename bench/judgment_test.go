package main

import (
	"testing"
	"time"
)

const us = time.Microsecond

// judgeRun is a one-round run on etcd with dlock and etcd's Mutex.
func judgeRun() *results {
	return &results{Variant: durable, Rounds: 1,
		Libraries: []libInfo{
			{Name: "dlock (etcd)", Backend: "etcd", IsDlock: true},
			{Name: "etcd Mutex", Backend: "etcd"},
		},
		RTT: map[string]rttResult{"etcd": {N: 1, P50: 66 * us}},
	}
}

func withUncontended(dlock, peer time.Duration) func(*results) {
	return func(r *results) {
		r.Uncontended = append(r.Uncontended,
			uncontendedResult{Lib: "dlock (etcd)", Round: 1, N: 100, P50: dlock},
			uncontendedResult{Lib: "etcd Mutex", Round: 1, N: 100, P50: peer})
	}
}

func withCycleFloor(d time.Duration) func(*results) {
	return func(r *results) {
		r.CycleFloor = append(r.CycleFloor, floorResult{Backend: "etcd", Round: 1, N: 100, P50: d})
	}
}

func withHandoffFloor(d time.Duration) func(*results) {
	return func(r *results) {
		r.HandoffFloor = append(r.HandoffFloor, floorResult{Backend: "etcd", Round: 1, N: 100, P50: d})
	}
}

func withHandoffFloorBehind(d time.Duration) func(*results) {
	return func(r *results) {
		r.HandoffFloorBehind = append(r.HandoffFloorBehind, floorResult{Backend: "etcd", Round: 1, N: 100, P50: d, Unordered: 7})
	}
}

// withContended adds a run of n contenders for lib; fifo false makes every
// grant a barge.
func withContended(lib string, n int, grantsPerS float64, handoff time.Duration, fifo bool) func(*results) {
	return func(r *results) {
		c := contendedResult{Lib: lib, N: n, Round: 1, Grants: 1000, GrantsPerS: grantsPerS,
			Handoffs: 900, HandoffP50: handoff, HandoffP99: 2 * handoff, MinGrants: 31, MaxGrants: 32}
		if !fifo {
			c.SelfRetakes = 900
		}
		r.Contended = append(r.Contended, c)
	}
}

func withRTTWrite(d time.Duration) func(*results) {
	return func(r *results) { r.RTT["etcd-write"] = rttResult{N: 1, P50: d} }
}

func withQueue(drained int, load float64) func(*results) {
	return func(r *results) {
		r.Queue = append(r.Queue, queueResult{Lib: "dlock (etcd)", Waiters: 100, Drained: drained, Drain: time.Second, Load: loadInfo{Target: 3, Mean: load}})
	}
}

func withPermits(mean float64) func(*results) {
	return func(r *results) {
		r.Permits = append(r.Permits, modeResult{Lib: "dlock (etcd)", Grants: 100, MeanHolders: mean})
	}
}

// Each target row's verdict, floor and ratios from a table of figures: the
// issue's rule is met, or missed within 1.3× of a floor measured in the
// same run the same way, and a row with no floor says "–" and is judged by
// its target alone.
func TestTargetsTable_judgments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		row       string
		figures   []func(*results)
		floor     string // the floor column; "" to skip
		vsFloor   string // dlock ÷ floor; "" to skip
		wantVerd  string
		wantRatio string // dlock ÷ best peer; "" to skip
	}{
		{name: "uncontended faster than the peer", row: "uncontended cycle p50",
			figures: []func(*results){withUncontended(300*us, 365*us), withCycleFloor(280 * us)},
			floor:   "raw cycle: 280 µs", vsFloor: "1.07×", wantRatio: "0.82×", wantVerd: "**met**"},
		{name: "uncontended slower than the peer, within 1.3× of the raw cycle", row: "uncontended cycle p50",
			figures: []func(*results){withUncontended(460*us, 365*us), withCycleFloor(360 * us)},
			floor:   "raw cycle: 360 µs", vsFloor: "1.28×", wantRatio: "1.26×", wantVerd: "**missed**, within 1.3× of the floor"},
		{name: "uncontended slower than the peer and than 1.3× the raw cycle", row: "uncontended cycle p50",
			figures: []func(*results){withUncontended(470*us, 365*us), withCycleFloor(360 * us)},
			vsFloor: "1.31×", wantVerd: "**missed**"},
		// The floor is the raw cycle measured beside the libraries, never
		// the write round trip of another section times two (which, at
		// 2 × 304 µs, once put the floor above dlock's own cycle).
		{name: "uncontended with a write RTT but no raw cycle (an older run)", row: "uncontended cycle p50",
			figures: []func(*results){withUncontended(460*us, 365*us), withRTTWrite(304 * us)},
			floor:   "–", vsFloor: "–", wantVerd: "**missed**"},
		{name: "hand-off within 3 RTT", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 190*us, true), withContended("etcd Mutex", 8, 300, 1400*us, true), withHandoffFloor(176 * us)},
			floor:   "one notification: 176 µs; behind another write: –", vsFloor: "1.08× (behind another write: –)", wantVerd: "**met**"},
		{name: "hand-off above 3 RTT, within 1.3× of one notification", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 220*us, true), withHandoffFloor(176 * us)},
			vsFloor: "1.25× (behind another write: –)", wantVerd: "**missed**, within 1.3× of the floor"},
		{name: "hand-off above 3 RTT and 1.3× one notification", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 670*us, true), withHandoffFloor(176 * us)},
			vsFloor: "3.81× (behind another write: –)", wantVerd: "**missed**"},
		// The floor behind another write is shown beside the first, and
		// dlock's figure over it; the verdict stays on one notification.
		{name: "hand-off above 1.3× one notification, within 1.3× of the floor behind a write", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 670*us, true), withHandoffFloor(176 * us), withHandoffFloorBehind(600 * us)},
			floor:   "one notification: 176 µs; behind another write: 600 µs", vsFloor: "3.81× (behind another write: 1.12×)", wantVerd: "**missed**"},
		{name: "hand-off within 1.3× of one notification, floor behind a write measured", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 220*us, true), withHandoffFloor(176 * us), withHandoffFloorBehind(300 * us)},
			floor:   "one notification: 176 µs; behind another write: 300 µs", vsFloor: "1.25× (behind another write: 0.73×)", wantVerd: "**missed**, within 1.3× of the floor"},
		{name: "hand-off with no floor measured (an older run)", row: "hand-off p50",
			figures: []func(*results){withContended("dlock (etcd)", 8, 1000, 220*us, true)},
			floor:   "–", vsFloor: "–", wantVerd: "**missed**"},
		{name: "grants/s at 3× etcd Mutex, FIFO", row: "grants/s",
			figures: []func(*results){withContended("dlock (etcd)", 32, 1000, 1000*us, true), withContended("etcd Mutex", 32, 300, 3000*us, true), withHandoffFloor(500 * us)},
			floor:   "≤ 2000/s (1 ÷ one notification of 500 µs)", vsFloor: "2.00×", wantRatio: "3.33×", wantVerd: "**met**"},
		{name: "grants/s short of 3× but within 1.3× of the ceiling, FIFO", row: "grants/s",
			figures: []func(*results){withContended("dlock (etcd)", 32, 1600, 600*us, true), withContended("etcd Mutex", 32, 600, 3000*us, true), withHandoffFloor(500 * us)},
			vsFloor: "1.25×", wantVerd: "**missed**, within 1.3× of the ceiling"},
		// A run that barged is not FIFO: the target is missed whatever
		// its rate, and the ceiling of FIFO hand-offs does not excuse it.
		{name: "grants/s not FIFO, within 1.3× of the ceiling", row: "grants/s",
			figures:  []func(*results){withContended("dlock (etcd)", 32, 1600, 600*us, false), withContended("etcd Mutex", 32, 500, 3000*us, true), withHandoffFloor(500 * us)},
			wantVerd: "**missed**"},
		{name: "waiters drained at load 3", row: "100 waiters",
			figures: []func(*results){withQueue(100, 3.0)}, floor: "–", vsFloor: "–", wantVerd: "**met**"},
		{name: "waiters stalled", row: "100 waiters",
			figures: []func(*results){withQueue(40, 3.0)}, wantVerd: "**missed**"},
		{name: "waiters stalled below the target load", row: "100 waiters",
			figures: []func(*results){withQueue(40, 1.0)}, wantVerd: "**missed**"},
		// A drain at a lighter load says nothing of load 3.
		{name: "waiters drained below the target load", row: "100 waiters",
			figures: []func(*results){withQueue(100, 1.0)}, wantVerd: "not measured"},
		{name: "semaphore holders above 2.4", row: "semaphore",
			figures: []func(*results){withPermits(2.5)}, floor: "–", vsFloor: "–", wantVerd: "**met**"},
		{name: "semaphore holders below 2.4", row: "semaphore",
			figures: []func(*results){withPermits(1.5)}, floor: "–", wantVerd: "**missed**"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := judgeRun()
			for _, f := range tc.figures {
				f(res)
			}
			row := targetRow(t, targetsTable(res), tc.row, "etcd")
			check := func(col int, what, want string) {
				t.Helper()
				if want != "" && row[col] != want {
					t.Errorf("%s = %q, want %q (row %q)", what, row[col], want, row)
				}
			}
			check(4, "floor", tc.floor)
			check(6, "dlock ÷ best peer", tc.wantRatio)
			check(7, "dlock ÷ floor", tc.vsFloor)
			check(8, "verdict", tc.wantVerd)
		})
	}
}

// Rows whose target names no floor say "–" in both floor columns.
func TestTargetsTable_noFloorRowsSayDash(t *testing.T) {
	res := targetsFixture()
	for _, prefix := range []string{"100,000 distinct keys", "client allocations", "renewal requests", "server memory", "hand-off p99", "semaphore"} {
		row := targetRow(t, targetsTable(res), prefix, "redis")
		if row[4] != "–" || row[7] != "–" {
			t.Errorf("%s: floor %q, dlock ÷ floor %q, want – and –", prefix, row[4], row[7])
		}
	}
}
