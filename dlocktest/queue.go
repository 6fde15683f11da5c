package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock"
)

func testLock_fifo(s *suite) {
	key := s.key()
	holder := s.client()
	lh := s.lock(holder, key, s.ttl())
	s.inspect(holder, key) // skips the test if the backend cannot inspect

	const waiters = 6
	order := make(chan string, waiters)
	errc := make(chan error, waiters)
	var want []string
	for i := range waiters {
		name := fmt.Sprintf("w%d", i)
		want = append(want, name)
		c := s.client()
		go func() {
			l, err := c.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: name}))
			if err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				return
			}
			order <- name
			errc <- l.Unlock(s.ctx)
		}()
		// Arrival order is what the server saw: wait until it has seen this one.
		s.waitQueued(holder, key, name)
	}
	info := s.inspect(holder, key)
	var queued []string
	for _, w := range info.Waiters {
		queued = append(queued, w.Metadata.Note)
	}
	if !slices.Equal(queued, want) {
		s.t.Fatalf("Inspect shows waiters %v, want %v", queued, want)
	}
	s.unlock(lh)
	var got []string
	for range waiters {
		select {
		case err := <-errc:
			if err != nil {
				s.t.Fatal(err)
			}
		case <-s.ctx.Done():
			s.t.Fatalf("waiters served so far %v, want %v (watchdog)", got, want)
		}
	}
	close(order)
	for n := range order {
		got = append(got, n)
	}
	if !slices.Equal(got, want) {
		s.t.Fatalf("waiters served in order %v, want arrival order %v", got, want)
	}
	s.checkNothingLeft(key)
}

func testLock_cancelWhileWaiting_leavesNothing(s *suite) {
	key := s.key()
	holder, waiter := s.client(), s.client()
	lh := s.lock(holder, key, s.ttl())
	ctx, cancel := context.WithCancel(s.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "quitter"}))
		errc <- err
	}()
	s.waitQueuedIfInspectable(holder, key, "quitter")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			s.t.Fatalf("cancelled Lock: err = %v, want context.Canceled", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("Lock did not return after its context was cancelled (watchdog)")
	}
	if info, err := holder.Inspect(s.ctx, key); err == nil && len(info.Waiters) != 0 {
		s.t.Fatalf("after cancel, waiters = %+v, want none", info.Waiters)
	}
	s.unlock(lh)
	s.checkNothingLeft(key)
}

func testLock_deadlineWhileHeld(s *suite) {
	key := s.key()
	holder, waiter := s.client(), s.client()
	lh := s.lock(holder, key, s.ttl())
	ctx, cancel := context.WithTimeout(s.ctx, s.h.TTL()/2)
	defer cancel()
	if _, err := waiter.Lock(ctx, key, s.ttl()); !errors.Is(err, context.DeadlineExceeded) {
		s.t.Fatalf("Lock past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	s.unlock(lh)
	s.checkNothingLeft(key)
}

func testLock_cancelAtHandOff_nextWaiterServed(s *suite) {
	// The first waiter gives up at the moment the key is handed to it. The
	// second must get the key: nobody may stay stuck behind a ghost.
	key := s.key()
	holder, w1, w2 := s.client(), s.client(), s.client()
	for round := range 5 {
		lh := s.lock(holder, key, s.ttl())
		ctx1, cancel1 := context.WithCancel(s.ctx)
		err1 := make(chan error, 1)
		go func() {
			l, err := w1.Lock(ctx1, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "w1"}))
			if err == nil {
				err = l.Unlock(s.ctx) // it won the race: give the key on
			}
			err1 <- err
		}()
		s.waitQueuedIfInspectable(holder, key, "w1")
		got2 := make(chan error, 1)
		go func() {
			l, err := w2.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "w2"}))
			if err == nil {
				err = l.Unlock(s.ctx)
			}
			got2 <- err
		}()
		s.waitQueuedIfInspectable(holder, key, "w2")
		// Race the cancel against the hand-off.
		go cancel1()
		s.unlock(lh)
		for _, ch := range []chan error{err1, got2} {
			select {
			case err := <-ch:
				if err != nil && !errors.Is(err, context.Canceled) {
					s.t.Fatalf("round %d: %v", round, err)
				}
			case <-s.ctx.Done():
				s.t.Fatalf("round %d: a waiter is stuck behind one that gave up (watchdog)", round)
			}
		}
	}
	s.checkNothingLeft(key)
}

func testLock_deadWaiterSkipped(s *suite) {
	key := s.key()
	holder, live := s.client(), s.client()
	dead, link := s.faulty()
	lh := s.lock(holder, key, s.ttl())
	go func() {
		// This waiter's network dies while it waits. Its Lock may end in
		// any way; what matters is the live waiter behind it.
		l, err := dead.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "dead"}))
		if err == nil {
			<-l.Done()
		}
	}()
	s.waitQueuedIfInspectable(holder, key, "dead")
	link.Blackhole()
	got := make(chan error, 1)
	go func() {
		l, err := live.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "live"}))
		if err == nil {
			err = l.Unlock(s.ctx)
		}
		got <- err
	}()
	s.waitQueuedIfInspectable(holder, key, "live")
	s.unlock(lh)
	select {
	case err := <-got:
		if err != nil {
			s.t.Fatalf("live waiter: %v", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("live waiter stuck behind a dead one (watchdog)")
	}
}
