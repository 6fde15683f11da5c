package memdlock

import (
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock for a lock space: the space counts its leases'
// validity on it, and time moves only when Advance is called. Only the
// space's own time is fake: package dlock renews leases, and counts
// HoldAtLeast and HoldAtMost, on the real clock. A Clock is safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // pending, in no order
}

// NewClock returns a fake clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and, before it returns, runs what
// falls due on the way in time order: leases that were not renewed
// within their TTL expire (and the entries of waiters cut off by
// Handle.Disconnect a TTL before), and their holders' Done channels close soon
// after (Lease.Done is closed by package dlock, on its own goroutine).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		// The earliest timer due by end, if any.
		i := -1
		for j, t := range c.timers {
			if !t.at.After(end) && (i < 0 || t.at.Before(c.timers[i].at)) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// timer is a function due at a time of a fake clock.
type timer struct {
	at time.Time
	f  func()
}

// afterFunc runs f once the clock has advanced by d; the result stops it.
func (c *Clock) afterFunc(d time.Duration, f func()) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if i := slices.Index(c.timers, t); i >= 0 {
			c.timers = slices.Delete(c.timers, i, i+1)
		}
	}
}
