package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/dlockdev/dlock"
)

// Scenarios of Client.Semaphore. The first permits are taken with
// TryAcquire where a scenario needs several held at once: a backend that
// serves a semaphore as a lock then fails at once (ErrLocked) instead of at
// the watchdog.

// call is one contender's request in contend: the mode it asks for, the
// call, and whether the call is a Try one (whose ErrLocked skips the round).
type call struct {
	mode    dlock.Mode
	acquire acquirer
	try     bool
}

// contend runs contenders of rounds critical sections each through res,
// contender i on client i%clients (several contenders share a client when
// clients < contenders, as goroutines of one process do); pick gives
// contender i's call of round r. It fails the test with what res found.
func (s *suite) contend(contenders, clients, rounds int, res *sharedResource, pick func(c *dlock.Client, i, r int) call) {
	s.t.Helper()
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		cs[i] = s.client()
	}
	var wg sync.WaitGroup
	errs := make(chan error, contenders)
	for i := range contenders {
		c := cs[i%clients]
		wg.Go(func() {
			who := fmt.Sprintf("contender%d", i)
			for r := range rounds {
				k := pick(c, i, r)
				l, err := k.acquire(s.ctx, s.ttl())
				if k.try && errors.Is(err, dlock.ErrLocked) {
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("%s, round %d: %w", who, r, err)
					return
				}
				if l.Mode() != k.mode {
					errs <- fmt.Errorf("%s, round %d: lease mode %v, want %v", who, r, l.Mode(), k.mode)
				}
				res.enter(who, k.mode, l.Token())
				for range 20 { // give an overlapping holder a chance to show up
					runtime.Gosched()
				}
				res.exit(k.mode)
				if err := l.Unlock(s.ctx); err != nil {
					errs <- fmt.Errorf("%s, round %d: Unlock: %w", who, r, err)
					return
				}
			}
		})
	}
	entries := s.finishContenders(&wg, errs, res.report)
	if entries == 0 {
		s.t.Error("no contender entered the resource")
	}
}

// Never more than limit permits held at once, and no token given twice,
// with two contenders on each client, as goroutines of one process.
func testSemaphore_safety_manyContenders(s *suite) {
	const limit, contenders, clients, rounds = 3, 12, 6, 8
	key := s.key()
	res := newSharedResource(limit)
	s.contend(contenders, clients, rounds, res, func(c *dlock.Client, i, r int) call {
		sem := c.Semaphore(key, limit)
		if (i+r)%5 == 4 {
			return call{dlock.Shared, sem.TryAcquire, true}
		}
		return call{dlock.Shared, sem.Acquire, false}
	})
	s.checkNothingLeft(key)
}

// With more contenders than permits, every permit is in use: the first
// limit are granted without waiting, the next waits, and each release
// grants exactly one waiter, the first.
func testSemaphore_saturation_allPermitsGranted(s *suite) {
	const limit = 3
	key := s.key()
	c := s.client()
	s.inspect(c, key) // skips the test if the backend cannot inspect
	var ps []*pending
	for i := range limit {
		name := fmt.Sprintf("p%d", i)
		ps = append(ps, s.arrive(c, key, name, s.client().Semaphore(key, limit).Acquire))
		s.expectQueue(c, key, name+" arrived with "+fmt.Sprint(i)+" of 3 permits in use", seq("p", 0, i+1), nil)
	}
	var held []*dlock.Lease
	for _, p := range ps {
		held = append(held, s.granted(p))
	}
	q0 := s.arrive(c, key, "q0", s.client().Semaphore(key, limit).Acquire)
	q1 := s.arrive(c, key, "q1", s.client().Semaphore(key, limit).Acquire)
	s.expectQueue(c, key, "all permits in use", seq("p", 0, limit), []string{"q0", "q1"})
	s.waiting(q0, q1)

	s.unlock(held[0])
	s.expectQueue(c, key, "p0 released", []string{"p1", "p2", "q0"}, []string{"q1"})
	l0 := s.granted(q0)
	s.tokenAbove("q0", l0, held...)
	s.waiting(q1)
	s.unlock(held[1])
	s.expectQueue(c, key, "p1 released", []string{"p2", "q0", "q1"}, nil)
	l1 := s.granted(q1)
	s.tokenAbove("q1", l1, append(held, l0)...)
	for _, l := range []*dlock.Lease{held[2], l0, l1} {
		s.unlock(l)
	}
	s.checkNothingLeft(key)
}

