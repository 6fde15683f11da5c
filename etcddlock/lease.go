package etcddlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockdev/dlock/driver"
	leng "github.com/dlockdev/dlock/internal/lease"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxIdleLeases is how many unused leases the driver keeps per TTL for the
// next Lock or TryLock. One is enough for a loop that locks and unlocks; a
// few more serve bursts of concurrent calls without a grant each.
const maxIdleLeases = 8

// etcdLease is one etcd lease. Every Lock or TryLock call attaches its entry
// to a lease of its own, so that a lease expiring (a crashed or cut-off
// process) or revoked (a cancelled call) frees exactly that entry. A lease
// whose entry was deleted cleanly is kept for the next call with the same
// TTL: then taking a free key costs one request, not a grant and a request.
type etcdLease struct {
	id      clientv3.LeaseID
	seconds int64         // the TTL asked for: the idle pool's key
	ttl     time.Duration // the TTL etcd granted: at least seconds, at least etcd's minimum

	mu        sync.Mutex
	validFrom time.Time // when the latest successful grant or keep-alive request was sent

	// marker is the release marker the lease's last release may have
	// written, attached to the lease; the lease's next entry-creating
	// write deletes it. Used by one call at a time, like the lease.
	marker string
}

// dropMarker returns the operation that deletes the release marker of the
// lease's last release, if any, for the write that creates its next entry:
// markers that no waiter cleared (a waiter that gave up or died after the
// release) thus never outlive the lease's next use, nor the lease.
func (l *etcdLease) dropMarker() []*pb.RequestOp {
	if l.marker == "" {
		return nil
	}
	return []*pb.RequestOp{opDelete(l.marker)}
}

// seconds converts a TTL to the whole seconds etcd leases count in,
// rounding up so that the server never keeps a lease for less than asked.
func seconds(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Second-1)/time.Second))
}

// since returns the validFrom of the lease.
func (l *etcdLease) since() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validFrom
}

// safeUntil is the local time until which etcd certainly keeps the lease,
// with the lease engine's margin for clock drift.
func (l *etcdLease) safeUntil() time.Time {
	safe := l.ttl - time.Duration(float64(l.ttl)*leng.DriftFactor) - leng.DriftMargin
	return l.since().Add(safe)
}

// keepAlive renews the lease: etcd keeps it for its TTL from when the
// request arrives, which is after it was sent. It returns an error wrapping
// driver.ErrNotHeld when the lease is gone.
func (l *etcdLease) keepAlive(ctx context.Context, lc clientv3.Lease) error {
	start := time.Now()
	// LeaseKeepAlive, once: served by the leader without a Raft round.
	resp, err := lc.KeepAliveOnce(ctx, l.id)
	if err != nil {
		if isLeaseNotFound(err) {
			return fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(l.id))
		}
		return err
	}
	_ = resp // its TTL is the one granted: etcd never changes a lease's TTL
	l.mu.Lock()
	defer l.mu.Unlock()
	if start.After(l.validFrom) {
		l.validFrom = start
	}
	return nil
}

// grantLease asks etcd for a new lease.
func (d *etcdDriver) grantLease(ctx context.Context, secs int64) (*etcdLease, error) {
	start := time.Now()
	var resp *clientv3.LeaseGrantResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		// LeaseGrant: a Raft write. etcd raises a TTL below its minimum
		// (1.5 election timeouts, rounded up: 2 s by default) and
		// reports the TTL it granted, counted from when it applies the
		// grant.
		resp, err = d.lc.Grant(ctx, secs)
		return err
	})
	if err != nil {
		return nil, d.wrapErr("grant a lease", err)
	}
	return &etcdLease{id: resp.ID, seconds: secs, ttl: time.Duration(resp.TTL) * time.Second, validFrom: start}, nil
}

// takeLease returns a lease for one Lock or TryLock call: an idle one that
// etcd certainly still keeps for a while, or a new one.
func (d *etcdDriver) takeLease(ctx context.Context, secs int64) (*etcdLease, error) {
	for {
		l := d.popIdle(secs)
		if l == nil {
			return d.grantLease(ctx, secs)
		}
		age := time.Since(l.since())
		switch {
		case age < l.ttl/2:
			// Fresh: the lease engine renews it on time (at a third of
			// the TTL), as a lease.Waiter does while the call waits.
			return l, nil
		case time.Now().Before(l.safeUntil()):
			// Old but alive: renew it before use rather than hand the
			// caller a lease about to lapse; retry a busy etcd while the
			// lease certainly lives.
			kctx, cancel := context.WithDeadline(ctx, l.safeUntil())
			err := retry(kctx, func(kctx context.Context) error { return l.keepAlive(kctx, d.lc) })
			cancel()
			if err == nil {
				return l, nil
			}
			if ctx.Err() != nil {
				d.putIdle(l)
				return nil, ctx.Err()
			}
			// Gone, or refused: forget it.
		}
		// Expired by now, or about to (etcd drops it by itself): forget it.
	}
}

// popIdle takes the most recently used idle lease of a TTL, the freshest.
func (d *etcdDriver) popIdle(secs int64) *etcdLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	idle := d.idle[secs]
	if len(idle) == 0 {
		return nil
	}
	l := idle[len(idle)-1]
	d.idle[secs] = idle[:len(idle)-1]
	return l
}

// putIdle keeps a lease with no entry attached for later calls, and reports
// false when the caller should revoke it instead.
func (d *etcdDriver) putIdle(l *etcdLease) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.idle[l.seconds]) >= maxIdleLeases || !time.Now().Before(l.safeUntil()) {
		return false
	}
	d.idle[l.seconds] = append(d.idle[l.seconds], l)
	return true
}

// recycle keeps l for later calls if it can, and revokes it otherwise.
// Only a lease with certainly no entry attached may be recycled.
func (d *etcdDriver) recycle(ctx context.Context, l *etcdLease) {
	if !d.putIdle(l) {
		d.revoke(ctx, l)
	}
}

// revoke revokes l, which deletes every entry attached to it, in one Raft
// write. It waits at most revokeTimeout, even if ctx has ended: a cancelled
// call must not leave its entry queued. If etcd cannot be reached, the lease
// expires by itself within its TTL, since nobody renews it any more.
func (d *etcdDriver) revoke(ctx context.Context, l *etcdLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.ttl, revokeTimeout))
	defer cancel()
	d.revokeWith(ctx, l)
}

// revokeWith revokes l, giving up when ctx ends.
func (d *etcdDriver) revokeWith(ctx context.Context, l *etcdLease) {
	_ = retry(ctx, func(ctx context.Context) error {
		// LeaseRevoke: deletes the lease and the entry attached to it.
		_, err := d.lc.Revoke(ctx, l.id)
		if isLeaseNotFound(err) {
			return nil
		}
		return err
	})
}

// deleteMarker deletes a release marker, giving up when ctx ends. Failing
// is harmless: the marker goes with the releaser's lease, or at that
// lease's next use.
func (d *etcdDriver) deleteMarker(ctx context.Context, marker string) {
	_ = retry(ctx, func(ctx context.Context) error {
		// DeleteRange, one key.
		_, err := d.kv.Delete(ctx, marker)
		return err
	})
}

// revokeTimeout bounds a revocation after a failed or cancelled call.
const revokeTimeout = 5 * time.Second
