package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// longSession is the session timeout of the clients that count requests:
// long enough that no lease renewal (every third of it) falls inside a
// counted cycle.
const longSession = 30 * time.Second

// TestLock_uncontendedCycle_threeRequests: acquiring and releasing a free
// key costs three requests — the create (a multi that also returns the
// creation zxid), the listing (which sets the lease's watch), the release
// (a plain delete: nobody was behind the node at its grant) —
// once the Client has seen the key free; the first cycle on a key sets an
// exists watch on its node instead, one request more. The first cycle's
// release deletes the key node (its holder was alone): the second makes it
// again before its create (a createContainer and an exists watch instead
// of the listing, four requests), and keeps it from then on.
func TestLock_uncontendedCycle_threeRequests(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	c := newClient(t, ctx, hook, opts)
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, key string, opts ...dlock.LockOption) (*dlock.Lease, error)
	}{{"Lock", c.Lock}, {"TryLock", c.TryLock}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "free-" + tc.name
			var last uint64
			for i := range 20 {
				before, containers := hook.requests.Load(), hook.containers.Load()
				l, err := tc.call(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if l.Token() <= last {
					t.Fatalf("cycle %d: token %d after %d", i, l.Token(), last)
				}
				last = l.Token()
				info, err := c.Inspect(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if len(info.Holders) == 0 || info.Holders[0].Token != l.Token() {
					t.Fatalf("cycle %d: Inspect shows holder %+v, want token %d (the node's creation zxid)", i, info.Holders, l.Token())
				}
				afterInspect := hook.requests.Load()
				mustUnlock(t, ctx, l)
				n := hook.requests.Load() - afterInspect + (afterInspect - before - int64(1+len(info.Waiters)+1))
				if k := hook.containers.Load() - containers; i == 1 {
					if n != 4 || k != 1 {
						t.Errorf("cycle 1: %d requests, %d of them createContainer, want 4 and 1 (createContainer, create, watch, release)", n, k)
					}
					continue
				}
				// The server reaps the empty key node between cycles now
				// and then (every 100 ms in the tests): the create fails,
				// the key node is created, and the create is sent again.
				n -= 2 * (hook.containers.Load() - containers)
				if i > 0 && n != 3 {
					t.Errorf("cycle %d: %d requests, want 3 (create, list, release)", i, n)
				}
			}
		})
	}
}

// TestLock_newKey_fiveRequests: locking and releasing a key that has no
// key node yet (the common case of many distinct keys) costs five requests
// — the listing that finds no key node, its createContainer, the create,
// the exists watch on our node, the release (which deletes the key node
// too: see TestLock_newKey_releaseDeletesKeyNode) — with no create sent
// before the key node exists.
func TestLock_newKey_fiveRequests(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	c := newClient(t, ctx, hook, opts)
	for i := range 10 {
		before, containers := hook.requests.Load(), hook.containers.Load()
		l := mustLock(t, ctx, c, fmt.Sprintf("new-%d", i))
		mustUnlock(t, ctx, l)
		if n, k := hook.requests.Load()-before, hook.containers.Load()-containers; n != 5 || k != 1 {
			t.Errorf("key %d: %d requests, %d of them createContainer, want 5 and 1 (list, createContainer, create, watch, release)", i, n, k)
		}
	}
}