// A release of several permits at once (Close of a client that holds them
// all) grants as many waiters, in order, and no more.
func testSemaphore_releaseOfSeveral_grantsAsMany(s *suite) {
	const limit = 3
	key := s.key()
	owner, c := s.client(), s.client()
	sem := owner.Semaphore(key, limit)
	var held []*dlock.Lease
	for i := range limit {
		held = append(held, s.held(fmt.Sprintf("h%d", i), sem.TryAcquire))
	}
	var ws []*pending
	for i := range limit + 1 {
		ws = append(ws, s.arrive(c, key, fmt.Sprintf("w%d", i), s.client().Semaphore(key, limit).Acquire))
	}
	s.expectQueue(c, key, "all permits held by one client", seq("h", 0, limit), seq("w", 0, limit+1))
	if err := owner.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.expectQueue(c, key, "the holding client closed", seq("w", 0, limit), []string{"w3"})
	var got []*dlock.Lease
	for _, w := range ws[:limit] {
		l := s.granted(w)
		s.tokenAbove(w.name, l, held...)
		got = append(got, l)
	}
	s.waiting(ws[limit])
	s.unlock(got[0])
	s.unlock(s.granted(ws[limit]))
	for _, l := range got[1:] {
		s.unlock(l)
	}
	s.checkNothingLeft(key)
}

func testSemaphore_fifo(s *suite) {
	const limit, waiters = 2, 5
	key := s.key()
	c := s.client()
	s.inspect(c, key)
	sem := c.Semaphore(key, limit)
	holders := []*dlock.Lease{s.held("h0", sem.TryAcquire), s.held("h1", sem.TryAcquire)}
	names := []string{"h0", "h1"}
	var ws []*pending
	for i := range waiters {
		ws = append(ws, s.arrive(c, key, fmt.Sprintf("w%d", i), s.client().Semaphore(key, limit).Acquire))
	}
	s.expectQueue(c, key, "waiters queued", names, seq("w", 0, waiters))
	// Each release grants the first waiter, and it only.
	for i, w := range ws {
		s.unlock(holders[0])
		holders, names = holders[1:], names[1:]
		names = append(names, w.name)
		s.expectQueue(c, key, "release "+fmt.Sprint(i+1), names, seq("w", i+1, waiters))
		holders = append(holders, s.granted(w))
		s.waiting(ws[i+1:]...)
	}
	for _, l := range holders {
		s.unlock(l)
	}
	s.checkNothingLeft(key)
}

func testSemaphore_tryAcquire(s *suite) {
	const limit = 2
	key := s.key()
	a, b := s.client(), s.client()
	t1 := s.held("t1", a.Semaphore(key, limit).TryAcquire)
	t2 := s.held("t2", b.Semaphore(key, limit).TryAcquire)
	s.tokenAbove("t2", t2, t1)
	if t1.Mode() != dlock.Shared {
		s.t.Fatalf("permit's Mode() = %v, want shared", t1.Mode())
	}
	_, err := b.Semaphore(key, limit).TryAcquire(s.ctx, s.ttl(), noted("t3"))
	s.expectErr("TryAcquire with every permit held", err, dlock.ErrLocked)
	w := s.arrive(a, key, "w", s.client().Semaphore(key, limit).Acquire)
	_, err = a.Semaphore(key, limit).TryAcquire(s.ctx, s.ttl(), noted("t4"))
	s.expectErr("TryAcquire with every permit held and a waiter", err, dlock.ErrLocked)
	s.expectQueue(a, key, "after the failed TryAcquires", []string{"t1", "t2"}, []string{"w"})
	s.unlock(t1)
	lw := s.granted(w)
	s.unlock(t2)
	// One permit free, nobody waiting: TryAcquire gets it.
	t5 := s.held("t5", b.Semaphore(key, limit).TryAcquire)
	s.tokenAbove("t5", t5, lw)
	s.unlock(lw)
	s.unlock(t5)
	s.checkNothingLeft(key)
}

