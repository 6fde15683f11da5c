package dlocktest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlockdev/dlock"
)

// Scenarios of one key serving several kinds: a key is a lock, a semaphore
// of one limit or a read-write lock while anybody holds or waits, refuses
// calls of another kind without touching the server, and serves any kind
// once free; its fencing tokens go up across all of them.

// named is a call with a name for messages.
type named struct {
	name    string
	acquire acquirer
}

// refuseKinds makes each call on key, Try ones first (a backend that
// waits instead of refusing then fails at once, not at the watchdog):
// each must fail with ErrKindMismatch naming what the key is (is, as
// DescribeKind puts it), and leave the key's state as Inspect showed it.
func (s *suite) refuseKinds(c *dlock.Client, key, is string, calls []named) {
	s.t.Helper()
	before := s.inspect(c, key)
	for _, k := range calls {
		l, err := k.acquire(s.ctx, s.ttl(), noted("mismatch"))
		if err == nil {
			s.t.Fatalf("%s of %s: granted (token %d), want ErrKindMismatch", k.name, is, l.Token())
		}
		if !errors.Is(err, dlock.ErrKindMismatch) || !strings.Contains(err.Error(), "it is "+is) {
			s.t.Fatalf("%s of %s: err = %v, want ErrKindMismatch saying %q", k.name, is, err, "it is "+is)
		}
	}
	after := s.inspect(c, key)
	if d := diffInfo(before, after); d != "" {
		s.t.Fatalf("refused calls changed %s: %s", is, d)
	}
}

// diffInfo describes how two states of one key differ, in everything but
// the entries' remaining TTL, which runs down.
func diffInfo(a, b *dlock.LockInfo) string {
	if a.Kind != b.Kind || a.Limit != b.Limit {
		return fmt.Sprintf("kind %v/%d became %v/%d", a.Kind, a.Limit, b.Kind, b.Limit)
	}
	same := func(x, y []dlock.Entry) bool {
		return slices.EqualFunc(x, y, func(e, f dlock.Entry) bool {
			return e.Token == f.Token && e.Mode == f.Mode && e.Metadata == f.Metadata && e.Since.Equal(f.Since)
		})
	}
	if !same(a.Holders, b.Holders) || !same(a.Waiters, b.Waiters) {
		return fmt.Sprintf("holders %+v, waiters %+v became holders %+v, waiters %+v", a.Holders, a.Waiters, b.Holders, b.Waiters)
	}
	return ""
}

func testSemaphore_RWMutex_kindMismatch(s *suite) {
	key := s.key()
	a, b := s.client(), s.client()
	sem3, sem4, rw := b.Semaphore(key, 3), b.Semaphore(key, 4), b.RWMutex(key)

	// A lock, with a waiter.
	lock := s.held("lock", tryLockOf(a, key))
	pw := s.arrive(a, key, "lock waiter", lockOf(s.client(), key))
	s.refuseKinds(a, key, "a lock", []named{
		{"Semaphore(3).TryAcquire", sem3.TryAcquire},
		{"RWMutex.TryRLock", rw.TryRLock},
		{"RWMutex.TryLock", rw.TryLock},
		{"Semaphore(3).Acquire", sem3.Acquire},
		{"RWMutex.RLock", rw.RLock},
		{"RWMutex.Lock", rw.Lock},
	})
	s.unlock(lock)
	s.unlock(s.granted(pw))
	s.checkNothingLeft(key)

	// Once free, the key serves as a semaphore of 3 permits.
	p1 := s.held("p1", a.Semaphore(key, 3).TryAcquire)
	p2 := s.held("p2", a.Semaphore(key, 3).TryAcquire)
	s.tokenAbove("p1", p1, lock)
	s.refuseKinds(a, key, "a semaphore of 3 permits", []named{
		{"Semaphore(4).TryAcquire", sem4.TryAcquire},
		{"TryLock", tryLockOf(b, key)},
		{"RWMutex.TryRLock", rw.TryRLock},
		{"Semaphore(4).Acquire", sem4.Acquire},
		{"Lock", lockOf(b, key)},
		{"RWMutex.Lock", rw.Lock},
	})
	if info := s.inspect(a, key); info.Kind != dlock.KindSemaphore || info.Limit != 3 {
		s.t.Fatalf("Inspect after refused calls: kind %v, limit %d; want semaphore, 3", info.Kind, info.Limit)
	}
	s.unlock(p1)
	s.unlock(p2)
	s.checkNothingLeft(key)

	// Then as a read-write lock, with a writer waiting behind a reader.
	r := s.held("r", a.RWMutex(key).TryRLock)
	s.tokenAbove("r", r, p1, p2)
	pww := s.arrive(a, key, "writer", s.client().RWMutex(key).Lock)
	s.refuseKinds(a, key, "a read-write lock", []named{
		{"Semaphore(3).TryAcquire", sem3.TryAcquire},
		{"TryLock", tryLockOf(b, key)},
		{"Semaphore(3).Acquire", sem3.Acquire},
		{"Lock", lockOf(b, key)},
	})
	s.unlock(r)
	w := s.granted(pww)
	s.unlock(w)
	s.checkNothingLeft(key)

	// And as a semaphore of another limit, then a lock again.
	p4 := s.held("p4", sem4.TryAcquire)
	s.tokenAbove("p4", p4, w)
	s.unlock(p4)
	l := s.held("lock again", tryLockOf(a, key))
	s.tokenAbove("lock again", l, p4)
	s.unlock(l)
	s.checkNothingLeft(key)
}

