package dlocktest

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockdev/dlock"
)

// Scenarios of Client.RWMutex: one writer or many readers, in one queue in
// arrival order.

func testRWMutex_safety_readersAndWriters(s *suite) {
	const clients, rounds = 8, 10
	key := s.key()
	res := newSharedResource(0)
	s.contend(clients, clients, rounds, res, func(c *dlock.Client, i, r int) call {
		rw := c.RWMutex(key)
		writer := (i+r)%4 == 0
		switch try := (i+2*r)%5 == 4; {
		case writer && try:
			return call{dlock.Exclusive, rw.TryLock, true}
		case writer:
			return call{dlock.Exclusive, rw.Lock, false}
		case try:
			return call{dlock.Shared, rw.TryRLock, true}
		}
		return call{dlock.Shared, rw.RLock, false}
	})
	s.checkNothingLeft(key)
}

// A mixed queue: a writer holds; R1, R2 wait; W2 waits; R3 waits. The
// release grants R1 and R2 together, W2 and R3 still wait (R3 arrived after
// a waiting writer); then W2, then R3.
func testRWMutex_fifo_readersAtHeadGrantedTogether(s *suite) {
	key := s.key()
	c := s.client()
	s.inspect(c, key)
	w1 := s.granted(s.arrive(c, key, "w1", s.client().RWMutex(key).Lock))
	if w1.Mode() != dlock.Exclusive {
		s.t.Fatalf("writer's Mode() = %v, want exclusive", w1.Mode())
	}
	pr1 := s.arrive(c, key, "r1", s.client().RWMutex(key).RLock)
	pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
	pw2 := s.arrive(c, key, "w2", s.client().RWMutex(key).Lock)
	pr3 := s.arrive(c, key, "r3", s.client().RWMutex(key).RLock)
	s.expectQueue(c, key, "w1 holds", []string{"w1"}, []string{"r1", "r2", "w2", "r3"})
	s.waiting(pr1, pr2, pw2, pr3)

	s.unlock(w1)
	s.expectQueue(c, key, "w1 released", []string{"r1", "r2"}, []string{"w2", "r3"})
	r1, r2 := s.granted(pr1), s.granted(pr2)
	if r1.Mode() != dlock.Shared {
		s.t.Fatalf("reader's Mode() = %v, want shared", r1.Mode())
	}
	s.tokenAbove("r1", r1, w1)
	s.tokenAbove("r2", r2, w1)
	s.waiting(pw2, pr3)

	s.unlock(r1)
	s.expectQueue(c, key, "r1 released", []string{"r2"}, []string{"w2", "r3"})
	s.waiting(pw2, pr3)

	s.unlock(r2)
	s.expectQueue(c, key, "r2 released", []string{"w2"}, []string{"r3"})
	w2 := s.granted(pw2)
	s.tokenAbove("w2", w2, r1, r2)
	s.waiting(pr3)

	s.unlock(w2)
	s.expectQueue(c, key, "w2 released", []string{"r3"}, nil)
	r3 := s.granted(pr3)
	s.tokenAbove("r3", r3, w2)
	s.unlock(r3)
	s.checkNothingLeft(key)
}

// Readers join readers that hold, until a writer waits: then a reader that
// arrives waits behind the writer, so writers never starve.
func testRWMutex_readerWaitsBehindWaitingWriter(s *suite) {
	key := s.key()
	c := s.client()
	r0 := s.held("r0", c.RWMutex(key).TryRLock)
	pr1 := s.arrive(c, key, "r1", s.client().RWMutex(key).RLock)
	s.expectQueue(c, key, "a second reader arrived", []string{"r0", "r1"}, nil)
	r1 := s.granted(pr1)
	pw := s.arrive(c, key, "w", s.client().RWMutex(key).Lock)
	pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
	s.expectQueue(c, key, "a writer waits for two readers", []string{"r0", "r1"}, []string{"w", "r2"})
	s.waiting(pw, pr2)
	s.unlock(r0)
	s.unlock(r1)
	s.expectQueue(c, key, "the readers released", []string{"w"}, []string{"r2"})
	w := s.granted(pw)
	s.waiting(pr2)
	s.unlock(w)
	s.unlock(s.granted(pr2))
	s.checkNothingLeft(key)
}

func testRWMutex_tryLockAndTryRLock(s *suite) {
	key := s.key()
	a, b := s.client(), s.client()
	w1 := s.held("w1", a.RWMutex(key).TryLock)
	_, err := b.RWMutex(key).TryRLock(s.ctx, s.ttl())
	s.expectErr("TryRLock while a writer holds", err, dlock.ErrLocked)
	_, err = b.RWMutex(key).TryLock(s.ctx, s.ttl())
	s.expectErr("TryLock while a writer holds", err, dlock.ErrLocked)
	s.unlock(w1)

	r1 := s.held("r1", a.RWMutex(key).TryRLock)
	r2 := s.held("r2", b.RWMutex(key).TryRLock)
	_, err = b.RWMutex(key).TryLock(s.ctx, s.ttl())
	s.expectErr("TryLock while readers hold", err, dlock.ErrLocked)
	pw := s.arrive(a, key, "w2", s.client().RWMutex(key).Lock)
	_, err = b.RWMutex(key).TryRLock(s.ctx, s.ttl())
	s.expectErr("TryRLock while a writer waits", err, dlock.ErrLocked)
	s.expectQueue(a, key, "after the failed Try calls", []string{"r1", "r2"}, []string{"w2"})
	s.unlock(r1)
	s.unlock(r2)
	w2 := s.granted(pw)
	s.tokenAbove("w2", w2, w1, r1, r2)
	s.unlock(w2)
	s.checkNothingLeft(key)
}

