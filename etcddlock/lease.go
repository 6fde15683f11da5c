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

// etcdLease is one etcd lease, shared by every entry of one Client and TTL
// (docs/etcd.md, One lease per Client and TTL), as a concurrency.Session
// shares its lease: held locks and places in queues cost etcd an entry
// each and no lease of their own, and one keep-alive per third of the TTL
// renews them all (RenewBatch). The lease lapsing ends all of them; an
// entry deleted ends its own lock alone.
//
// Each call attaches its entry under a name the lease lends it (a slot)
// until the entry is certainly gone. A call whose create request had an
// unknown outcome (a lost reply, a cancellation mid-request) fences it off
// before it deletes its entry: it writes the lease's guard, whose mod
// revision every create compares (fence), so a late copy of the request
// fails its comparison and creates nothing.
type etcdLease struct {
	id      clientv3.LeaseID
	seconds int64         // the TTL asked for: the driver's key for it
	ttl     time.Duration // the TTL etcd granted: at least seconds, at least etcd's minimum
	guard   string        // the guard's key (fence)
	// readGuard reads the guard, in the Else of every create (commit). It
	// and guardCmp are shared by the lease's requests, never changed:
	// gRPC only reads a message it sends.
	readGuard *pb.RequestOp

	mu        sync.Mutex
	validFrom time.Time   // when the latest successful grant or keep-alive request was sent; guarded by mu
	guardRev  int64       // the guard's mod revision last seen (0: it does not exist); guarded by mu
	guardCmp  *pb.Compare // "the guard's mod revision is guardRev"; guarded by mu
	free      []*slot     // names no call uses; guarded by mu
	slots     uint32      // names lent so far; guarded by mu
	lent      int         // names lent now; guarded by mu
	// dead says why the lease serves no new call: etcd dropped it, or the
	// driver gave it up. Guarded by mu.
	dead error
	// delays are the leases of the delay records of this lease's entries,
	// by lock-delay, kept alive after it (lockdelay.go). Guarded by mu.
	delays map[time.Duration]*etcdLease
}

// slot is a name of the lease's entries, lent to one call at a time.
type slot struct {
	n uint32
	// marker is the release marker the slot's last release may have
	// written; the slot's next entry-creating write deletes it. At most
	// one per slot, and the slots of a lease are as many as the calls it
	// served at once: markers do not pile up.
	marker []byte
}

// dropMarker returns the operation that deletes the release marker of the
// slot's last release, if any, for the write that creates its next entry:
// markers that no waiter cleared (a waiter that gave up or died after the
// release) thus never outlive the slot's next use, nor the lease.
func (s *slot) dropMarker() []*pb.RequestOp {
	if s.marker == nil {
		return nil
	}
	return []*pb.RequestOp{opDelete(s.marker)}
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

// takeSlot lends a name for one call's entry.
func (l *etcdLease) takeSlot() *slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lent++
	if n := len(l.free); n > 0 {
		s := l.free[n-1]
		l.free = l.free[:n-1]
		return s
	}
	l.slots++
	return &slot{n: l.slots}
}

// putSlot takes back a name whose entry is certainly gone and cannot come
// back: released, deleted, or never created, by requests all of known
// outcome or fenced off.
func (l *etcdLease) putSlot(s *slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lent--
	l.free = append(l.free, s)
}

// unused reports whether no entry may be attached to the lease: no name is
// lent. (A name whose entry could not be removed is never taken back: its
// lease was given up.)
func (l *etcdLease) unused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lent == 0
}

// guardUnchanged returns the comparison that the guard's mod revision is
// the one last seen.
func (l *etcdLease) guardUnchanged() *pb.Compare {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.guardCmp
}

// sawGuard records a mod revision of the guard that a request found.
func (l *etcdLease) sawGuard(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev > l.guardRev {
		l.guardRev, l.guardCmp = rev, cmpMod(l.guard, pb.Compare_EQUAL, rev)
	}
}

// kill marks the lease as serving no new call, for reason, unless it
// already is.
func (l *etcdLease) kill(reason error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead == nil {
		l.dead = reason
	}
}