// The lock's Lease_holderCutOff_lostBeforeNextGrant for a permit: the
// waiter behind a dead holder gets its permit within the holder's TTL, and
// not before the holder's lease has ended locally.
func testSemaphore_holderCutOff_lostBeforeNextGrant(s *suite) {
	const limit = 2
	a, link := s.faulty()
	b, c, d := s.client(), s.client(), s.client()
	key := s.key()
	la := s.held("a", a.Semaphore(key, limit).TryAcquire)
	lb := s.held("b", b.Semaphore(key, limit).TryAcquire)
	pc := s.arrive(c, key, "c", c.Semaphore(key, limit).Acquire)
	link.Blackhole() // a is now as good as dead to the server: no renewals
	lc := s.granted(pc)
	select {
	case <-la.Done():
	default:
		s.t.Fatalf("c was granted a's permit while a's lease was still valid locally (deadline %v)", la.Deadline())
	}
	s.expectErr("a's Err", la.Err(), dlock.ErrLeaseLost)
	s.tokenAbove("c", lc, la, lb)
	select {
	case <-lb.Done():
		s.t.Fatalf("b's lease ended with a's: %v", lb.Err())
	default:
	}
	// a comes back and unlocks: it must free nobody's permit.
	link.Restore()
	s.expectErr("stale holder's Unlock", la.Unlock(s.ctx), dlock.ErrNotHeld)
	_, err := d.Semaphore(key, limit).TryAcquire(s.ctx, s.ttl())
	s.expectErr("TryAcquire after the stale holder's Unlock (b and c hold)", err, dlock.ErrLocked)
	s.unlock(lb)
	s.unlock(lc)
}

func testSemaphore_cancelWhileWaiting_leavesNothing(s *suite) {
	const limit = 2
	key := s.key()
	c := s.client()
	sem := c.Semaphore(key, limit)
	h0, h1 := s.held("h0", sem.TryAcquire), s.held("h1", sem.TryAcquire)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	q := s.arriveCtx(ctx, c, key, "quitter", s.client().Semaphore(key, limit).Acquire)
	n := s.arrive(c, key, "next", s.client().Semaphore(key, limit).Acquire)
	cancel()
	s.expectErr("cancelled Acquire", s.failed(q), context.Canceled)
	s.expectQueue(c, key, "the first waiter cancelled", []string{"h0", "h1"}, []string{"next"})
	s.waiting(n)
	s.unlock(h0)
	ln := s.granted(n)
	// A retried release of a permit says it is no longer held, and frees
	// nobody else's.
	s.expectErr("second Unlock of a permit", h0.Unlock(s.ctx), dlock.ErrNotHeld)
	s.expectQueue(c, key, "after the retried Unlock", []string{"h1", "next"}, nil)
	s.unlock(h1)
	s.unlock(ln)
	s.checkNothingLeft(key)
}

func testSemaphore_RWMutex_clientClose(s *suite) {
	const limit = 2
	semKey, rwKey := s.key(), s.key()
	a, b := s.client(), s.client()
	la := s.held("a", a.Semaphore(semKey, limit).TryAcquire)
	lb := s.held("b", b.Semaphore(semKey, limit).TryAcquire)
	ra := s.held("ra", a.RWMutex(rwKey).TryRLock)
	rb := s.held("rb", b.RWMutex(rwKey).TryRLock)
	semWait := s.arrive(b, semKey, "closing", a.Semaphore(semKey, limit).Acquire)
	rwWait := s.arrive(b, rwKey, "closing", a.RWMutex(rwKey).Lock)
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.expectErr("Acquire waiting during Close", s.failed(semWait), dlock.ErrClosed)
	s.expectErr("Lock waiting during Close", s.failed(rwWait), dlock.ErrClosed)
	for _, l := range []*dlock.Lease{la, ra} {
		select {
		case <-l.Done():
		default:
			s.t.Fatalf("lease on %q still open after Close", l.Key())
		}
		s.expectErr("Err of a lease released by Close", l.Err(), dlock.ErrClosed)
	}
	_, err := a.Semaphore(semKey, limit).TryAcquire(s.ctx)
	s.expectErr("TryAcquire after Close", err, dlock.ErrClosed)
	_, err = a.RWMutex(rwKey).RLock(s.ctx)
	s.expectErr("RLock after Close", err, dlock.ErrClosed)
	s.expectQueue(b, semKey, "semaphore after Close", []string{"b"}, nil)
	s.expectQueue(b, rwKey, "read-write lock after Close", []string{"rb"}, nil)
	s.unlock(lb)
	s.unlock(rb)
	s.checkNothingLeft(semKey)
	s.checkNothingLeft(rwKey)
}

