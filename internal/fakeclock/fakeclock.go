// Package fakeclock is a clock that moves only when told to: memdlock's
// Clock is one, and the lease engine's tests run on one.
package fakeclock

import (
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock, safe for concurrent use. Its timers run in
// Advance, on the caller's goroutine, with no lock held.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*Timer // armed, in no order
}

// New returns a clock that reads start until advanced.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f once the clock has advanced by d.
func (c *Clock) AfterFunc(d time.Duration, f func()) *Timer {
	t := &Timer{c: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d and, before it returns, runs the
// timers that fall due on the way, in time order, each at its own time.
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

// Timer is a function due at a time of a Clock, as a *time.Timer is.
type Timer struct {
	c  *Clock
	at time.Time
	f  func()
}

// Stop disarms the timer; it reports whether the timer was armed.
func (t *Timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i >= 0 {
		t.c.timers = slices.Delete(t.c.timers, i, i+1)
	}
	return i >= 0
}

// Reset arms the timer to fire d after the clock's present time; it
// reports whether the timer was armed before.
func (t *Timer) Reset(d time.Duration) bool {
	armed := t.Stop()
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.at = t.c.now.Add(d)
	t.c.timers = append(t.c.timers, t)
	return armed
}