// The lock's Lease_holderCutOff_lostBeforeNextGrant for a writer, with
// two readers waiting: both are granted once the writer's lease has ended,
// and not before.
func testRWMutex_writerCutOff_lostBeforeReadersGranted(s *suite) {
	a, link := s.faulty()
	c := s.client()
	key := s.key()
	lw := s.held("w", a.RWMutex(key).TryLock)
	pr1 := s.arrive(c, key, "r1", s.client().RWMutex(key).RLock)
	pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
	link.Blackhole()
	var readers []*dlock.Lease
	for i, p := range []*pending{pr1, pr2} {
		l := s.granted(p)
		if i == 0 {
			// The writer's entry went: both readers are granted at once.
			s.expectQueue(c, key, "the writer cut off", []string{"r1", "r2"}, nil)
		}
		select {
		case <-lw.Done():
		default:
			s.t.Fatalf("%s was granted while the writer's lease was still valid locally (deadline %v)", p.name, lw.Deadline())
		}
		s.tokenAbove(p.name, l, lw)
		readers = append(readers, l)
	}
	s.expectErr("writer's Err", lw.Err(), dlock.ErrLeaseLost)
	link.Restore()
	s.expectErr("stale writer's Unlock", lw.Unlock(s.ctx), dlock.ErrNotHeld)
	_, err := c.RWMutex(key).TryLock(s.ctx, s.ttl())
	s.expectErr("TryLock after the stale writer's Unlock (readers hold)", err, dlock.ErrLocked)
	for _, l := range readers {
		s.unlock(l)
	}
}

// A cancelled waiter of either mode leaves the queue and holds up nobody:
// readers behind a cancelled writer are granted at once.
func testRWMutex_cancelWhileWaiting_leavesNothing(s *suite) {
	key := s.key()
	c := s.client()
	r0 := s.held("r0", c.RWMutex(key).TryRLock)
	ctx1, cancel1 := context.WithCancel(s.ctx)
	defer cancel1()
	pw1 := s.arriveCtx(ctx1, c, key, "w1", s.client().RWMutex(key).Lock)
	pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
	s.expectQueue(c, key, "a writer waits", []string{"r0"}, []string{"w1", "r2"})
	cancel1()
	s.expectErr("cancelled Lock", s.failed(pw1), context.Canceled)
	s.expectQueue(c, key, "the waiting writer cancelled", []string{"r0", "r2"}, nil)
	r2 := s.granted(pr2)

	pw3 := s.arrive(c, key, "w3", s.client().RWMutex(key).Lock)
	ctx4, cancel4 := context.WithCancel(s.ctx)
	defer cancel4()
	pr4 := s.arriveCtx(ctx4, c, key, "r4", s.client().RWMutex(key).RLock)
	pw5 := s.arrive(c, key, "w5", s.client().RWMutex(key).Lock)
	cancel4()
	s.expectErr("cancelled RLock", s.failed(pr4), context.Canceled)
	s.expectQueue(c, key, "a waiting reader cancelled", []string{"r0", "r2"}, []string{"w3", "w5"})
	s.unlock(r0)
	s.unlock(r2)
	w3 := s.granted(pw3)
	s.waiting(pw5)
	s.unlock(w3)
	w5 := s.granted(pw5)
	// Retried releases of either mode say the lease is no longer held,
	// and free nobody else's.
	s.expectErr("second Unlock of a reader", r0.Unlock(s.ctx), dlock.ErrNotHeld)
	s.expectErr("second Unlock of a writer", w3.Unlock(s.ctx), dlock.ErrNotHeld)
	s.expectQueue(c, key, "after the retried Unlocks", []string{"w5"}, nil)
	s.unlock(w5)
	s.checkNothingLeft(key)
}

