package dlocktest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/dlockdev/dlock"
)

// Scenarios of terms: who leads, in which order, with which token and
// value.

// Many candidates campaign and resign at once: never two valid
// Leaderships, every term's token above the one before, and Leader shows
// the term's own token and value while it lasts.
func testElection_oneLeaderUnderContention(s *suite) {
	key := s.key()
	const clients, terms = 6, 4
	s.needElections(s.client())
	observer := s.client()
	var res fencedResource
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := s.client()
		wg.Go(func() {
			who := fmt.Sprintf("candidate%d", i)
			for n := range terms {
				value := fmt.Sprintf("%s/term%d", who, n)
				term, err := c.Election(key).Campaign(s.ctx, value, s.ttl())
				if err != nil {
					errs <- fmt.Errorf("%s: Campaign: %w", who, err)
					return
				}
				res.enter(who, term.Token())
				runtime.Gosched() // give an overlapping leader a chance to show up
				info, err := observer.Election(key).Leader(s.ctx)
				if err != nil || info.Token != term.Token() || info.Value != value {
					errs <- fmt.Errorf("%s: Leader while leading with token %d and value %q = %+v, %v", who, term.Token(), value, info, err)
				}
				if err := term.Err(); err != nil {
					errs <- fmt.Errorf("%s: term lost on a healthy server: %w", who, err)
				}
				res.exit()
				if err := term.Resign(s.ctx); err != nil {
					errs <- fmt.Errorf("%s: Resign: %w", who, err)
					return
				}
			}
		})
	}
	writes := s.finishContenders(&wg, errs, res.report)
	if writes != clients*terms {
		s.t.Errorf("%d terms, want %d", writes, clients*terms)
	}
	s.expectNoLeader(observer, key, "after every candidate resigned")
	s.checkNothingLeft(key)
}

// Candidates are elected in arrival order; Resign hands over to the next
// at once (Inspect shows the next as leader as soon as Resign returns);
// tokens grow with every term.
func testElection_arrivalOrder_resignHandsOver(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	s.expectNoLeader(c, key, "before any campaign")
	a := s.elected(s.campaign(s.client(), key, "a"))
	pb := s.campaign(s.client(), key, "b")
	pc := s.campaign(s.client(), key, "c")
	pd := s.campaign(s.client(), key, "d")
	s.expectQueue(c, key, "a leads, b, c, d campaign", []string{"a"}, []string{"b", "c", "d"})
	s.campaigning(pb, pc, pd)
	s.expectLeader(c, key, "a leads", a, "a")

	prev := a
	order := []*candidate{pb, pc, pd}
	for i, p := range order {
		s.resign("the leader", prev)
		waiters := []string{}
		for _, q := range order[i+1:] {
			waiters = append(waiters, q.name)
		}
		when := "after the leader resigned, " + p.name + " is next"
		s.expectQueue(c, key, when, []string{p.name}, waiters)
		term := s.elected(p)
		s.campaigning(order[i+1:]...)
		if term.Token() <= prev.Token() {
			s.t.Fatalf("%s: token %d not above the previous term's %d", when, term.Token(), prev.Token())
		}
		s.expectLeader(c, key, when, term, p.name)
		if !errors.Is(prev.Err(), dlock.ErrReleased) {
			s.t.Fatalf("Err of a resigned term = %v, want ErrReleased", prev.Err())
		}
		prev = term
	}
	s.resign("d", prev)
	s.expectNoLeader(c, key, "after the last candidate resigned")

	// A new term after nobody led has a higher token still.
	e := s.elected(s.campaign(c, key, "e"))
	if e.Token() <= prev.Token() {
		s.t.Fatalf("token %d of a term after a gap not above %d", e.Token(), prev.Token())
	}
	s.resign("e", e)
	if err := e.Resign(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("second Resign: err = %v, want ErrNotHeld", err)
	}
	s.checkNothingLeft(key)
}

// Leader shows the value, the token and the start of the term, which
// Proclaim does not move; ErrNoLeader when nobody leads.
func testElection_leaderInfo(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	s.expectNoLeader(c, key, "on a fresh key")
	term, err := s.client().Election(key).Campaign(s.ctx, "10.0.0.1:8080", s.ttl(), noted("a"))
	if err != nil {
		s.t.Fatalf("Campaign: %v", err)
	}
	info := s.expectLeader(c, key, "a leads", term, "10.0.0.1:8080")
	if info.Metadata.Note != "a" {
		s.t.Fatalf("Leader's metadata = %+v, want the note of WithMetadata", info.Metadata)
	}
	entry := s.inspect(c, key).Holders
	if len(entry) != 1 || entry[0].Value != "10.0.0.1:8080" || entry[0].Token != term.Token() {
		s.t.Fatalf("Inspect's holders = %+v, want the leader with its value", entry)
	}
	if !info.Since.Equal(entry[0].Since) {
		s.t.Fatalf("Leader's Since %v differs from Inspect's %v", info.Since, entry[0].Since)
	}
	if err := term.Proclaim(s.ctx, "10.0.0.2:8080"); err != nil {
		s.t.Fatalf("Proclaim: %v", err)
	}
	after := s.expectLeader(c, key, "after Proclaim", term, "10.0.0.2:8080")
	if !after.Since.Equal(info.Since) || after.Metadata != info.Metadata {
		s.t.Fatalf("Proclaim moved the term's start or metadata: %+v became %+v", info, after)
	}
	// The same value again is no error and changes nothing.
	if err := term.Proclaim(s.ctx, "10.0.0.2:8080"); err != nil {
		s.t.Fatalf("Proclaim of the same value: %v", err)
	}
	if again := s.expectLeader(c, key, "after Proclaim of the same value", term, "10.0.0.2:8080"); !again.Since.Equal(after.Since) || again.Metadata != after.Metadata {
		s.t.Fatalf("Proclaim of the same value changed the leader's info: %+v became %+v", after, again)
	}
	// An empty value is a value.
	if err := term.Proclaim(s.ctx, ""); err != nil {
		s.t.Fatalf("Proclaim(\"\"): %v", err)
	}
	s.expectLeader(c, key, "after Proclaim of an empty value", term, "")
	s.resign("a", term)
	s.expectNoLeader(c, key, "after Resign")
	s.checkNothingLeft(key)
}

