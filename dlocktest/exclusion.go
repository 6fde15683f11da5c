package dlocktest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/dlockdev/dlock"
)

func testTryLock_heldByOther(s *suite) {
	a, b := s.client(), s.client()
	key := s.key()
	la := s.tryLock(a, key, s.ttl())
	if _, err := b.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("TryLock on a held key: err = %v, want ErrLocked", err)
	}
	// The same client is a different owner too: locks are not reentrant.
	if _, err := a.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
		s.t.Fatalf("second TryLock by the holder's client: err = %v, want ErrLocked", err)
	}
	s.unlock(la)
	lb := s.tryLock(b, key, s.ttl())
	if lb.Token() <= la.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", la.Token(), lb.Token())
	}
	s.unlock(lb)
	s.checkNothingLeft(key)
}

func testLock_waitsForRelease(s *suite) {
	a, b := s.client(), s.client()
	key := s.key()
	la := s.lock(a, key, s.ttl())
	got := make(chan *dlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := b.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "b"}))
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	s.waitQueuedIfInspectable(a, key, "b")
	select {
	case <-got:
		s.t.Fatal("Lock returned while another client held the key")
	default:
	}
	s.unlock(la)
	select {
	case lb := <-got:
		if lb.Token() <= la.Token() {
			s.t.Fatalf("token went from %d to %d, want strictly increasing", la.Token(), lb.Token())
		}
		s.unlock(lb)
	case err := <-errc:
		s.t.Fatalf("waiting Lock: %v", err)
	case <-s.ctx.Done():
		s.t.Fatal("waiter not granted the key after release (watchdog)")
	}
	s.checkNothingLeft(key)
}

func testMutualExclusion_manyClients(s *suite) {
	key := s.key()
	const clients, rounds = 8, 15
	var res fencedResource
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := s.client()
		wg.Go(func() {
			who := fmt.Sprintf("client%d", i)
			for range rounds {
				l, err := c.Lock(s.ctx, key, s.ttl())
				if err != nil {
					errs <- fmt.Errorf("%s: Lock: %w", who, err)
					return
				}
				res.enter(who, l.Token())
				runtime.Gosched() // give an overlapping holder a chance to show up
				res.exit()
				if err := l.Unlock(s.ctx); err != nil {
					errs <- fmt.Errorf("%s: Unlock: %w", who, err)
					return
				}
			}
		})
	}
	writes := s.finishContenders(&wg, errs, res.report)
	if writes != clients*rounds {
		s.t.Errorf("resource saw %d critical sections, want %d", writes, clients*rounds)
	}
	s.checkNothingLeft(key)
}

func testMutualExclusion_tryLockRace(s *suite) {
	// Many clients race TryLock on a free key: exactly one wins each round.
	const clients, rounds = 8, 10
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		cs[i] = s.client()
	}
	for r := range rounds {
		key := s.key()
		leases := make(chan *dlock.Lease, clients)
		errs := make(chan error, clients)
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() {
				l, err := c.TryLock(s.ctx, key, s.ttl())
				switch {
				case err == nil:
					leases <- l
				case !errors.Is(err, dlock.ErrLocked):
					errs <- err
				}
			})
		}
		wg.Wait()
		close(leases)
		close(errs)
		for err := range errs {
			s.t.Fatalf("round %d: TryLock: %v", r, err)
		}
		if n := len(leases); n != 1 {
			s.t.Fatalf("round %d: %d clients won TryLock on one key, want 1", r, n)
		}
		s.unlock(<-leases)
	}
}
