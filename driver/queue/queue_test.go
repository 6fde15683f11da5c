package queue_test

import (
	"fmt"
	"testing"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
)

var (
	lockL = driver.KindLabel(driver.KindLock, 1)
	rwL   = driver.KindLabel(driver.KindRWMutex, 0)
	sem2L = driver.KindLabel(driver.KindSemaphore, 2)
	elecL = driver.KindLabel(driver.KindElection, 1)
	X     = driver.Exclusive
	S     = driver.Shared
)

func entries(label string, modes ...driver.Mode) []queue.Entry {
	out := make([]queue.Entry, len(modes))
	for i, m := range modes {
		out[i] = queue.Entry{Mode: m, Label: label}
	}
	return out
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   queue.Listing
		want queue.Plan
	}{
		{"lock, free", queue.Listing{Complete: true, Mode: X, Label: lockL, Limit: 1},
			queue.Plan{Verdict: queue.Granted}},
		{"lock, behind the holder", queue.Listing{Ahead: entries(lockL, X), Complete: true, Mode: X, Label: lockL, Limit: 1},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Release: true, ExclusiveRelease: true, Delete: true}},
		{"lock, second waiter", queue.Listing{Ahead: entries(lockL, X, X), Complete: true, Mode: X, Label: lockL, Limit: 1},
			queue.Plan{Verdict: queue.WaitFor, Target: 1, Release: true, ExclusiveRelease: true}},
		{"lock, keys only (etcd)", queue.Listing{Ahead: []queue.Entry{{}}, Before: 3, Mode: X, Label: lockL, Limit: 1},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, ExclusiveRelease: true}},
		{"lock, nothing listed yet", queue.Listing{Before: 1, Mode: X, Label: lockL, Limit: 1},
			queue.Plan{Verdict: queue.NeedMore}},
		{"writer behind readers", queue.Listing{Ahead: entries(rwL, S, S), Complete: true, Mode: X, Label: rwL},
			queue.Plan{Verdict: queue.WaitFor, Target: 1, ExclusiveRelease: true}},
		{"writer behind one reader, the head", queue.Listing{Ahead: entries(rwL, S), Complete: true, Mode: X, Label: rwL},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Release: true, ExclusiveRelease: true, Delete: true}},
		{"reader behind readers", queue.Listing{Ahead: entries(rwL, S, S), Complete: true, Mode: S, Label: rwL},
			queue.Plan{Verdict: queue.Granted}},
		{"reader behind a writer and readers", queue.Listing{Ahead: entries(rwL, X, S), Complete: true, Mode: S, Label: rwL},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Release: true, ExclusiveRelease: true, Delete: true}},
		{"reader behind two writers", queue.Listing{Ahead: entries(rwL, X, S, X), Complete: true, Mode: S, Label: rwL},
			queue.Plan{Verdict: queue.WaitFor, Target: 2, Release: true, ExclusiveRelease: true}},
		{"reader, readers listed, more unread (etcd's next page)", queue.Listing{Ahead: entries(rwL, S), Before: 1, Mode: S, Label: rwL},
			queue.Plan{Verdict: queue.NeedMore}},
		{"reader, another kind counts as a writer (etcd)", queue.Listing{Ahead: entries(lockL, X), Complete: true, Mode: S, Label: rwL, OtherKind: queue.AsExclusive},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Release: true, ExclusiveRelease: true, Delete: true}},
		{"reader, another kind refused (ZooKeeper)", queue.Listing{Ahead: entries(lockL, X), Complete: true, Mode: S, Label: rwL},
			queue.Plan{Verdict: queue.Mismatch, Target: 0}},
		{"permit granted", queue.Listing{Ahead: entries(sem2L, S), Complete: true, Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.Granted, Notify: true}},
		{"permit, first waiter", queue.Listing{Ahead: entries(sem2L, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.WaitAny, Any: 2, Need: 1, Notify: true}},
		{"permit, first waiter, parallel", queue.Listing{Ahead: entries(sem2L, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2, Parallel: true},
			queue.Plan{Verdict: queue.WaitAny, Any: 2, Need: 1, Notify: true}},
		{"permit, second waiter, parallel", queue.Listing{Ahead: entries(sem2L, S, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2, Parallel: true},
			queue.Plan{Verdict: queue.WaitAny, Any: 2, Need: 2, Notify: true}},
		{"permit, third waiter, parallel", queue.Listing{Ahead: entries(sem2L, S, S, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2, Parallel: true},
			queue.Plan{Verdict: queue.WaitFor, Target: 2, Notice: true, Notify: true}},
		{"permit, fourth waiter, parallel", queue.Listing{Ahead: entries(sem2L, S, S, S, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2, Parallel: true},
			queue.Plan{Verdict: queue.WaitFor, Target: 3, Notice: true, Notify: true}},
		{"permit, second waiter", queue.Listing{Ahead: entries(sem2L, S, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.WaitFor, Target: 2, Notice: true, NoticeFirst: true, Notify: true}},
		{"permit, third waiter", queue.Listing{Ahead: entries(sem2L, S, S, S, S), Complete: true, Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.WaitFor, Target: 3, Notice: true, Notify: true}},
		{"permit, more than the limit counted (etcd)", queue.Listing{Ahead: []queue.Entry{{}}, Before: 2, Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Notice: true, Notify: true}},
		{"permit, more than the limit counted, parallel (etcd)", queue.Listing{Ahead: entries(sem2L, S, S, S), Before: 2, Mode: S, Label: sem2L, Limit: 2, Parallel: true},
			queue.Plan{Verdict: queue.WaitFor, Target: 1, Notice: true, Notify: true}},
		{"permit, too few counted", queue.Listing{Ahead: entries(sem2L, S), Mode: S, Label: sem2L, Limit: 2},
			queue.Plan{Verdict: queue.NeedMore, Notify: true}},
		{"candidate behind the leader", queue.Listing{Ahead: entries(elecL, X), Complete: true, Mode: X, Label: elecL, Limit: 1},
			queue.Plan{Verdict: queue.WaitFor, Target: 0, Delete: true, Publishes: true, ExclusiveRelease: true}},
		{"candidate behind a candidate", queue.Listing{Ahead: entries(elecL, X, X), Complete: true, Mode: X, Label: elecL, Limit: 1},
			queue.Plan{Verdict: queue.WaitFor, Target: 1, Publishes: true, ExclusiveRelease: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := queue.Decide(tc.in); got != tc.want {
				t.Errorf("Decide = %+v\nwant       %+v", got, tc.want)
			}
		})
	}
}

// The brute-force rule: the caller at the end of q (entries ahead, then
// the caller) is granted by driver.Admits over everything ahead.
func granted(ahead []queue.Entry, m driver.Mode, limit int) bool {
	s, x := 0, 0
	for _, e := range ahead {
		if e.Mode == driver.Shared {
			s++
		} else {
			x++
		}
	}
	return driver.Admits(limit, m, s, x)
}

func without(q []queue.Entry, drop func(int) bool) []queue.Entry {
	var out []queue.Entry
	for i, e := range q {
		if !drop(i) {
			out = append(out, e)
		}
	}
	return out
}

// checkPlan checks p, made from a window of ahead starting at index from,
// against the brute-force rule; ahead is the whole queue ahead of the caller.
func checkPlan(ahead []queue.Entry, from int, m driver.Mode, limit int, parallel bool, p queue.Plan) error {
	g := granted(ahead, m, limit)
	switch p.Verdict {
	case queue.Granted:
		if !g {
			return fmt.Errorf("granted, but the rule says not")
		}
		return nil
	case queue.NeedMore, queue.Mismatch:
		return nil
	case queue.WaitAny:
		if g {
			return fmt.Errorf("waits, but the rule grants")
		}
		if p.Need < 1 || p.Need > p.Any {
			return fmt.Errorf("WaitAny: Need %d of Any %d", p.Need, p.Any)
		}
		for i := range p.Any {
			if !granted(ahead[:i], S, limit) {
				return fmt.Errorf("WaitAny: entry %d is no holder", i)
			}
		}
		// Any Need departures grant, fewer never do (the first Need
		// entries stand for any: all ahead are alike).
		if !granted(ahead[p.Need:], m, limit) {
			return fmt.Errorf("WaitAny: %d departures do not grant", p.Need)
		}
		if granted(ahead[p.Need-1:], m, limit) {
			return fmt.Errorf("WaitAny: %d departures grant already", p.Need-1)
		}
		return nil
	}
	if g {
		return fmt.Errorf("waits, but the rule grants")
	}
	t := from + p.Target
	target := ahead[t]
	if parallel && p.Notice && len(ahead)-t < limit {
		// etcd waits for the deletes of the target and the entries
		// behind it alone: while they stand, the caller must wait.
		return fmt.Errorf("Notice: only %d entries from the target on, fewer than the limit %d", len(ahead)-t, limit)
	}
	if p.Delete && !granted(without(ahead, func(j int) bool { return j == t }), m, limit) {
		return fmt.Errorf("Delete: the target's departure does not grant")
	}
	// Every way the target can come to hold: entries ahead of it gone.
	for set := 0; set < 1<<t; set++ {
		rest := without(ahead, func(j int) bool { return j < t && set&(1<<j) != 0 })
		nt := t - popcount(set)
		if !granted(rest[:nt], target.Mode, limit) {
			continue
		}
		after := without(rest, func(j int) bool { return j == nt })
		if p.Release && !granted(after, m, limit) {
			return fmt.Errorf("Release: the target's release (with %b gone) does not grant", set)
		}
		if p.ExclusiveRelease && target.Mode == driver.Exclusive && !granted(after, m, limit) {
			return fmt.Errorf("ExclusiveRelease: the target's release (with %b gone) does not grant", set)
		}
		if p.NoticeFirst && len(rest)-1 > limit {
			return fmt.Errorf("NoticeFirst: %d ahead after the target's grant", len(rest)-1)
		}
		if parallel && p.Notice && len(rest)-nt-1 >= limit {
			return fmt.Errorf("Notice: %d waiters ahead after the target's grant, not one of the first %d", len(rest)-nt-1, limit)
		}
	}
	return nil
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// FuzzDecide checks every decision against the brute-force rule, on the
// whole listing and on every partial one (a window ending at the caller,
// with and without modes).
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), uint16(0b1011), uint8(4), uint8(1))
	f.Add(uint8(1), uint16(0), uint8(3), uint8(2))
	f.Add(uint8(2), uint16(0b0110), uint8(5), uint8(0))
	f.Add(uint8(3), uint16(0b0001), uint8(3), uint8(1))
	f.Fuzz(func(t *testing.T, kind uint8, bits uint16, n uint8, callerBit uint8) {
		n %= 9
		var label string
		var limit int
		modes := make([]driver.Mode, n)
		m := driver.Mode(callerBit & 1)
		switch kind % 4 {
		case 0: // lock
			label, limit, m = lockL, 1, X
		case 1: // semaphore of 2: Shared only
			label, limit, m = sem2L, 2, S
			for i := range modes {
				modes[i] = S
			}
		case 2: // read-write lock
			label, limit = rwL, 0
			for i := range modes {
				modes[i] = driver.Mode(bits >> i & 1)
			}
		case 3: // election
			label, limit, m = elecL, 1, X
		}
		ahead := entries(label, modes...)
		for _, parallel := range []bool{false, true} {
			full := queue.Listing{Ahead: ahead, Complete: true, Mode: m, Label: label, Limit: limit, Parallel: parallel}
			p := queue.Decide(full)
			if p.Verdict == queue.NeedMore || p.Verdict == queue.Mismatch {
				t.Fatalf("complete listing %v: %v", modes, p.Verdict)
			}
			if (p.Verdict == queue.Granted) != granted(ahead, m, limit) {
				t.Fatalf("complete listing %v, caller %v: %v, rule says granted=%v", modes, m, p.Verdict, granted(ahead, m, limit))
			}
			if err := checkPlan(ahead, 0, m, limit, parallel, p); err != nil {
				t.Fatalf("complete listing %v, caller %v, parallel %v, %+v: %v", modes, m, parallel, p, err)
			}
		}
		for from := 1; from <= len(ahead); from++ {
			for _, keysOnly := range []bool{false, true} {
				w := append([]queue.Entry(nil), ahead[from:]...)
				if keysOnly {
					for i := range w {
						w[i] = queue.Entry{}
					}
				}
				for _, before := range []int{from, from - 1} {
					for _, parallel := range []bool{false, true} {
						l := queue.Listing{Ahead: w, Before: before, Mode: m, Label: label, Limit: limit, Parallel: parallel}
						p := queue.Decide(l)
						if err := checkPlan(ahead, from, m, limit, parallel, p); err != nil {
							t.Fatalf("window %v from %d (keys only %v, before %d, parallel %v), caller %v, %+v: %v", modes, from, keysOnly, before, parallel, m, p, err)
						}
					}
				}
			}
		}
	})
}

func TestDecide_mismatchRefusedAnywhereAhead(t *testing.T) {
	ahead := append(entries(lockL, X), entries(rwL, S, S)...)
	p := queue.Decide(queue.Listing{Ahead: ahead, Complete: true, Mode: S, Label: rwL})
	if p.Verdict != queue.Mismatch || p.Target != 0 {
		t.Fatalf("Decide = %+v, want Mismatch at 0", p)
	}
}
