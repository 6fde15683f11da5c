package dlocktest

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock"
)

// Scenarios of WithLockDelay, run when the backend's driver implements
// driver.Revoker (which must honour lock-delays; skipped otherwise). The
// timing checks are lower bounds only (the next grant comes no earlier
// than the delay allows), safe on a loaded machine; none bounds how late
// a grant may come.

// delayOf returns the lock-delay of the scenarios: long enough, against
// the suite's TTL, for Inspect to catch it in force on a loaded machine.
func (s *suite) delayOf() time.Duration { return 5 * s.h.TTL() }

// withDelay returns acquire with the lock-delay d added to its options.
func withDelay(acquire acquirer, d time.Duration) acquirer {
	return acquirer(func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
		return acquire(ctx, append(opts, dlock.WithLockDelay(d))...)
	})
}

// expectDelayInForce waits until Inspect shows a delay in force on key
// and the holder named holder with lock-delay d, failing the test if
// waiter is granted first.
func (s *suite) expectDelayInForce(op *dlock.Client, key, holder string, d time.Duration, waiter *pending) {
	s.t.Helper()
	s.eventually("lock-delay of "+key+" in force", func() bool {
		select {
		case <-waiter.done:
			s.t.Fatalf("%s returned (err %v) before Inspect showed the lock-delay in force", waiter.name, waiter.err)
		default:
		}
		info := s.inspect(op, key)
		if info.DelayedUntil.IsZero() {
			return false
		}
		for _, h := range info.Holders {
			if h.Metadata.Note == holder && h.LockDelay == d {
				return true
			}
		}
		s.t.Fatalf("delay in force until %v, but holders %+v do not show %s with lock-delay %v", info.DelayedUntil, info.Holders, holder, d)
		return false
	})
}

// holderDelay fails the test unless Inspect shows holder with lock-delay d.
func (s *suite) holderDelay(op *dlock.Client, key, holder string, d time.Duration) {
	s.t.Helper()
	info := s.inspect(op, key)
	for _, h := range info.Holders {
		if h.Metadata.Note == holder {
			if h.LockDelay != d {
				s.t.Fatalf("Inspect shows %s with lock-delay %v, want %v", holder, h.LockDelay, d)
			}
			return
		}
	}
	s.t.Fatalf("Inspect shows no holder %s: %+v", holder, info.Holders)
}

// After a revoke, the waiter is granted no earlier than the delay after
// the revoke, and Inspect shows the delay in force meanwhile.
func testLockDelay_afterRevoke_nextGrantWaits(s *suite) {
	op := s.client()
	s.needRevoke(op)
	key, d := s.key(), s.delayOf()
	la := s.held("holder", withDelay(lockOf(s.client(), key), d))
	s.holderDelay(op, key, "holder", d)
	pw := s.arrive(op, key, "waiter", lockOf(s.client(), key))

	before := time.Now() // the revoke's end is not earlier, by any clock here
	s.revoke(op, key, nil, la)
	s.expectDelayInForce(op, key, "holder", d, pw)
	lw := s.granted(pw)
	if at := time.Now(); at.Before(before.Add(d)) {
		s.t.Fatalf("waiter granted %v after the revoke, before the lock-delay of %v", at.Sub(before), d)
	}
	s.tokenAbove("the waiter granted after the delay", lw, la)
	s.revokedLease("holder", la)
	s.unlock(lw)
}

// After an expiry (the holder cut off), the waiter is granted no earlier
// than the delay after the holder's local deadline, which is no later
// than the server's end of the grant.
func testLockDelay_afterExpiry_nextGrantWaits(s *suite) {
	op := s.client()
	s.needRevoke(op)
	a, link := s.faulty()
	key, d := s.key(), s.delayOf()
	la := s.held("holder", withDelay(lockOf(a, key), d))
	pw := s.arrive(op, key, "waiter", lockOf(s.client(), key))

	link.Blackhole()
	s.waitDone(la, "its client was cut off")
	deadline := la.Deadline()
	s.expectDelayInForce(op, key, "holder", d, pw)
	lw := s.granted(pw)
	if at := time.Now(); at.Before(deadline.Add(d)) {
		s.t.Fatalf("waiter granted %v after the holder's deadline, before the lock-delay of %v", at.Sub(deadline), d)
	}
	s.tokenAbove("the waiter granted after the delay", lw, la)
	link.Restore()
	if err := la.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("the expired holder's Unlock = %v, want ErrNotHeld", err)
	}
	s.stillHeld("waiter", lw)
	s.unlock(lw)
}