func testSemaphore_limitBelowOne_invalidOption(s *suite) {
	key := s.key()
	c := s.client()
	for _, limit := range []int{0, -1} {
		sem := c.Semaphore(key, limit)
		for name, acquire := range map[string]acquirer{"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire} {
			_, err := acquire(s.ctx, s.ttl())
			s.expectErr(fmt.Sprintf("%s with limit %d", name, limit), err, dlock.ErrInvalidOption)
		}
	}
	s.checkNothingLeft(key)
	if info, err := c.Inspect(s.ctx, key); err == nil && (len(info.Holders) != 0 || len(info.Waiters) != 0) {
		s.t.Fatalf("after refused limits, Inspect = %+v, want a free key", info)
	}
}

func testSemaphore_inspect_kindLimitHoldersWaiters(s *suite) {
	const limit = 3
	key := s.key()
	c := s.client()
	sem := c.Semaphore(key, limit)
	var held []*dlock.Lease
	for i := range limit {
		held = append(held, s.held(fmt.Sprintf("h%d", i), sem.TryAcquire))
	}
	w0 := s.arrive(c, key, "w0", s.client().Semaphore(key, limit).Acquire)
	w1 := s.arrive(c, key, "w1", s.client().Semaphore(key, limit).Acquire)
	info := s.expectQueue(c, key, "three permits held, two waiting", seq("h", 0, limit), []string{"w0", "w1"})
	if info.Key != key || info.Kind != dlock.KindSemaphore || info.Limit != limit {
		s.t.Fatalf("Inspect: key %q, kind %v, limit %d; want %q, semaphore, %d", info.Key, info.Kind, info.Limit, key, limit)
	}
	for i, h := range info.Holders {
		if h.Mode != dlock.Shared || h.Token != held[i].Token() {
			s.t.Fatalf("holder %d = %+v, want shared with token %d", i, h, held[i].Token())
		}
	}
	for i, w := range info.Waiters {
		if w.Mode != dlock.Shared || w.Token != 0 {
			s.t.Fatalf("waiter %d = %+v, want shared with token 0", i, w)
		}
	}
	list, err := c.List(s.ctx, key[:len(key)-1])
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	found := false
	for _, li := range list {
		found = found || (li.Key == key && li.Kind == dlock.KindSemaphore && li.Limit == limit &&
			len(li.Holders) == limit && len(li.Waiters) == 2)
	}
	if !found {
		s.t.Fatalf("List(prefix of %q) = %+v, want the key as a semaphore of 3 with 3 holders and 2 waiters", key, list)
	}
	for _, l := range held {
		s.unlock(l)
	}
	s.unlock(s.granted(w0))
	s.unlock(s.granted(w1))
	if info := s.inspect(c, key); len(info.Holders) != 0 || len(info.Waiters) != 0 {
		s.t.Fatalf("Inspect of a free key = %+v, want no holder, no waiters", info)
	}
	s.checkNothingLeft(key)
}

// Lock_cancelAtHandOff_nextWaiterServed for a permit: the first waiter
// gives up at the moment a permit is handed to it; the second gets one
// either way.
func testSemaphore_cancelAtHandOff_nextWaiterServed(s *suite) {
	const limit = 2
	key := s.key()
	c := s.client()
	sem := c.Semaphore(key, limit)
	h1 := s.held("h1", sem.TryAcquire)
	for round := range 4 {
		h0 := s.held("h0", sem.TryAcquire)
		ctx1, cancel1 := context.WithCancel(s.ctx)
		wc := s.client()
		w1 := s.arriveCtx(ctx1, c, key, "w1", func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
			l, err := wc.Semaphore(key, limit).Acquire(ctx, opts...)
			if err == nil {
				err = l.Unlock(s.ctx) // it won the race: give the permit on
			}
			return nil, err
		})
		pw2 := s.arrive(c, key, "w2", s.client().Semaphore(key, limit).Acquire)
		go cancel1()
		s.unlock(h0)
		s.grantedOrCanceled(w1, fmt.Sprintf("round %d", round))
		s.unlock(s.granted(pw2))
	}
	s.unlock(h1)
	s.checkNothingLeft(key)
}