// deadErr returns why the lease serves no new call, or nil.
func (l *etcdLease) deadErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// keepAlive renews the lease: etcd keeps it for its TTL from when the
// request arrives, which is after it was sent. It returns an error wrapping
// driver.ErrNotHeld when the lease is gone or given up.
func (l *etcdLease) keepAlive(ctx context.Context, lc clientv3.Lease) error {
	if err := l.deadErr(); err != nil {
		return err
	}
	start := time.Now()
	// LeaseKeepAlive, once: served by the leader without a Raft round.
	resp, err := lc.KeepAliveOnce(ctx, l.id)
	if err != nil {
		if isLeaseNotFound(err) {
			err = fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(l.id))
			l.kill(err)
		}
		return err
	}
	_ = resp // its TTL is the one granted: etcd never changes a lease's TTL
	l.renewedAt(start)
	return nil
}

// renewedAt records a successful keep-alive sent at start.
func (l *etcdLease) renewedAt(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if start.After(l.validFrom) {
		l.validFrom = start
	}
}

// keepAliveShared renews the lease for a waiter, unless another renewal
// sent less than a sixth of the TTL ago succeeded: the waiters of one
// lease then send about one keep-alive per third of the TTL between them,
// not one each. etcd keeps the lease at least five sixths of the TTL from
// now, longer than the third after which the waiter renews again.
func (l *etcdLease) keepAliveShared(ctx context.Context, d *etcdDriver) error {
	if err := l.deadErr(); err != nil {
		return err
	}
	if time.Since(l.since()) < l.ttl/6 {
		return nil
	}
	return d.renewLease(ctx, l)
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
	guard := d.guardKey(resp.ID)
	return &etcdLease{
		id: resp.ID, seconds: secs, ttl: time.Duration(resp.TTL) * time.Second, validFrom: start,
		guard: guard, readGuard: opGet(guard), guardCmp: cmpMod(guard, pb.Compare_EQUAL, 0),
	}, nil
}

// takeLease returns the Client's lease of a TTL and a name on it for one
// call: the lease in use if etcd certainly still keeps it for a while, or a
// new one.
func (d *etcdDriver) takeLease(ctx context.Context, secs int64) (*etcdLease, *slot, error) {
	d.mu.Lock()
	l := d.leases[secs]
	d.mu.Unlock()
	if l != nil && l.deadErr() == nil && time.Since(l.since()) < l.ttl/2 {
		// Fresh: its holders' renewals (RenewBatch) or its waiters' keep
		// it so, and it lives at least half its TTL from now.
		return l, l.takeSlot(), nil
	}
	// One call at a time renews or replaces a lease: a burst of calls
	// grants one lease, not one each.
	select {
	case d.leaseTurn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-d.leaseTurn }()
	for {
		d.mu.Lock()
		l := d.leases[secs]
		d.mu.Unlock()
		if l == nil || l.deadErr() != nil {
			l, err := d.grantLease(ctx, secs)
			if err != nil {
				return nil, nil, err
			}
			// Close, which revokes the leases, waits for this call first.
			d.mu.Lock()
			d.leases[secs] = l
			d.mu.Unlock()
			return l, l.takeSlot(), nil
		}
		switch age := time.Since(l.since()); {
		case age < l.ttl/2:
			return l, l.takeSlot(), nil
		case time.Now().Before(l.safeUntil()):
			// Old but alive (nobody renewed it: no call used it for a
			// while): renew it before use rather than hand the caller a
			// lease about to lapse; retry a busy etcd while the lease
			// certainly lives.
			kctx, cancel := context.WithDeadline(ctx, l.safeUntil())
			err := retry(kctx, func(kctx context.Context) error { return d.renewLease(kctx, l) })
			cancel()
			if err == nil {
				return l, l.takeSlot(), nil
			}
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
		}
		// Expired by now, about to (etcd drops it by itself), gone or
		// refused: forget it, and grant another.
		d.retire(l, fmt.Errorf("%w: etcd lease %x lapsed unused", driver.ErrNotHeld, int64(l.id)))
	}
}

// retire takes l out of service for new calls, for reason: the calls and
// grants that use it keep it until they end.
func (d *etcdDriver) retire(l *etcdLease, reason error) {
	l.kill(reason)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leases[l.seconds] == l {
		delete(d.leases, l.seconds)
	}
}

