package dlocktest

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock"
)

func testLease_renewsItself(s *suite) {
	a, b := s.client(), s.client()
	key := s.key()
	la := s.lock(a, key, s.ttl())
	// Hold for three TTLs: without renewal the server would have freed the
	// key twice over. The timer is the scenario, not a synchronisation.
	end := time.After(3 * s.h.TTL())
	probe := time.NewTicker(s.h.TTL() / 4)
	defer probe.Stop()
	for held := true; held; {
		select {
		case <-end:
			held = false
		case <-probe.C:
			if _, err := b.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
				s.t.Fatalf("TryLock while the holder renews: err = %v, want ErrLocked", err)
			}
		case <-la.Done():
			s.t.Fatalf("lease lost while renewing on a healthy server: %v", la.Err())
		}
	}
	if err := la.Err(); err != nil {
		s.t.Fatalf("Err of a held lease = %v, want nil", err)
	}
	s.unlock(la)
	if !errors.Is(la.Err(), dlock.ErrReleased) {
		s.t.Fatalf("Err after Unlock = %v, want ErrReleased", la.Err())
	}
	select {
	case <-la.Done():
	default:
		s.t.Fatal("Done not closed after Unlock")
	}
	if err := la.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("second Unlock: err = %v, want ErrNotHeld", err)
	}
}

func testLease_holderCutOff_lostBeforeNextGrant(s *suite) {
	a, link := s.faulty()
	b, c := s.client(), s.client()
	key := s.key()
	la := s.lock(a, key, s.ttl())
	link.Blackhole() // a is now as good as dead to the server: no renewals
	lb := s.lock(b, key, s.ttl())
	// The central safety property: by the time anybody else is granted the
	// key, the old holder's lease has ended locally.
	select {
	case <-la.Done():
	default:
		s.t.Fatalf("b was granted the key while a's lease was still valid locally (deadline %v, now %v)",
			la.Deadline().Format(time.StampMicro), time.Now().Format(time.StampMicro))
	}
	if !errors.Is(la.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("a.Err() = %v, want ErrLeaseLost", la.Err())
	}
	if lb.Token() <= la.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", la.Token(), lb.Token())
	}
	// a comes back and tries to unlock: it must not free b's lock.
	link.Restore()
	if err := la.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("stale holder's Unlock: err = %v, want ErrNotHeld", err)
	}
	if _, err := c.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("after the stale holder's Unlock, TryLock by a third client: err = %v, want ErrLocked (b must still hold)", err)
	}
	select {
	case <-lb.Done():
		s.t.Fatalf("b's lease ended after the stale holder's Unlock: %v", lb.Err())
	default:
	}
	s.unlock(lb)
}

func testLease_keyDeleted_lost(s *suite) {
	kd, ok := s.h.(KeyDeleter)
	if !ok {
		s.t.Skip("backend harness cannot delete keys (no KeyDeleter)")
	}
	a, b := s.client(), s.client()
	key := s.key()
	la := s.lock(a, key, s.ttl())
	if err := kd.DeleteKey(s.ctx, key); err != nil {
		s.t.Fatalf("DeleteKey: %v", err)
	}
	s.waitDone(la, "its key was deleted on the server")
	if !errors.Is(la.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("Err = %v, want ErrLeaseLost", la.Err())
	}
	lb := s.tryLock(b, key, s.ttl())
	if lb.Token() <= la.Token() {
		s.t.Fatalf("token went from %d to %d after the key was deleted, want strictly increasing", la.Token(), lb.Token())
	}
	if err := la.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("Unlock of a lost lease: err = %v, want ErrNotHeld", err)
	}
	if _, err := a.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("after the lost lease's Unlock: err = %v, want ErrLocked (b must still hold)", err)
	}
	s.unlock(lb)
}

