package dlocktest

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
)

// Scheduled jobs: Do with NoWait skips instead of queueing, and HoldAtLeast
// keeps the key held after the job, in the background, until the minimum
// hold has passed; Close leaves such a lease to the server's TTL.

// Do_noWait_skipsWhileHeld: a Do with NoWait on a held key returns ErrLocked
// at once without running its job and leaves no waiter behind. Before
// NoWait, Do queued behind the holder (here: until the watchdog).
func testDo_noWait_skipsWhileHeld(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	l := s.lock(c1, key)
	ran := false
	err := c2.Do(s.ctx, key, func(context.Context) error { ran = true; return nil }, dlock.NoWait())
	if !errors.Is(err, dlock.ErrLocked) || ran {
		s.t.Fatalf("Do(NoWait) on a held key = %v (job ran: %v), want ErrLocked without running the job", err, ran)
	}
	if info, err := c1.Inspect(s.ctx, key); err == nil && len(info.Waiters) != 0 {
		s.t.Fatalf("Do(NoWait) left waiters %+v", info.Waiters)
	}
	s.unlock(l)
	// Free: it runs.
	if err := c2.Do(s.ctx, key, func(context.Context) error { ran = true; return nil }, dlock.NoWait()); err != nil || !ran {
		s.t.Fatalf("Do(NoWait) on a free key = %v (job ran: %v), want nil after running the job", err, ran)
	}
	s.checkNothingLeft(key)
}

// Do_holdAtLeast_keepsKeyAfterJob: Do returns when the job does, the key
// stays held (the lease is renewed, not lost) through the minimum hold, and
// another instance's Do(NoWait) skips; Close then stops renewing without
// releasing, and the server frees the key within the TTL.
func testDo_holdAtLeast_keepsKeyAfterJob(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	lease, err := doKeepingLease(s.ctx, c1, key, dlock.NoWait(), dlock.HoldAtLeast(time.Hour))
	if err != nil {
		s.t.Fatalf("Do(HoldAtLeast) = %v", err)
	}
	if err := lease.Err(); err != nil {
		s.t.Fatalf("lease ended when Do returned, inside its minimum hold: %v", err)
	}
	ran := false
	err = c2.Do(s.ctx, key, func(context.Context) error { ran = true; return nil }, dlock.NoWait())
	if !errors.Is(err, dlock.ErrLocked) || ran {
		s.t.Fatalf("second Do inside the first's minimum hold = %v (job ran: %v), want ErrLocked", err, ran)
	}
	// A renewal or two later it is still held (a lease not renewed in
	// the background would be lost after its TTL).
	renewed := lease.Deadline()
	s.eventually("lease renewed during the minimum hold", func() bool { return lease.Deadline().After(renewed) })
	if err := lease.Err(); err != nil {
		s.t.Fatalf("lease lost during its minimum hold: %v", err)
	}

	// Close stops renewing without releasing (ErrClosed), and the server
	// frees the key within the TTL. That Close does not release it at once
	// is not checked here: on ZooKeeper, closing the connection ends the
	// session, and the server deletes its nodes with it (see HoldAtLeast);
	// cmd/dlock's testdata/sched.txtar checks it on Redis and etcd.
	if err := c1.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrClosed) {
		s.t.Fatalf("lease Err after Close = %v, want ErrClosed", err)
	}
	l := s.lock(c2, key) // waits for the server's TTL
	s.unlock(l)
	s.checkNothingLeft(key)
}