// giveUp ends l and everything attached to it, for reason: a request of
// unknown outcome that may still attach an entry to it could not be fenced
// off (etcd did not answer). The lease is revoked if etcd answers in time,
// and is no longer renewed otherwise, so etcd drops it within its TTL; its
// grants end at their next renewal, their waiters queue again.
func (d *etcdDriver) giveUp(ctx context.Context, l *etcdLease, reason error) {
	d.retire(l, fmt.Errorf("%w: etcd lease %x given up: %w", driver.ErrNotHeld, int64(l.id), reason))
	d.revoke(ctx, l)
}

// fence makes every request of l's calls sent so far that could create an
// entry fail if etcd applies it from now on: it writes l's guard, whose mod
// revision each of them compares with the one its call last saw (join.go,
// absent). A call whose create request has an unknown outcome fences
// before it deletes its entry, so that no late copy of the request creates
// it again behind its back: an orphan on a lease that the Client keeps
// renewing. The other calls of l in flight fail their comparison at once
// (a known outcome, nothing created) and send again with the new revision.
// A lease that etcd no longer keeps needs no fence: nothing can be attached
// to it any more.
func (d *etcdDriver) fence(ctx context.Context, l *etcdLease) error {
	err := retry(ctx, func(ctx context.Context) error {
		// Put, the guard, on the lease: gone with it.
		resp, err := d.kv.Put(ctx, l.guard, "", clientv3.WithLease(l.id))
		if err == nil {
			l.sawGuard(resp.Header.Revision)
		}
		return err
	})
	if isLeaseNotFound(err) {
		d.retire(l, fmt.Errorf("%w: etcd lease %x expired or was revoked", driver.ErrNotHeld, int64(l.id)))
		return nil
	}
	return err
}

// revoke revokes l, which deletes every entry attached to it, in one Raft
// write. It waits at most revokeTimeout, even if ctx has ended. If etcd
// cannot be reached, the lease expires by itself within its TTL, provided
// nobody renews it: callers have retired it.
func (d *etcdDriver) revoke(ctx context.Context, l *etcdLease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.ttl, revokeTimeout))
	defer cancel()
	d.revokeWith(ctx, l)
}

// revokeWith revokes l, giving up when ctx ends.
func (d *etcdDriver) revokeWith(ctx context.Context, l *etcdLease) {
	_ = retry(ctx, func(ctx context.Context) error {
		// LeaseRevoke: deletes the lease and the keys attached to it.
		_, err := d.lc.Revoke(ctx, l.id)
		if isLeaseNotFound(err) {
			return nil
		}
		return err
	})
}

// deleteMarker deletes a release marker, giving up when ctx ends. Failing
// is harmless: the marker goes with the releaser's lease, or at the next
// use of its name.
func (d *etcdDriver) deleteMarker(ctx context.Context, marker string) {
	_ = retry(ctx, func(ctx context.Context) error {
		// DeleteRange, one key.
		_, err := d.kv.Delete(ctx, marker)
		return err
	})
}

// revokeTimeout bounds the clean-up after a failed or cancelled call.
const revokeTimeout = 5 * time.Second

// dropEntry removes the entry key of a failed or cancelled call, if it may
// exist, and takes its name s back for l: a fence first if a request that
// creates it had an unknown outcome (dirty), then one Txn that deletes the
// entry and the tail of dir if it names the entry (tail, its value). If
// etcd does not answer, it gives the lease up: an entry left behind would
// otherwise hold its place on a lease that the Client keeps renewing.
func (d *etcdDriver) dropEntry(ctx context.Context, l *etcdLease, s *slot, dir, key, tail string, mayExist, dirty bool) {
	if !mayExist {
		l.putSlot(s) // nothing attached
		return
	}
	if dirty {
		if err := d.fence(ctx, l); err != nil {
			d.giveUp(ctx, l, err)
			return
		}
	}
	err := retry(ctx, func(ctx context.Context) error {
		// Txn: delete our entry; if the tail names it (we were the
		// newest), delete the tail too, which must name an entry that
		// exists. A waiter behind us sees the delete without a marker,
		// and reads the queue.
		_, err := d.txn(ctx, nil, []*pb.RequestOp{opDelete(key),
			opTxn([]*pb.Compare{cmpValue(tailKey(dir), pb.Compare_EQUAL, tail)}, []*pb.RequestOp{opDelete(tailKey(dir))}, nil)}, nil)
		return err
	})
	if err != nil {
		d.giveUp(ctx, l, err)
		return
	}
	l.putSlot(s)
}