// Every grant's token is above every earlier grant's on the key, whatever
// its kind and mode: permits held at once, readers granted together, and
// a key that changes kind once free.
func testSemaphore_RWMutex_tokensIncreaseAcrossModesAndKinds(s *suite) {
	key := s.key()
	c := s.client()
	cs := []*dlock.Client{c, s.client(), s.client()}
	var earlier []*dlock.Lease
	grant := func(name string, ls ...*dlock.Lease) {
		s.t.Helper()
		for _, l := range ls {
			s.tokenAbove(name, l, earlier...)
		}
		for i, l := range ls {
			for _, m := range ls[i+1:] {
				if l.Token() == m.Token() {
					s.t.Fatalf("%s: two leases granted together share token %d", name, l.Token())
				}
			}
		}
		earlier = append(earlier, ls...)
	}
	unlockAll := func(ls ...*dlock.Lease) {
		s.t.Helper()
		for _, l := range ls {
			s.unlock(l)
		}
	}
	for round := range 3 {
		at := func(what string) string { return fmt.Sprintf("round %d: %s", round, what) }

		l := s.held("lock", tryLockOf(cs[0], key))
		grant(at("lock"), l)
		unlockAll(l)

		var permits []*dlock.Lease
		for i, pc := range cs {
			p := s.held(fmt.Sprintf("permit%d", i), pc.Semaphore(key, 3).TryAcquire)
			grant(at("permit held with others"), p)
			permits = append(permits, p)
		}
		unlockAll(permits...)

		r1 := s.held("r1", cs[1].RWMutex(key).TryRLock)
		grant(at("reader"), r1)
		r2 := s.held("r2", cs[2].RWMutex(key).TryRLock)
		grant(at("second reader"), r2)
		unlockAll(r1, r2)

		w := s.held("w", cs[0].RWMutex(key).TryLock)
		grant(at("writer"), w)
		pr1 := s.arrive(c, key, "wr1", cs[1].RWMutex(key).RLock)
		pr2 := s.arrive(c, key, "wr2", cs[2].RWMutex(key).RLock)
		s.unlock(w)
		r1, r2 = s.granted(pr1), s.granted(pr2)
		grant(at("readers granted together at a release"), r1, r2)
		unlockAll(r1, r2)
	}
	s.checkNothingLeft(key)
}

func testSemaphore_RWMutex_tokensIncreaseAcrossServerRestart(s *suite) {
	r, ok := s.h.(ServerRestarter)
	if !ok {
		s.t.Skip("backend harness cannot restart the server (no ServerRestarter)")
	}
	a := s.client()
	key := s.key()
	p1 := s.held("p1", a.Semaphore(key, 2).TryAcquire)
	p2 := s.held("p2", a.Semaphore(key, 2).TryAcquire)
	s.unlock(p1)
	s.unlock(p2)
	rd := s.held("r", a.RWMutex(key).TryRLock)
	s.unlock(rd)
	if err := r.RestartServer(s.ctx, s.t); err != nil {
		s.t.Fatalf("RestartServer: %v", err)
	}
	// The client reconnects by itself; the first attempts may fail while it does.
	var p3 *dlock.Lease
	s.eventually("a permit after restart", func() bool {
		var err error
		p3, err = a.Semaphore(key, 2).TryAcquire(s.ctx, s.ttl())
		return err == nil
	})
	s.tokenAbove("permit after a server restart", p3, p1, p2, rd)
	p4 := s.held("p4", a.Semaphore(key, 2).TryAcquire)
	s.tokenAbove("second permit after a server restart", p4, p3)
	s.unlock(p3)
	s.unlock(p4)
	r2 := s.held("r2", a.RWMutex(key).TryRLock)
	s.tokenAbove("reader after a server restart", r2, p4)
	s.unlock(r2)
}