// OwnedClient_closeInMinimumHold: Close of a Client built by the backend's
// New on a server client its owner keeps ends a lease in its minimum hold
// with ErrClosed and leaves the owner's client working; the key is then
// free before Close returns or once the server expires the lease's TTL, as
// the harness says (OwnedClientMaker.CloseReleases). A backend that left
// the key to the owner's session would hold it for as long as that lives.
func testOwnedClient_closeInMinimumHold(s *suite) {
	o, ok := s.h.(OwnedClientMaker)
	if !ok {
		s.t.Skip("backend harness cannot build a Client on a server client it owns (no OwnedClientMaker)")
	}
	c1, alive, err := o.NewOwnedClient(s.ctx, s.t)
	if err != nil {
		s.t.Fatalf("NewOwnedClient: %v", err)
	}
	c2 := s.client()
	key := s.key()
	lease, err := doKeepingLease(s.ctx, c1, key, dlock.NoWait(), dlock.HoldAtLeast(time.Hour), s.ttl())
	if err != nil {
		s.t.Fatalf("Do(HoldAtLeast) = %v", err)
	}
	if _, err := c2.TryLock(s.ctx, key); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("TryLock in the first lease's minimum hold = %v, want ErrLocked", err)
	}

	if err := c1.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrClosed) {
		s.t.Fatalf("lease Err after Close = %v, want ErrClosed", err)
	}
	if err := alive(s.ctx); err != nil {
		s.t.Fatalf("the owner's server client after Close: %v, want it working (Close must leave it open)", err)
	}
	var l2 *dlock.Lease
	if o.CloseReleases() {
		// Close has returned: nothing is left for the owner's session.
		if lc, ok := s.h.(LeftoverChecker); ok {
			left, err := lc.Leftovers(s.ctx, key)
			if err != nil {
				s.t.Fatalf("Leftovers(%q): %v", key, err)
			}
			if len(left) > 0 {
				s.t.Fatalf("after Close, the server still stores %q for key %q while the owner's client lives", left, key)
			}
		}
		if l2, err = c2.TryLock(s.ctx, key); err != nil {
			s.t.Fatalf("TryLock after the first Client's Close = %v, want the key", err)
		}
	} else {
		if _, err := c2.TryLock(s.ctx, key); !errors.Is(err, dlock.ErrLocked) {
			s.t.Fatalf("TryLock just after Close = %v, want ErrLocked (Close leaves a lease in its minimum hold to expire)", err)
		}
		if l2, err = c2.Lock(s.ctx, key); err != nil { // once the server has expired the lease
			s.t.Fatalf("Lock after the abandoned lease's TTL: %v", err)
		}
	}
	s.unlock(l2)
	s.checkNothingLeft(key)
}

// Do_holdAtLeast_releasesAfterHold: once the minimum hold has passed the
// Client releases the key by itself (ErrReleased, not a loss), and a waiter
// gets it.
func testDo_holdAtLeast_releasesAfterHold(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	lease, err := doKeepingLease(s.ctx, c1, key, dlock.HoldAtLeast(200*time.Millisecond))
	if err != nil {
		s.t.Fatalf("Do(HoldAtLeast) = %v", err)
	}
	l := s.lock(c2, key) // waits for the release after the hold
	s.waitDone(lease, "the minimum hold")
	if err := lease.Err(); !errors.Is(err, dlock.ErrReleased) {
		s.t.Fatalf("lease Err after its minimum hold = %v, want ErrReleased", err)
	}
	s.unlock(l)
	s.checkNothingLeft(key)
}

// Lock_holdAtLeast_unlockDefers: Unlock inside the minimum hold returns nil
// at once and leaves the key held; a second Unlock says not held.
func testLock_holdAtLeast_unlockDefers(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	l := s.lock(c1, key, dlock.HoldAtLeast(time.Hour))
	s.unlock(l)
	if err := l.Err(); err != nil {
		s.t.Fatalf("lease ended by an Unlock inside its minimum hold: %v", err)
	}
	if err := l.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if _, err := c2.TryLock(s.ctx, key, dlock.NoWait()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("TryLock inside the minimum hold = %v, want ErrLocked", err)
	}
	// Lock with NoWait is TryLock.
	if _, err := c2.Lock(s.ctx, key, dlock.NoWait()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("Lock(NoWait) inside the minimum hold = %v, want ErrLocked", err)
	}
}