// TestLock_handOff_noRequestWhenSecond: a waiter that was second in line
// when it queued takes the key, when the holder releases, without sending
// a request; a whole contended grant costs it five requests (create, list,
// watch on its node, watch on its predecessor, release).
func TestLock_handOff_noRequestWhenSecond(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	w := newClient(t, ctx, hook, opts)
	const key = "hand-off"
	for round := range 5 {
		lh := mustLock(t, ctx, holder, key)
		before, getWs := hook.requests.Load(), hook.getWs.Load()
		got := make(chan error, 1)
		var lw *dlock.Lease
		go func() {
			var err error
			lw, err = w.Lock(ctx, key)
			got <- err
		}()
		waitWaiters(t, ctx, holder, key, 1)
		// Wait until the waiter's watch on the holder's node is set (its
		// reply has come back).
		for hook.getWs.Load() == getWs {
			select {
			case err := <-got:
				t.Fatalf("Lock returned while the key was held: %v", err)
			case <-ctx.Done():
				t.Fatal("the waiter never watched (watchdog)")
			default:
			}
			waitWaiters(t, ctx, holder, key, 1) // a round trip, as a pause
		}
		queued := hook.requests.Load()
		mustUnlock(t, ctx, lh)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no hand-off (watchdog)")
		}
		if d := hook.requests.Load() - queued; d != 0 {
			t.Errorf("round %d: the waiter sent %d requests between the release and its grant, want 0", round, d)
		}
		if lw.Token() <= lh.Token() {
			t.Errorf("round %d: token %d after %d", round, lw.Token(), lh.Token())
		}
		mustUnlock(t, ctx, lw)
		if d := hook.requests.Load() - before; d != 5 {
			t.Errorf("round %d: a contended grant cost the waiter %d requests, want 5", round, d)
		}
	}
}

// TestLock_handOff_afterLongWait_noRequest: a waiter that waited longer
// than its session's proof lasts (the leader, or the standalone server, is
// known to have heard from the session too long ago for a lease to start
// from it) renews that proof while it waits, not after the release: it
// takes the key without a request when the holder releases, and its lease
// has at least a third of the session timeout before its deadline, as a
// grant proved on the spot has.
func TestLock_handOff_afterLongWait_noRequest(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: testTTL}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{}), opts)
	const key = "long-wait"
	for _, dep := range []zkdlock.Deployment{zkdlock.Detect, zkdlock.Standalone, zkdlock.Ensemble} {
		t.Run(fmt.Sprint(dep), func(t *testing.T) {
			o := opts
			o.Deployment = dep
			lh := mustLock(t, ctx, holder, key)
			hook, p := queueWatching(t, ctx, srv.Addr(), o, holder, key, 1)
			// The scenario is a long wait: longer than the session timeout,
			// after which any proof the waiter had when it queued is stale.
			select {
			case <-time.After(2 * o.SessionTimeout):
			case <-p.done:
				t.Fatal("Lock returned while the key was held")
			}
			// Release just after the waiter renewed its proof (if it does),
			// so that no renewal is in flight at the release: the count
			// below is then the grant's alone.
			proofs, renewed := hook.proofs.Load(), time.After(o.SessionTimeout)
			for waiting := true; waiting && hook.proofs.Load() == proofs; {
				select {
				case <-renewed:
					waiting = false
				case <-p.done:
					t.Fatal("Lock returned while the key was held")
				default:
					waitWaiters(t, ctx, holder, key, 1) // a round trip, as a pause
				}
			}
			queued := hook.requests.Load()
			mustUnlock(t, ctx, lh)
			lw := p.lease(t, ctx, "the waiter")
			granted := time.Now()
			if d := hook.requests.Load() - queued; d != 0 {
				t.Errorf("the waiter sent %d requests between the release and its grant, want 0", d)
			}
			if left, want := lw.Deadline().Sub(granted), o.SessionTimeout/3; left < want {
				t.Errorf("lease granted with %v before its deadline, want at least %v", left, want)
			}
			mustUnlock(t, ctx, lw)
		})
	}
}

