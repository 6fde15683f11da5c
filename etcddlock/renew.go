package etcddlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// RenewBatch implements driver.BatchRenewer: it renews the grants with one
// keep-alive per lease among them, which for a Client's grants of one TTL
// is one request (they share their lease: lease.go). Each grant counts its
// validity from the send time of that keep-alive, which is after the call,
// and gets its result: a lease that etcd no longer keeps ends all of its
// grants (driver.ErrNotHeld), as it ended their entries. A keep-alive
// left unanswered is sent again well before the lease's deadline
// (renewLease).
func (d *etcdDriver) RenewBatch(ctx context.Context, grants []driver.Grant) []error {
	var errs []error // made at the first failure: nil means all renewed
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(grants))
		}
		errs[i] = err
	}
	// The leases in order of first appearance, with their results: few
	// (one per TTL, or two while a lapsed lease's grants end), so a
	// slice, not a map.
	type renewal struct {
		l   *etcdLease
		err error
	}
	var done []renewal
	start := time.Now()
	for i, dg := range grants {
		g, ok := dg.(*grant)
		if !ok || g.d != d {
			fail(i, fmt.Errorf("etcddlock: RenewBatch: grant %T not from this driver", dg))
			continue
		}
		g.startWatch()
		j := 0
		for j < len(done) && done[j].l != g.l {
			j++
		}
		if j == len(done) {
			done = append(done, renewal{l: g.l, err: d.renewLease(ctx, g.l)})
		}
		if err := done[j].err; err != nil {
			fail(i, err)
		} else if err := d.renewedDelay(ctx, g.dl, start); err != nil {
			// Its delay record would not outlast the validity by the
			// delay (lockdelay.go).
			fail(i, err)
		}
	}
	return errs
}