// Proclaim after Resign, or by a term the server has dropped, fails with
// ErrNotHeld (and so does Resign of a dropped term) and never changes the
// value of the leader that came next.
func testElection_proclaimAfterLossFails(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	a := s.elected(s.campaign(s.client(), key, "a"))
	pb := s.campaign(s.client(), key, "b")
	s.resign("a", a)
	b := s.elected(pb)
	err := a.Proclaim(s.ctx, "a again")
	s.expectNotHeld("Proclaim after Resign", key, err)
	if want := `proclaim "` + key + `": dlock: lock not held: leadership resigned`; err.Error() != want {
		s.t.Fatalf("Proclaim after Resign: error reads %q, want %q", err, want)
	}
	s.expectLeader(c, key, "after the resigned leader's Proclaim", b, "b")

	// A term whose entry the server dropped behind its back: the driver's
	// own check, atomic with the write, refuses it, whether or not the
	// lease has noticed yet. Proclaim follows the deletion at once, so
	// that it usually comes before the lease's notice (a driver that
	// writes without checking may pass by chance when it does not: the
	// suite has no false positives, but may miss bugs).
	kd, ok := s.h.(KeyDeleter)
	if !ok {
		s.resign("b", b)
		s.checkNothingLeft(key)
		return
	}
	if err := kd.DeleteKey(s.ctx, key); err != nil {
		s.t.Fatalf("DeleteKey: %v", err)
	}
	s.expectNotHeld("Proclaim of a term the server dropped", key, b.Proclaim(s.ctx, "b again"))
	d := s.elected(s.campaign(s.client(), key, "d"))
	s.expectNotHeld("Proclaim of a term the server dropped, another leader elected", key, b.Proclaim(s.ctx, "b again"))
	s.expectLeader(c, key, "after the dropped leader's Proclaim", d, "d")
	s.waitDone(b.Lease(), "its entry was deleted on the server")
	s.expectNotHeld("Proclaim of a lost term", key, b.Proclaim(s.ctx, "b again"))
	s.expectNotHeld("Resign of a lost term", key, b.Resign(s.ctx))
	s.expectLeader(c, key, "after the lost leader's Proclaim and Resign", d, "d")
	if d.Token() <= b.Token() {
		s.t.Fatalf("token %d after the key was deleted not above %d", d.Token(), b.Token())
	}
	s.resign("d", d)
	s.checkNothingLeft(key)
}

// An election's key refuses the other kinds and they refuse it, without
// changing anything on the server; a free key serves either, its tokens
// still growing.
func testElection_kindMismatch(s *suite) {
	key := s.key()
	a, b := s.client(), s.client()
	s.needElections(a)

	lock := s.held("lock", tryLockOf(a, key))
	pw := s.arrive(a, key, "lock waiter", lockOf(s.client(), key))
	s.refuseKinds(a, key, "a lock", []named{{"Campaign", campaignOf(b, key)}})
	if _, err := b.Election(key).Leader(s.ctx); !errors.Is(err, dlock.ErrKindMismatch) {
		s.t.Fatalf("Leader of a lock's key: err = %v, want ErrKindMismatch", err)
	}
	// For an observer, a key of another kind has no leader (Observe has
	// no error to send); its first state says so.
	s.expectState(s.observe(b, key), key, "first state of a lock's key", nobody)
	s.unlock(lock)
	w := s.granted(pw)
	s.unlock(w)
	s.checkNothingLeft(key)

	leader := s.elected(s.campaign(a, key, "leader"))
	s.tokenAbove("first term after a lock", leader.Lease(), lock, w)
	pc := s.campaign(s.client(), key, "candidate")
	sem, rw := b.Semaphore(key, 1), b.RWMutex(key)
	s.refuseKinds(a, key, "an election", []named{
		{"TryLock", tryLockOf(b, key)},
		{"Semaphore(1).TryAcquire", sem.TryAcquire},
		{"RWMutex.TryRLock", rw.TryRLock},
		{"RWMutex.TryLock", rw.TryLock},
		{"Lock", lockOf(b, key)},
		{"Semaphore(1).Acquire", sem.Acquire},
		{"RWMutex.Lock", rw.Lock},
	})
	if info := s.inspect(a, key); info.Kind != dlock.KindElection || info.Limit != 1 {
		s.t.Fatalf("Inspect of an election: kind %v, limit %d; want election, 1", info.Kind, info.Limit)
	}
	s.resign("leader", leader)
	next := s.elected(pc)
	s.resign("candidate", next)
	s.checkNothingLeft(key)

	l := s.held("lock again", tryLockOf(b, key))
	s.tokenAbove("lock after an election", l, next.Lease())
	s.unlock(l)
	s.checkNothingLeft(key)
}