// TestLock_headGoneBeforeWatch_noListing: when the node a waiter found at
// the head of the queue, just ahead of its own, is gone by the time the
// waiter's watch on it arrives (the holder released in between, as a
// contender that has just released and queued again sees when the other
// releases at once), the server's "no node" proves the grant as the
// deletion's notification would: the waiter takes the key with no listing
// after it.
func TestLock_headGoneBeforeWatch_noListing(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	const key = "head-gone"
	var (
		lh         atomic.Pointer[dlock.Lease]
		lists      atomic.Int64 // the waiter's listings when it sets its watch
		watchedFor atomic.Int64 // rounds whose watch came after the release
	)
	lists.Store(-1)
	hook.beforeGetW = func(string) {
		// The waiter's watch on its predecessor, the holder's node:
		// release the key first.
		if l := lh.Swap(nil); l != nil {
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("holder's Unlock: %v", err)
			}
			lists.Store(hook.lists.Load())
			watchedFor.Add(1)
		}
	}
	w := newClient(t, ctx, hook, opts)
	for round := range 3 {
		lh.Store(mustLock(t, ctx, holder, key))
		lw := mustLock(t, ctx, w, key)
		if watchedFor.Load() != int64(round+1) {
			t.Fatalf("round %d: the waiter never watched the holder's node", round)
		}
		if d := hook.lists.Load() - lists.Load(); d != 0 {
			t.Errorf("round %d: the waiter listed the queue %d times after its watch found the head gone, want 0", round, d)
		}
		mustUnlock(t, ctx, lw)
	}
}

// TestLock_manyWaiters_servedInOrder queues 500 waiters on one key (on 8
// Clients) behind a holder, then lets them drain: every one is served,
// in arrival order (the fencing token, the node's creation zxid, goes up
// from grant to grant exactly when the grants follow creation order), and
// no waiter lists the queue more than twice (once when it queues, once at
// most when it is woken).
func TestLock_manyWaiters_servedInOrder(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	holder := plainClient(t, ctx, srv.Addr(), opts)
	const key, n, clients = "long-queue", 500, 8
	path := zkdlock.KeyPathForTest(opts.Root, key)
	lh := mustLock(t, ctx, holder, key)
	hooks := make([]*hookConn, clients)
	cs := make([]*dlock.Client, clients)
	for i := range cs {
		hooks[i] = &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
		cs[i] = newClient(t, ctx, hooks[i], opts)
	}
	w := startWaiters(ctx, key, n, func(i int) *dlock.Client { return cs[i%clients] })
	for len(children(t, admin, path)) != n+1 {
		select {
		case err := <-w.errc:
			t.Fatalf("before the release: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d nodes, want %d (watchdog)", len(children(t, admin, path)), n+1)
		default:
		}
	}
	mustUnlock(t, ctx, lh)
	w.servedInOrder(t, ctx)
	var lists int64
	for _, h := range hooks {
		lists += h.lists.Load()
	}
	if lists > 2*n {
		t.Errorf("%d listings for %d waiters, want at most 2 each", lists, n)
	}
}

// slowLists delays the reply to listings, as a server too busy to answer
// within the session timeout would, while the session stays alive.
type slowLists struct {
	*hookConn
	delay time.Duration
	slow  chan struct{} // one token per listing to delay
	done  atomic.Int32  // delayed listings answered
}

func (s *slowLists) Children(path string) ([]string, *zk.Stat, error) {
	r, st, err := s.hookConn.Children(path)
	select {
	case <-s.slow:
		t := time.NewTimer(s.delay) // the fault: a late reply
		<-t.C
		s.done.Add(1)
	default:
	}
	return r, st, err
}

// TestLock_slowServer_waitsInsteadOfFailing: replies that come later than
// the session timeout, on a session that stays alive, only make a waiting
// Lock slower: it must not fail with ErrUnavailable.
func TestLock_slowServer_waitsInsteadOfFailing(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t)}
	holder := plainClient(t, ctx, srv.Addr(), opts)
	const key = "slow"
	lh := mustLock(t, ctx, holder, key)
	slow := &slowLists{hookConn: &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}, delay: 2 * testTTL, slow: make(chan struct{}, 2)}
	c := newClient(t, ctx, slow, opts)
	slow.slow <- struct{}{}
	slow.slow <- struct{}{}
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitWaiters(t, ctx, holder, key, 1)
	// Release only once the waiter's listing has been answered, late (a
	// Lock that gives up on a slow answer tries again, and meets the
	// second slow listing).
	for slow.done.Load() < 1 {
		select {
		case err := <-got:
			t.Fatalf("Lock returned while the key was held: %v", err)
		case <-ctx.Done():
			t.Fatal("watchdog")
		default:
		}
		waitWaiters(t, ctx, holder, key, 1) // a round trip, as a pause
	}
	mustUnlock(t, ctx, lh)
	select {
	case err := <-got:
		if errors.Is(err, dlock.ErrUnavailable) || err != nil {
			t.Fatalf("Lock on a slow server: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no grant (watchdog)")
	}
}