// testLease_manyHeld_renewedTogether_lostAlone: a client holding many
// leases keeps them all, through several renewals (which a backend with
// driver.BatchRenewer sends as one request per interval), and a lease
// whose key is deleted under it is lost alone: the others' renewals go on.
func testLease_manyHeld_renewedTogether_lostAlone(s *suite) {
	const n = 30
	a, b := s.client(), s.client()
	keys := make([]string, n)
	leases := make([]*dlock.Lease, n)
	for i := range keys {
		keys[i] = s.key()
		leases[i] = s.lock(a, keys[i], s.ttl())
	}
	renewedPast := func(what string, deadlines []time.Time) {
		s.t.Helper()
		s.eventually(what, func() bool {
			for i, l := range leases {
				if l.Err() == nil && !l.Deadline().After(deadlines[i]) {
					return false
				}
			}
			return true
		})
	}
	deadlines := func() []time.Time {
		d := make([]time.Time, n)
		for i, l := range leases {
			d[i] = l.Deadline()
		}
		return d
	}
	renewedPast("every lease renewed", deadlines())
	lost := -1
	if kd, ok := s.h.(KeyDeleter); ok {
		lost = n / 2
		if err := kd.DeleteKey(s.ctx, keys[lost]); err != nil {
			s.t.Fatalf("DeleteKey: %v", err)
		}
		s.waitDone(leases[lost], "its key was deleted on the server")
		if err := leases[lost].Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			s.t.Fatalf("Err of the lease whose key was deleted = %v, want ErrLeaseLost", err)
		}
	}
	// Twice: the loss may have come with a renewal in flight for the others.
	renewedPast("every other lease renewed after the loss", deadlines())
	renewedPast("every other lease renewed again", deadlines())
	for i, l := range leases {
		if i == lost {
			continue
		}
		if err := l.Err(); err != nil {
			s.t.Fatalf("lease %d of %d lost with another's: %v", i, n, err)
		}
		if _, err := b.TryLock(s.ctx, keys[i], s.ttl()); !errors.Is(err, dlock.ErrLocked) {
			s.t.Fatalf("TryLock of a held key by another client: err = %v, want ErrLocked", err)
		}
		s.unlock(l)
	}
}

func testDo_cancelsContextOnLoss(s *suite) {
	kd, ok := s.h.(KeyDeleter)
	if !ok {
		s.t.Skip("backend harness cannot delete keys (no KeyDeleter)")
	}
	a := s.client()
	key := s.key()
	started := make(chan uint64, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- a.Do(s.ctx, key, func(ctx context.Context) error {
			l, ok := dlock.LeaseFromContext(ctx)
			if !ok {
				return errors.New("no lease in Do's context")
			}
			started <- l.Token()
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), dlock.ErrLeaseLost) {
				return errors.New("fn's context ended with cause " + context.Cause(ctx).Error())
			}
			return nil
		}, s.ttl())
	}()
	select {
	case <-started:
	case err := <-errc:
		s.t.Fatalf("Do returned before running fn: %v", err)
	case <-s.ctx.Done():
		s.t.Fatal("Do did not start fn (watchdog)")
	}
	if err := kd.DeleteKey(s.ctx, key); err != nil {
		s.t.Fatalf("DeleteKey: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrLeaseLost) {
			s.t.Fatalf("Do after losing the lease: err = %v, want ErrLeaseLost", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("fn's context not cancelled after the lease was lost (watchdog)")
	}
}

func testDo_runsAndUnlocks(s *suite) {
	a, b := s.client(), s.client()
	key := s.key()
	ran := false
	err := a.Do(s.ctx, key, func(ctx context.Context) error {
		ran = true
		if _, err := b.TryLock(ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
			return errors.New("key not held while fn runs")
		}
		return errors.New("fn's own error")
	}, s.ttl())
	if !ran || err == nil || err.Error() != "fn's own error" {
		s.t.Fatalf("Do: ran=%v err=%v, want fn's own error returned as is", ran, err)
	}
	s.unlock(s.tryLock(b, key, s.ttl())) // Do unlocked
}

func testToken_increasesAcrossGrants(s *suite) {
	key := s.key()
	cs := []*dlock.Client{s.client(), s.client(), s.client()}
	var last uint64
	for i := range 30 {
		l := s.lock(cs[i%len(cs)], key, s.ttl())
		if l.Token() <= last {
			s.t.Fatalf("grant %d: token %d not above %d", i, l.Token(), last)
		}
		last = l.Token()
		s.unlock(l)
	}
}

func testToken_increasesAcrossServerRestart(s *suite) {
	r, ok := s.h.(ServerRestarter)
	if !ok {
		s.t.Skip("backend harness cannot restart the server (no ServerRestarter)")
	}
	a := s.client()
	key := s.key()
	l1 := s.lock(a, key, s.ttl())
	s.unlock(l1)
	if err := r.RestartServer(s.ctx, s.t); err != nil {
		s.t.Fatalf("RestartServer: %v", err)
	}
	// The client reconnects by itself; the first attempts may fail while it does.
	var l2 *dlock.Lease
	s.eventually("lock after restart", func() bool {
		var err error
		l2, err = a.TryLock(s.ctx, key, s.ttl())
		return err == nil
	})
	if l2.Token() <= l1.Token() {
		s.t.Fatalf("token after a server restart %d, before %d: want strictly increasing", l2.Token(), l1.Token())
	}
	s.unlock(l2)
}