// doKeepingLease runs Do of key with opts and a job that does nothing but
// keep its lease, and returns that lease with Do's error: the minimum-hold
// tests follow the lease after Do has returned.
func doKeepingLease(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) (*dlock.Lease, error) {
	var lease *dlock.Lease
	err := c.Do(ctx, key, func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		return nil
	}, opts...)
	return lease, err
}

// A maximum hold (HoldAtMost) releases the key of a job that hangs in a
// live process, whose lease would otherwise be renewed for ever.

// Do_holdAtMost_releasesHungJob: at the limit the key is released while the
// job still runs: another client takes it (before HoldAtMost, it waited
// here for the job, which waited for it, until the watchdog); the job's
// context is cancelled with a cause that names the limit, and Do and
// Lease.Err report ErrHoldLimit.
func testDo_holdAtMost_releasesHungJob(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	const limit = 300 * time.Millisecond
	var lease, next *dlock.Lease
	var cause error
	err := c1.Do(s.ctx, key, func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
			s.t.Fatal("the job's context was not cancelled at its maximum hold (watchdog)")
		}
		cause = context.Cause(ctx)
		// The job hangs on; the key must be free for others already.
		l, err := c2.Lock(s.ctx, key)
		next = l
		return err
	}, dlock.HoldAtMost(limit))
	if !errors.Is(err, dlock.ErrHoldLimit) || !strings.Contains(err.Error(), limit.String()) {
		s.t.Fatalf("Do of a job that outlived HoldAtMost(%v) = %v, want ErrHoldLimit naming the limit", limit, err)
	}
	if !errors.Is(cause, dlock.ErrHoldLimit) {
		s.t.Fatalf("cause of the job's cancelled context = %v, want ErrHoldLimit", cause)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrHoldLimit) || errors.Is(err, dlock.ErrLeaseLost) {
		s.t.Fatalf("lease Err after its maximum hold = %v, want ErrHoldLimit (not a loss)", err)
	}
	if next.Token() <= lease.Token() {
		s.t.Fatalf("next holder's token %d is not above the first's %d", next.Token(), lease.Token())
	}
	s.unlock(next)
	s.checkNothingLeft(key)
}

// Lock_holdAtMost_unlockAfterLimit: a Lock's lease ends at its maximum
// hold, and the Unlock that comes later says so: not held, at the limit.
func testLock_holdAtMost_unlockAfterLimit(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	l := s.lock(c1, key, dlock.HoldAtMost(200*time.Millisecond))
	s.waitDone(l, "its maximum hold")
	if err := l.Err(); !errors.Is(err, dlock.ErrHoldLimit) || strings.Count(err.Error(), key) != 1 {
		s.t.Fatalf("lease Err = %v, want ErrHoldLimit naming the key once", err)
	}
	err := l.Unlock(s.ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrHoldLimit) || strings.Count(err.Error(), "maximum hold reached") != 1 {
		s.t.Fatalf("Unlock after the maximum hold = %v, want ErrNotHeld and ErrHoldLimit, said once", err)
	}
	s.unlock(s.tryLock(c2, key)) // Unlock returned once the release was done
	s.checkNothingLeft(key)
}

// Lock_holdAtLeastAndMost_unlockReleasesAtMinimum: with both holds equal,
// an early Unlock leaves the release to the minimum hold, and the lease
// ends released, never at its maximum (which would say the job hung).
func testLock_holdAtLeastAndMost_unlockReleasesAtMinimum(s *suite) {
	c1, c2 := s.client(), s.client()
	key := s.key()
	const d = 300 * time.Millisecond
	l := s.lock(c1, key, dlock.HoldAtLeast(d), dlock.HoldAtMost(d))
	s.unlock(l) // deferred to the end of the minimum hold
	l2 := s.lock(c2, key)
	s.waitDone(l, "its minimum hold")
	if err := l.Err(); !errors.Is(err, dlock.ErrReleased) {
		s.t.Fatalf("lease Err after an Unlock in its minimum hold = %v, want ErrReleased", err)
	}
	s.unlock(l2)
	s.checkNothingLeft(key)
}