// TestModes_requestsPerGrant_flat: the server requests a grant costs, for
// a semaphore of 2 permits and for a read-write lock with one writer in
// four, with 4 and with 24 waiters queued behind the holders and served in
// turn, do not grow with the queue: every waiter watches one node (or, the
// first limit waiters of a semaphore, the limit holders), so a release
// costs a constant number of requests, whoever waits.
func TestModes_requestsPerGrant_flat(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	insp := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	for _, tc := range []struct {
		name string
		hold func(c *dlock.Client, key string) (*dlock.Lease, error)
		held int
		call func(c *dlock.Client, key string, i int) acquireFunc
		// bound on the requests per grant: see the comment at the check
		bound float64
	}{
		{"semaphore", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.Semaphore(key, 2).Acquire(ctx) }, 2,
			func(c *dlock.Client, key string, _ int) acquireFunc { return c.Semaphore(key, 2).Acquire }, 10},
		{"rwmutex", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.RWMutex(key).Lock(ctx) }, 1,
			func(c *dlock.Client, key string, i int) acquireFunc {
				if i%4 == 3 {
					return c.RWMutex(key).Lock
				}
				return c.RWMutex(key).RLock
			}, 7},
	} {
		per := map[int]float64{}
		for _, n := range []int{4, 24} {
			key := fmt.Sprintf("%s-%d", tc.name, n)
			var held []*dlock.Lease
			for range tc.held {
				l, err := tc.hold(insp, key)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			hooks := make([]*hookConn, 4)
			cs := make([]*dlock.Client, len(hooks))
			for i := range hooks {
				hooks[i] = &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
				cs[i] = newClient(t, ctx, hooks[i], opts)
			}
			var base int64 // New's own requests
			for _, h := range hooks {
				base += h.requests.Load()
			}
			errc := make(chan error, n)
			for i := range n {
				f := tc.call(cs[i%len(cs)], key, i)
				go func() {
					l, err := f(ctx)
					if err == nil {
						err = l.Unlock(ctx)
					}
					errc <- err
				}()
				waitWaiters(t, ctx, insp, key, i+1)
			}
			for _, l := range held {
				mustUnlock(t, ctx, l)
			}
			for range n {
				select {
				case err := <-errc:
					if err != nil {
						t.Fatal(err)
					}
				case <-ctx.Done():
					t.Fatalf("%s: not every waiter was served (watchdog)", key)
				}
			}
			requests := -base
			for _, h := range hooks {
				requests += h.requests.Load()
			}
			per[n] = float64(requests) / float64(n)
			t.Logf("%s, %d waiters: %.2f requests per grant", tc.name, n, per[n])
		}
		// A semaphore's waiter: pre-listing, create, a watch on each of
		// the limit+1 entries nearest ahead and on its own node, at the
		// first of them to go a read of each other entry it kept (most
		// are gone by then; a listing when it keeps more than 2·limit+1),
		// a watch on each new holder while it waits, the release. Served
		// in turn, a waiter's listing often shows it granted or among
		// the first limit at once: 7.5–8.2 measured, 10 with a margin
		// (6.2–6.3 when a grant wrote a notice, a durable write, which
		// these reads replace). A reader: pre-listing, create, the
		// watches on its node and on the writer ahead, the release: 5;
		// a writer, behind readers, one listing more per reader release
		// that wakes it: 7 on average is generous for one writer in four.
		for n, p := range per {
			if p > tc.bound {
				t.Errorf("%s, %d waiters: %.2f requests per grant, want at most %v", tc.name, n, p, tc.bound)
			}
		}
	}
}
