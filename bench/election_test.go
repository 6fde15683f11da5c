package main

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a seenLog clock the test sets.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() int64 { return c.t.Load() }

// A value's receipt time is its first: a later state with the same value
// (dlock's Observe re-sends after a read, etcd's after a re-watch) must not
// move it, or the latency would grow with the observer's later reads.
func TestSeenLog_firstReceiptWins(t *testing.T) {
	var c fakeClock
	l := newSeenLog(c.now)
	c.t.Store(10)
	l.add("c0-1")
	c.t.Store(50)
	l.add("c0-1")
	got, err := l.wait("c0-1", time.Second)
	if err != nil || got != 10 {
		t.Fatalf("wait = %d, %v; want 10, nil", got, err)
	}
}

// "No leader" is a state received (the observer works) but not a value to
// wait for.
func TestSeenLog_noLeaderIsReceivedNotRecorded(t *testing.T) {
	var c fakeClock
	l := newSeenLog(c.now)
	l.add("")
	l.close()
	if l.neverReceived() {
		t.Fatal("neverReceived after a state was received")
	}
	if _, err := l.wait("", time.Second); !errors.Is(err, errObserveClosed) {
		t.Fatalf("wait(\"\") = %v; want errObserveClosed", err)
	}
}

// dlock's Observe closes its channel at once where the driver has no
// driver.Observer: the run must learn "not available", not wait for the
// time limit.
func TestSeenLog_closedAtOnceIsNotAvailable(t *testing.T) {
	var c fakeClock
	l := newSeenLog(c.now)
	done := make(chan error, 1)
	go func() { _, err := l.wait("c0-0", time.Minute); done <- err }()
	l.close()
	if err := <-done; !errors.Is(err, errObserveClosed) {
		t.Fatalf("wait = %v; want errObserveClosed", err)
	}
	if !l.neverReceived() {
		t.Fatal("neverReceived = false for a channel closed before any state")
	}
}

func TestSeenLog_waitWakesOnAdd(t *testing.T) {
	var c fakeClock
	l := newSeenLog(c.now)
	done := make(chan int64, 1)
	go func() { at, _ := l.wait("p-1", time.Minute); done <- at }()
	c.t.Store(7)
	l.add("p-0")
	l.add("p-1")
	if at := <-done; at != 7 {
		t.Fatalf("wait = %d; want 7", at)
	}
}

func TestSeenLog_timeout(t *testing.T) {
	var c fakeClock
	l := newSeenLog(c.now)
	l.add("p-0")
	if _, err := l.wait("p-1", time.Millisecond); !errors.Is(err, errNotSeen) {
		t.Fatalf("wait = %v; want errNotSeen", err)
	}
}

func TestOnlySections(t *testing.T) {
	names := func(ws []modeWorkload) string {
		var s []string
		for _, w := range ws {
			s = append(s, w.Name)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		only, modes string
		sections    string
		ok          bool
	}{
		{"election", "", "rtt,election", true},
		{"modes,election", "lock,semaphore,rwmutex", "rtt,modes,election", true},
		{" election , rwmutex", "lock,rwmutex", "rtt,modes,election", true},
		{"semaphore", "lock,semaphore", "rtt,modes", true},
		// The memory section has no table in RTTs: no round-trip floor.
		{"memory", "", "memory", true},
		{"election,memory", "", "rtt,election,memory", true},
		// Sections run in the order of a full run, whatever the order named.
		{"queue,keys,renewal,permits", "", "permits,renewal,keys,queue", true},
		{"uncontended", "", "rtt,uncontended", true},
		{"contended,cost", "", "rtt,contended,cost", true},
		{"dlock", "", "", false},
		{"election,dlock", "", "", false},
		{"memory,redis", "", "", false},
		{"", "", "", false},
	} {
		sel, ok := onlySections(tc.only)
		secs := strings.Join(sel.sections(), ",")
		if names(sel.modes) != tc.modes || secs != tc.sections || ok != tc.ok {
			t.Errorf("onlySections(%q) = modes %q, sections %q, %v; want %q, %q, %v",
				tc.only, names(sel.modes), secs, ok, tc.modes, tc.sections, tc.ok)
		}
	}
}

// The report shows runs that a backend cannot do (on main before the
// backends implement Observe and Proclaim) as "not available", never as
// zeros or NaN, beside the figures of those that ran.
func TestElectionReport_notAvailableRows(t *testing.T) {
	handover := electionRun{Max: 600, Warm: 10, Limit: 8 * time.Second, N: 600, P50: 300 * time.Microsecond, P99: 2 * time.Millisecond,
		Events: 600, Window: time.Second, Delta: counters{Requests: 1200}}
	res := &results{
		Command: "cd bench && ./run.sh -only election",
		RTT:     map[string]rttResult{"redis": {P50: 20 * time.Microsecond}, "redis-notify": {P50: 30 * time.Microsecond}, "etcd": {P50: 150 * time.Microsecond}, "etcd-notify": {P50: 130 * time.Microsecond}},
		Election: []electionResult{
			{Lib: "dlock (redis)", Backend: "redis", IsDlock: true, Candidates: 3, Hold: time.Millisecond, Handover: handover,
				ObservedLeader: electionRun{Missing: notAvailable(observeMissing)},
				Proclaim:       electionRun{Missing: notAvailable(observeMissing, publishMissing)}},
			{Lib: "dlock (etcd)", Backend: "etcd", IsDlock: true, Missing: "not available: the etcddlock package did not build when this report was made"},
			{Lib: "etcd Election", Backend: "etcd", Candidates: 3, Hold: time.Millisecond, Handover: handover, ObservedLeader: handover,
				Proclaim: electionRun{N: 300, P50: 250 * time.Microsecond, P99: time.Millisecond, CallP50: 260 * time.Microsecond, CallP99: time.Millisecond, Events: 300, Delta: counters{Requests: 300}}},
		},
	}
	var m md
	electionReport(&m, res)
	out := m.String()
	for _, want := range []string{
		"`cd bench && ./run.sh -only election`",
		"| dlock (redis) | 300 µs / 2.00 ms | 15.0 (10.0) | 2.00 | not available | – | – | not available |",
		"| dlock (etcd) | not available: the etcddlock package did not build",
		"| etcd Election | 300 µs / 2.00 ms | 2.0 (2.3) | 2.00 | 300 µs / 2.00 ms |",
		"| dlock (redis) | Observe, Proclaim | not available | – |",
		"not available: " + observeMissing + "; " + publishMissing,
		"up to 600 hand-overs after 10 not measured, within 8.00 s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NaN") {
		t.Errorf("report shows NaN:\n%s", out)
	}

	m = md{}
	electionReport(&m, &results{})
	if !strings.Contains(m.String(), "Not measured in this run") {
		t.Errorf("report of a run without the section:\n%s", m.String())
	}
}
