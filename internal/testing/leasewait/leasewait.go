// Package leasewait waits, in dlock's tests, for a lease's renewal to show:
// the lease engine sends no event when it renews, so the wait polls
// Lease.Deadline, bounded by the caller's context. It is test support, not
// for applications.
package leasewait

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockdev/dlock"
)

// RenewedPast waits until l's deadline is after at, as a renewal sent after
// at minus the validity moves it. It returns nil then; an error wrapping
// l.Err() when the lease ends first; and one wrapping ctx's error, marked
// a watchdog's, when ctx ends first.
func RenewedPast(ctx context.Context, l *dlock.Lease, at time.Time) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !l.Deadline().After(at) {
		select {
		case <-l.Done():
			return fmt.Errorf("lease on %q lost: %w", l.Key(), l.Err())
		case <-ctx.Done():
			return fmt.Errorf("lease on %q neither renewed nor lost (watchdog): %w", l.Key(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}