// A waiter whose deadline passes while readers hold returns
// DeadlineExceeded and leaves nothing behind (as Lock_deadlineWhileHeld).
func testRWMutex_deadlineWhileReadersHold(s *suite) {
	key := s.key()
	c := s.client()
	r := s.held("r", c.RWMutex(key).TryRLock)
	ctx, cancel := context.WithTimeout(s.ctx, s.h.TTL()/2)
	defer cancel()
	_, err := s.client().RWMutex(key).Lock(ctx, s.ttl())
	if !errors.Is(err, context.DeadlineExceeded) {
		s.t.Fatalf("Lock past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	s.expectQueue(c, key, "the writer's deadline passed", []string{"r"}, nil)
	s.unlock(r)
	s.checkNothingLeft(key)
}

func testRWMutex_inspect_kindModesInOrder(s *suite) {
	key := s.key()
	c := s.client()
	w0 := s.held("w0", c.RWMutex(key).TryLock)
	pr1 := s.arrive(c, key, "r1", s.client().RWMutex(key).RLock)
	pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
	pw3 := s.arrive(c, key, "w3", s.client().RWMutex(key).Lock)
	info := s.expectQueue(c, key, "a writer holds", []string{"w0"}, []string{"r1", "r2", "w3"})
	if info.Kind != dlock.KindRWMutex || info.Limit != 0 {
		s.t.Fatalf("Inspect: kind %v, limit %d; want rwmutex, 0", info.Kind, info.Limit)
	}
	if h := info.Holders[0]; h.Mode != dlock.Exclusive || h.Token != w0.Token() {
		s.t.Fatalf("holder = %+v, want exclusive with token %d", h, w0.Token())
	}
	for i, want := range []dlock.Mode{dlock.Shared, dlock.Shared, dlock.Exclusive} {
		if w := info.Waiters[i]; w.Mode != want || w.Token != 0 {
			s.t.Fatalf("waiter %d = %+v, want %v with token 0", i, w, want)
		}
	}
	s.unlock(w0)
	info = s.expectQueue(c, key, "w0 released", []string{"r1", "r2"}, []string{"w3"})
	r1, r2 := s.granted(pr1), s.granted(pr2)
	for i, want := range []*dlock.Lease{r1, r2} {
		if h := info.Holders[i]; h.Mode != dlock.Shared || h.Token != want.Token() {
			s.t.Fatalf("holder %d = %+v, want shared with token %d", i, h, want.Token())
		}
	}
	if info.Holders[0].Token >= info.Holders[1].Token {
		s.t.Fatalf("holders' tokens %d, %d: want them in grant order", info.Holders[0].Token, info.Holders[1].Token)
	}
	if h := info.Holders[0]; h.TTL > s.h.TTL() || h.TTL == 0 {
		s.t.Fatalf("holder = %+v, want a TTL in (0, %v] or negative for unknown", h, s.h.TTL())
	}
	list, err := c.List(s.ctx, key[:len(key)-1])
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	found := false
	for _, li := range list {
		found = found || (li.Key == key && li.Kind == dlock.KindRWMutex && len(li.Holders) == 2 && len(li.Waiters) == 1)
	}
	if !found {
		s.t.Fatalf("List(prefix of %q) = %+v, want the key as a read-write lock with 2 holders and 1 waiter", key, list)
	}
	s.unlock(r1)
	s.unlock(r2)
	s.unlock(s.granted(pw3))
	s.checkNothingLeft(key)
}

// Lock_cancelAtHandOff_nextWaiterServed for a writer with readers behind
// it: the writer gives up at the moment the key is handed to it, and the
// readers behind it are served either way (it left the queue, or it was
// granted and unlocks).
func testRWMutex_cancelAtHandOff_readersServed(s *suite) {
	key := s.key()
	c := s.client()
	for round := range 4 {
		w0 := s.held("w0", c.RWMutex(key).TryLock)
		ctx1, cancel1 := context.WithCancel(s.ctx)
		wc := s.client()
		w1 := s.arriveCtx(ctx1, c, key, "w1", func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
			l, err := wc.RWMutex(key).Lock(ctx, opts...)
			if err == nil {
				err = l.Unlock(s.ctx) // it won the race: give the key on
			}
			return nil, err
		})
		pr2 := s.arrive(c, key, "r2", s.client().RWMutex(key).RLock)
		pr3 := s.arrive(c, key, "r3", s.client().RWMutex(key).RLock)
		go cancel1() // race the cancel against the hand-off
		s.unlock(w0)
		s.grantedOrCanceled(w1, fmt.Sprintf("round %d", round))
		s.unlock(s.granted(pr2))
		s.unlock(s.granted(pr3))
	}
	s.checkNothingLeft(key)
}

// Lock_deadWaiterSkipped for a writer: a waiting writer whose network dies
// blocks the readers behind it only until its entry goes, although a
// reader still holds.
func testRWMutex_deadWriterWaiting_readersServed(s *suite) {
	key := s.key()
	c := s.client()
	dead, link := s.faulty()
	r0 := s.held("r0", c.RWMutex(key).TryRLock)
	r1 := s.held("r1", c.RWMutex(key).TryRLock)
	go func() {
		// Its Lock may end in any way; what matters is the reader behind it.
		l, err := dead.RWMutex(key).Lock(s.ctx, s.ttl(), noted("dead"))
		if err == nil {
			<-l.Done()
		}
	}()
	s.waitQueued(c, key, "dead")
	link.Blackhole()
	pr := s.arrive(c, key, "live", s.client().RWMutex(key).RLock)
	l := s.granted(pr)
	select {
	case <-r0.Done():
		s.t.Fatalf("the holding reader's lease ended: %v", r0.Err())
	default:
	}
	s.unlock(l)
	s.unlock(r0)
	s.unlock(r1)
	// Let the dead client clean up at once rather than at its Close,
	// which would wait for its unreachable server.
	link.Restore()
}
