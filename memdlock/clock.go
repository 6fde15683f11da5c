package memdlock

import (
	"time"

	"github.com/dlockdev/dlock/internal/fakeclock"
)

// Clock is a fake clock for a lock space: the space counts its leases'
// validity on it, and time moves only when Advance is called. Only the
// space's own time is fake: package dlock renews leases, and counts
// HoldAtLeast and HoldAtMost, on the real clock. A Clock is safe for
// concurrent use.
type Clock struct{ fc *fakeclock.Clock }

// NewClock returns a fake clock that reads start until advanced.
func NewClock(start time.Time) *Clock { return &Clock{fakeclock.New(start)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.fc.Now() }

// Advance moves the clock forward by d and, before it returns, runs what
// falls due on the way in time order: leases that were not renewed
// within their TTL expire (and the entries of waiters cut off by
// Handle.Disconnect a TTL before), and their holders' Done channels close soon
// after (Lease.Done is closed by package dlock, on its own goroutine).
func (c *Clock) Advance(d time.Duration) { c.fc.Advance(d) }

// afterFunc runs f once the clock has advanced by d; the result stops it.
func (c *Clock) afterFunc(d time.Duration, f func()) (stop func()) {
	t := c.fc.AfterFunc(d, f)
	return func() { t.Stop() }
}
