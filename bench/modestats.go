package main

import (
	"cmp"
	"slices"
	"time"
)

// modeEvent is one completed cycle of one contender in a modes run: it
// called Acquire (Lock, RLock) at T0, held from T1 (the call returned) to
// T2 (Unlock called), and Unlock returned at T3. Times are nanoseconds of
// one monotonic clock since the run began.
type modeEvent struct {
	C              int  // the contender
	Shared         bool // a permit or a reader; else a lock or a writer
	T0, T1, T2, T3 int64
}

// modeStats is what analyzeModes reads from a run's events.
type modeStats struct {
	Grants, SharedGrants, ExclusiveGrants int
	// MeanHolders is the time-averaged number of leases held over the
	// window, each lease counted from T1 to T2 (see modeEvent).
	MeanHolders float64
	// ExclusiveHeld is the fraction of the window during which an
	// Exclusive lease (a writer, the lock) was held.
	ExclusiveHeld float64
	// MaxHolders is the most leases held at once within the window.
	MaxHolders int
	// Violations counts the leases (of the whole run, warm-up included)
	// that began while the leases already held did not admit them: the
	// grant rule of driver.Admits applied to what the clients held.
	Violations int
	// Handoffs are the hand-off latencies of the window's grants (see
	// handoffRule), all modes together and split by mode.
	Handoffs, SharedHandoffs, ExclusiveHandoffs []time.Duration
}

// Kinds of point in the sweep of analyzeModes. At equal times, a release
// is handled before a grant (a grant at the very nanosecond of a release
// may follow from it), and a lease's end before another's start.
const (
	ptReleaseDone = iota // T3
	ptRelease            // T2
	ptAcquire            // T0
	ptGrant              // T1
)

type point struct {
	t    int64
	kind int
	ev   *modeEvent
}

// analyzeModes computes a run's figures from its events: kind is
// "lock", "semaphore" or "rwmutex", limit the permits (1 for the lock, 0
// for the RWMutex: any number of readers), [ws, we) the measuring window.
//
// The client's view of holding, [T1, T2), lies within the server's grant
// (granted before Acquire returns, released after Unlock is called): with
// a correct backend it never shows more holders than the server admits,
// so Violations is 0 and MeanHolders ≤ limit.
func analyzeModes(evs []modeEvent, kind string, limit int, ws, we int64) modeStats {
	var st modeStats
	pts := make([]point, 0, 4*len(evs))
	for i := range evs {
		e := &evs[i]
		pts = append(pts, point{e.T0, ptAcquire, e}, point{e.T1, ptGrant, e}, point{e.T2, ptRelease, e}, point{e.T3, ptReleaseDone, e})
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.kind, b.kind)
	})

	var (
		held, heldExclusive int // leases in [T1, T2)
		inUse               int // leases in [T1, T3): held or being released
		acquiring           = map[int]int64{}
		last                = max(ws, int64(0)) // integration cursor, clipped to the window
		area, exclTime      float64
		lastRelease         int64   = -1 // start of the latest release, any mode
		lastExclRelease     int64   = -1 // start of the latest release of an Exclusive lease
		fifo                []int64      // semaphore: releases due to a waiter, not yet paired
	)
	advance := func(t int64) {
		t = min(max(t, ws), we)
		if t > last {
			area += float64(held) * float64(t-last)
			if heldExclusive > 0 {
				exclTime += float64(t - last)
			}
			last = t
		}
	}
	for _, p := range pts {
		advance(p.t)
		e := p.ev
		inWindow := func() bool { return p.t >= ws && p.t < we }
		switch p.kind {
		case ptAcquire:
			acquiring[e.C] = e.T0
		case ptGrant:
			// The grant rule (driver.Admits) over what is held now.
			if heldExclusive > 0 || (!e.Shared && held > 0) || (limit > 0 && held >= limit) {
				st.Violations++
			}
			if d, ok := handoff(kind, e, lastRelease, lastExclRelease, &fifo, acquiring); ok && inWindow() {
				st.Handoffs = append(st.Handoffs, d)
				if e.Shared {
					st.SharedHandoffs = append(st.SharedHandoffs, d)
				} else {
					st.ExclusiveHandoffs = append(st.ExclusiveHandoffs, d)
				}
			}
			delete(acquiring, e.C)
			held++
			inUse++
			if !e.Shared {
				heldExclusive++
			}
			if inWindow() {
				st.Grants++
				if e.Shared {
					st.SharedGrants++
				} else {
					st.ExclusiveGrants++
				}
				st.MaxHolders = max(st.MaxHolders, held)
			}
		case ptRelease:
			held--
			if !e.Shared {
				heldExclusive--
			}
			// A semaphore's release is due to a waiter when more
			// contenders want a permit than there are: those holding or
			// releasing one (the releaser among them) and those in
			// Acquire.
			if kind == "semaphore" && inUse+len(acquiring) > limit {
				fifo = append(fifo, e.T2)
			}
			lastRelease = e.T2
			if !e.Shared {
				lastExclRelease = e.T2
			}
		case ptReleaseDone:
			inUse--
		}
	}
	advance(we)
	if w := float64(we - ws); w > 0 {
		st.MeanHolders = area / w
		st.ExclusiveHeld = exclTime / w
	}
	return st
}

// handoff decides whether the grant e is a hand-off, and measures it from
// the start of the release that let it in:
//   - a lock, or an RWMutex writer: every lease granted before it had to
//     go, so the latest release that began after it called Acquire;
//   - an RWMutex reader: only writers block readers, so the latest release
//     of a writer that began after it called RLock;
//   - a semaphore permit: one release frees one permit, so releases and
//     waiters are paired first come first served: the grant takes the
//     earliest release not yet paired that began after it called Acquire
//     and was due to a waiter (see analyzeModes).
//
// A grant without such a release (a free permit, a reader with no writer
// ahead, a free lock) is not a hand-off.
func handoff(kind string, e *modeEvent, lastRelease, lastExclRelease int64, fifo *[]int64, acquiring map[int]int64) (time.Duration, bool) {
	switch {
	case kind == "semaphore":
		// Releases older than every current waiter's call can be paired
		// with nobody any more (a later waiter calls later still).
		oldest := e.T0
		for _, t0 := range acquiring {
			oldest = min(oldest, t0)
		}
		q := *fifo
		for len(q) > 0 && q[0] < oldest {
			q = q[1:]
		}
		*fifo = q
		for i, u := range q {
			if u >= e.T0 {
				*fifo = slices.Delete(q, i, i+1)
				return time.Duration(e.T1 - u), true
			}
		}
		return 0, false
	case e.Shared: // an RWMutex reader
		if lastExclRelease >= e.T0 {
			return time.Duration(e.T1 - lastExclRelease), true
		}
		return 0, false
	default: // a lock or a writer
		if lastRelease >= e.T0 {
			return time.Duration(e.T1 - lastRelease), true
		}
		return 0, false
	}
}