// A revoked permit with a lock-delay stays taken until the delay ends:
// the waiter behind the full semaphore waits, the other holder keeps its
// permit.
func testLockDelay_semaphorePermitStaysTaken(s *suite) {
	const limit = 2
	op := s.client()
	s.needRevoke(op)
	key, d := s.key(), s.delayOf()
	p1 := s.held("p1", withDelay(s.client().Semaphore(key, limit).TryAcquire, d))
	p2 := s.held("p2", s.client().Semaphore(key, limit).TryAcquire)
	pw := s.arrive(op, key, "w", s.client().Semaphore(key, limit).Acquire)

	s.revoke(op, key, []dlock.RevokeOption{dlock.RevokeToken(p1.Token())}, p1)
	s.expectDelayInForce(op, key, "p1", d, pw)
	s.expectQueue(op, key, "during p1's lock-delay", []string{"p1", "p2"}, []string{"w"})
	w := s.granted(pw)
	s.tokenAbove("w granted after the delay", w, p1, p2)
	s.stillHeld("p2", p2)
	s.revokedLease("p1", p1)
	s.unlock(p2)
	s.unlock(w)
}

// A clean Unlock starts no delay, however long: the waiter is granted as
// after any release, and Inspect shows no delay.
func testLockDelay_cleanUnlock_noDelay(s *suite) {
	op := s.client()
	s.needRevoke(op)
	key := s.key()
	la := s.held("holder", withDelay(lockOf(s.client(), key), dlock.MaxLockDelay))
	s.holderDelay(op, key, "holder", dlock.MaxLockDelay)
	pw := s.arrive(op, key, "waiter", lockOf(s.client(), key))
	s.unlock(la)
	info := s.expectQueue(op, key, "after a clean Unlock", []string{"waiter"}, []string{})
	if !info.DelayedUntil.IsZero() {
		s.t.Fatalf("a clean Unlock started a lock-delay until %v", info.DelayedUntil)
	}
	s.unlock(s.granted(pw))
}

// A lock-delay outside [0, MaxLockDelay] is refused with ErrInvalidOption
// by every call, and leaves nothing on the server.
func testLockDelay_outOfRange_invalidOption(s *suite) {
	c := s.client()
	s.needRevoke(c)
	key := s.key()
	for _, d := range []time.Duration{-time.Nanosecond, dlock.MaxLockDelay + time.Nanosecond} {
		opt := dlock.WithLockDelay(d)
		_, err := c.Lock(s.ctx, key, opt)
		s.expectErr("Lock with lock-delay "+d.String(), err, dlock.ErrInvalidOption)
		_, err = c.Semaphore(key, 2).Acquire(s.ctx, opt)
		s.expectErr("Semaphore.Acquire with lock-delay "+d.String(), err, dlock.ErrInvalidOption)
		_, err = c.RWMutex(key).RLock(s.ctx, opt)
		s.expectErr("RWMutex.RLock with lock-delay "+d.String(), err, dlock.ErrInvalidOption)
		_, err = c.Election(key).Campaign(s.ctx, "v", opt)
		s.expectErr("Election.Campaign with lock-delay "+d.String(), err, dlock.ErrInvalidOption)
	}
	info := s.inspect(c, key)
	if len(info.Holders)+len(info.Waiters) > 0 {
		s.t.Fatalf("refused calls left holders %+v, waiters %+v", info.Holders, info.Waiters)
	}
	s.checkNothingLeft(key)
}
