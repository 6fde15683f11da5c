package dlocktest

import (
	"context"
	"slices"
	"testing"

	"github.com/dlockdev/dlock"
)

// Scenarios of Client.Watch, and so of the backend's driver.Observer: a
// notice after every change of a key's queue, holders and waiters alike.

// ObserverLimiter is implemented by harnesses whose backend's Watch
// (driver.Observer) is not told of every change to a key's queue, as the
// backend documents; the scenarios skip what it is not told of. A harness
// that does not implement it is held to every change.
type ObserverLimiter interface {
	// Observes reports whether a Watch of a key of kind is told of grants
	// and releases (holders), and of waiters joining and leaving the queue
	// (waiters).
	Observes(kind dlock.Kind) (holders, waiters bool)
}

// observes returns what the backend's Watch is told of on a key of kind.
func (s *suite) observes(kind dlock.Kind) (holders, waiters bool) {
	if l, ok := s.h.(ObserverLimiter); ok {
		return l.Observes(kind)
	}
	return true, true
}

// A watcher sees each change of the queue in turn: the grant of a free key,
// a waiter joining, another joining and leaving (its wait cancelled), the
// release that grants the first waiter, the last release. Each step waits
// for the watcher to see it before the next: a backend that sends no notice
// of one leaves the watcher on the state before, until the watchdog.
func testWatch_noticeAfterGrantJoinRelease(s *suite) {
	for _, kind := range []dlock.Kind{dlock.KindLock, dlock.KindElection} {
		s.t.Run(kind.String(), func(t *testing.T) {
			s := &suite{t: t, h: s.h, ctx: s.ctx}
			holders, waiters := s.observes(kind)
			if !holders {
				t.Skipf("the backend's Watch is not told of the holders of a key of kind %s", kind)
			}
			s.watchQueue(kind, waiters)
		})
	}
}

func (s *suite) watchQueue(kind dlock.Kind, waiters bool) {
	key := s.key()
	c := s.client()
	s.inspect(c, key) // skips if the backend cannot inspect
	if kind == dlock.KindElection {
		s.needElections(c)
	}
	take := func(c *dlock.Client, name string) acquirer {
		if kind == dlock.KindElection {
			return func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
				term, err := c.Election(key).Campaign(ctx, name, opts...)
				if err != nil {
					return nil, err
				}
				return term.Lease(), nil
			}
		}
		return lockOf(c, key)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	w := s.client().Watch(ctx, key)
	select {
	case _, ok := <-w:
		if !ok {
			s.t.Skip("backend cannot watch a key (Watch closed its channel at once)")
		}
	case <-s.ctx.Done():
		s.t.Fatal("Watch sent no first state (watchdog)")
	}

	ca, cb, cq := s.client(), s.client(), s.client()
	a := s.granted(s.arrive(ca, key, "a", take(ca, "a")))
	s.expectWatched(w, key, "a granted", []string{"a"}, nil)
	pb := s.arrive(cb, key, "b", take(cb, "b"))
	if waiters {
		s.expectWatched(w, key, "b joined", []string{"a"}, []string{"b"})
		qctx, quit := context.WithCancel(s.ctx)
		pq := s.arriveCtx(qctx, cq, key, "q", take(cq, "q"))
		s.expectWatched(w, key, "q joined", []string{"a"}, []string{"b", "q"})
		quit()
		s.failed(pq)
		s.expectWatched(w, key, "q left", []string{"a"}, []string{"b"})
	}
	s.unlock(a)
	b := s.granted(pb)
	s.expectWatched(w, key, "a released, b granted", []string{"b"}, nil)
	s.unlock(b)
	s.expectWatched(w, key, "b released", nil, nil)

	cancel()
	for range 2 { // at most one state may have been sent before the cancel took
		select {
		case _, ok := <-w:
			if !ok {
				return
			}
		case <-s.ctx.Done():
			s.t.Fatal("Watch's channel not closed after its context ended (watchdog)")
		}
	}
	s.t.Fatal("Watch's channel still sends after its context ended")
}

// expectWatched waits until w sends a state of key whose holders and
// waiters have these notes, in order, failing the test at the watchdog or
// if w is closed first. States in between are allowed (a backend may show
// a hand-over in two changes), but each must differ from the one before.
func (s *suite) expectWatched(w <-chan *dlock.LockInfo, key, when string, holders, waiters []string) {
	s.t.Helper()
	var last *dlock.LockInfo
	for {
		select {
		case info, ok := <-w:
			if !ok {
				s.t.Fatalf("%s: Watch's channel closed", when)
			}
			if info.Key != key {
				s.t.Fatalf("%s: Watch sent a state of key %q, want %q", when, info.Key, key)
			}
			h, wt := notes(info.Holders), notes(info.Waiters)
			if last != nil && diffInfo(last, info) == "" {
				s.t.Fatalf("%s: Watch sent the same state twice: %v", when, info)
			}
			if slices.Equal(h, holders) && slices.Equal(wt, waiters) {
				return
			}
			s.t.Logf("%s: watched holders %q, waiters %q on the way", when, h, wt)
			last = info
		case <-s.ctx.Done():
			s.t.Fatalf("%s: Watch sent no state with holders %q and waiters %q (watchdog)", when, holders, waiters)
		}
	}
}
