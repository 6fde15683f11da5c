package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// sharedServer returns the shared ZooKeeper server, an admin connection to
// it for inspection, and options with a root of the test's own.
func sharedServer(t *testing.T, ctx context.Context) (*testserver.ZooKeeper, *zk.Conn, zkdlock.Options) {
	t.Helper()
	srv := testserver.SharedZooKeeper(t)
	return srv, dialZK(t, ctx, srv.Addr(), connOpts{}), zkdlock.Options{Root: testRoot(t)}
}

// herdWaiter is one waiter of TestLock_release_wakesOnlyTheNextWaiter, on a
// session of its own.
type herdWaiter struct {
	name   string
	conn   *zk.Conn
	hook   *hookConn
	events atomic.Int64 // node events (watch notifications) its session received
}

type granted struct {
	i int
	l *dlock.Lease
}

// TestLock_release_wakesOnlyTheNextWaiter queues 20 waiters, each on its own
// session, and releases the key 20 times. Each release must wake exactly one
// waiter, the next in arrival order: one watch notification reaches one
// session, which takes the key without a request, and no other waiter lists
// the queue again (no herd).
func TestLock_release_wakesOnlyTheNextWaiter(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	// A long session: a waiter granted more than a third of the session
	// timeout after its Client's last answered request renews that proof
	// with an exists first (see grantFrom), and queueing 20 waiters one by
	// one can take that long under -race.
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	const key, n = "herd", 20
	lh := mustLock(t, ctx, holder, key)

	ws := make([]*herdWaiter, n)
	got := make(chan granted, n)
	errc := make(chan error, n)
	for i := range ws {
		w := &herdWaiter{name: fmt.Sprintf("w%02d", i)}
		w.conn = dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession, onEvent: func(ev zk.Event) {
			// Runs in go-zookeeper's receive loop, before the event
			// reaches the watcher and before any later reply is read.
			switch ev.Type {
			case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
				w.events.Add(1)
			}
		}})
		w.hook = &hookConn{Conn: w.conn}
		c := newClient(t, ctx, w.hook, opts)
		ws[i] = w
		go func() {
			l, err := c.Lock(ctx, key, dlock.WithMetadata(dlock.Metadata{Note: w.name}))
			if err != nil {
				errc <- fmt.Errorf("%s: %w", w.name, err)
				return
			}
			got <- granted{i, l}
		}()
		// Arrival order is the order the server saw: wait for this one
		// before starting the next.
		waitWaiters(t, ctx, holder, key, i+1)
	}
	// Wait until every waiter has set its watch on its predecessor.
	for _, w := range ws {
		for w.hook.getWs.Load() == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("%s never set its watch (watchdog)", w.name)
			case err := <-errc:
				t.Fatal(err)
			default:
			}
			waitWaiters(t, ctx, holder, key, n) // a round trip, as a pause
		}
	}

	prev := lh
	for i := range ws {
		events := make([]int64, n)
		lists := make([]int64, n)
		requests := make([]int64, n)
		for j, w := range ws {
			events[j], lists[j], requests[j] = w.events.Load(), w.hook.lists.Load(), w.hook.requests.Load()
		}
		if err := prev.Unlock(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		var g granted
		select {
		case g = <-got:
		case err := <-errc:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("release %d woke nobody (watchdog)", i)
		}
		if g.i != i {
			t.Fatalf("release %d granted the key to %s, want %s (arrival order)", i, ws[g.i].name, ws[i].name)
		}
		// A round trip on every other waiter's session: ZooKeeper sends
		// a session its watch notifications before the replies to its
		// later requests, so any notification the release caused has
		// been counted once this returns.
		for _, w := range ws[i+1:] {
			if _, err := w.conn.Sync("/"); err != nil {
				t.Fatal(err)
			}
		}
		if d := ws[i].events.Load() - events[i]; d != 1 {
			t.Errorf("release %d: the next waiter %s got %d watch notifications, want 1", i, ws[i].name, d)
		}
		// Taking the key costs the next waiter no request at all: the
		// notification is of a release (a data change: only a releasing
		// holder writes to a lock node), so its node is first now (and
		// its own node's watch, set when it queued, has not fired).
		dr, dl := ws[i].hook.requests.Load()-requests[i], ws[i].hook.lists.Load()-lists[i]
		if dr != 0 {
			t.Errorf("release %d: %s sent %d requests (%d listings) to take the key, want none", i, ws[i].name, dr, dl)
		}
		for j := i + 1; j < n; j++ {
			w := ws[j]
			if d := w.events.Load() - events[j]; d != 0 {
				t.Errorf("release %d woke %s too: %d watch notifications", i, w.name, d)
			}
			if d := w.hook.lists.Load() - lists[j]; d != 0 {
				t.Errorf("release %d: %s listed the queue %d times (herd)", i, w.name, d)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		prev = g.l
	}
	mustUnlock(t, ctx, prev)
}

// TestAcquire_lostCreateReply_findsOwnNode: the create succeeds on the
// server but its reply is lost. The retry must recognise the node by its
// owner and use it; a second node, or an orphan left behind, would block
// the key until the session ends.
func TestAcquire_lostCreateReply_findsOwnNode(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	other := plainClient(t, ctx, srv.Addr(), opts)
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
	c := newClient(t, ctx, hook, opts)

	for _, tc := range []struct {
		name string
		call func(ctx context.Context, key string, opts ...dlock.LockOption) (*dlock.Lease, error)
		held bool // somebody holds the key, so the call queues first
	}{
		{"Lock/free", c.Lock, false},
		{"TryLock/free", c.TryLock, false},
		{"Lock/queued", c.Lock, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "lost-reply-" + strings.ReplaceAll(tc.name, "/", "-")
			path := zkdlock.KeyPathForTest(opts.Root, key)
			var lo *dlock.Lease
			if tc.held {
				var err error
				if lo, err = other.Lock(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			creates := hook.creates.Load()
			hook.dropCreateReplies.Store(1)
			type res struct {
				l   *dlock.Lease
				err error
			}
			done := make(chan res, 1)
			go func() {
				l, err := tc.call(ctx, key)
				done <- res{l, err}
			}()
			if tc.held {
				info := waitWaiters(t, ctx, other, key, 1)
				if len(children(t, admin, path)) != 2 {
					t.Fatalf("queue %v: want the holder and one waiter", children(t, admin, path))
				}
				_ = info
				mustUnlock(t, ctx, lo)
			}
			var r res
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("no grant (watchdog)")
			}
			if r.err != nil {
				t.Fatalf("after a lost create reply: %v", r.err)
			}
			if n := hook.creates.Load() - creates; n != 1 {
				t.Errorf("%d creates, want 1: the retry did not recognise its node", n)
			}
			if names := children(t, admin, path); len(names) != 1 {
				t.Errorf("nodes %v, want only the holder's", names)
			}
			if err := r.l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// Nothing stays behind to block the next client.
			l2, err := other.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("TryLock after the unlock: %v", err)
			}
			mustUnlock(t, ctx, l2)
			checkNothingLeft(t, admin, path)
		})
	}
}

// TestLock_cancelDuringUnansweredCreate_leavesNothing: a waiter's create
// reaches the server and its reply never comes (the connection hangs); the
// caller gives up. Lock must return, remove the node the server did create,
// and not be fooled when the create's reply finally arrives.
func TestLock_cancelDuringUnansweredCreate_leavesNothing(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	holder := plainClient(t, ctx, srv.Addr(), opts)
	const key = "hung-create"
	path := zkdlock.KeyPathForTest(opts.Root, key)
	lh := mustLock(t, ctx, holder, key)

	created := make(chan string, 1)
	reply := make(chan struct{})
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
	hook.onCreate = func(p string, err error) {
		if strings.HasPrefix(p, path+"/") {
			created <- p
			<-reply // the reply is late
		}
	}
	c := newClient(t, ctx, hook, opts)
	lctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(lctx, key)
		errc <- err
	}()
	var node string
	select {
	case node = <-created:
	case <-ctx.Done():
		t.Fatal("no create (watchdog)")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: err = %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("Lock did not return after cancel while its create hung (watchdog)")
	}
	if names := children(t, admin, path); len(names) != 1 {
		t.Fatalf("after the cancelled Lock returned: nodes %v (created %s), want only the holder's", names, node)
	}
	close(reply) // the create's reply arrives after all
	mustUnlock(t, ctx, lh)
	l, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v (an orphan blocks the key?)", err)
	}
	mustUnlock(t, ctx, l)
	if err := c.Close(); err != nil { // waits for the janitor
		t.Fatal(err)
	}
	checkNothingLeft(t, admin, path)
}

// TestLock_predecessorGoneBeforeWatch_rechecks: the predecessor is deleted
// between the listing and the watch. The watch is then refused (no node), and
// the waiter must not wait for a notification that will never come: the
// predecessor was the head of its listing, so its absence grants the key
// (TestLock_headGoneBeforeWatch_noListing counts the requests).
func TestLock_predecessorGoneBeforeWatch_rechecks(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	holder := plainClient(t, ctx, srv.Addr(), opts)
	const key = "vanishing-predecessor"
	lh := mustLock(t, ctx, holder, key)
	var events atomic.Int64
	conn := dialZK(t, ctx, srv.Addr(), connOpts{onEvent: func(ev zk.Event) {
		if ev.Type == zk.EventNodeDeleted {
			events.Add(1)
		}
	}})
	hook := &hookConn{Conn: conn}
	var fired atomic.Bool
	hook.beforeGetW = func(path string) {
		// The first watch the waiter sets is on its predecessor, the
		// holder's node: delete it right now.
		if fired.CompareAndSwap(false, true) {
			if err := admin.Delete(path, -1); err != nil {
				t.Errorf("delete %s: %v", path, err)
			}
		}
	}
	c := newClient(t, ctx, hook, opts)
	l := mustLock(t, ctx, c, key)
	if !fired.Load() {
		t.Fatal("the waiter never watched its predecessor")
	}
	if n := events.Load(); n != 0 {
		t.Errorf("the waiter got %d deletion notifications, want 0 (its watch was never set)", n)
	}
	waitDone(t, ctx, lh, "its node was deleted")
	if !errors.Is(lh.Err(), dlock.ErrLeaseLost) {
		t.Errorf("holder's Err = %v, want ErrLeaseLost", lh.Err())
	}
	mustUnlock(t, ctx, l)
}

// TestToken_increasesAcrossKeyNodeRemoval: when the key node is removed (the
// server reaps the empty container, or an operator deletes it) sequence
// numbers start again from zero. The fencing token, the lock node's creation
// zxid, still goes up.
func TestToken_increasesAcrossKeyNodeRemoval(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	c := plainClient(t, ctx, srv.Addr(), opts)
	const key = "token"
	path := zkdlock.KeyPathForTest(opts.Root, key)

	seqOf := func() int64 {
		names := children(t, admin, path)
		if len(names) != 1 {
			t.Fatalf("nodes %v, want one", names)
		}
		n, err := strconv.ParseInt(names[0][len(names[0])-10:], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var lastToken uint64
	for round := range 3 {
		// Several grants, so that the sequence moves on (unless the
		// server reaps the empty key node between two of them, which
		// only restarts it sooner)...
		for i := range 3 {
			l := mustLock(t, ctx, c, key)
			if l.Token() <= lastToken {
				t.Fatalf("round %d: token %d after %d, want strictly increasing", round, l.Token(), lastToken)
			}
			lastToken = l.Token()
			if seq := seqOf(); i == 0 && seq != 0 {
				t.Fatalf("round %d: sequence %d after the key node was removed, want 0", round, seq)
			}
			mustUnlock(t, ctx, l)
		}
		// ...then the key node goes, and with it the sequence counter.
		if err := admin.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
	}
}

// TestKeyNode_isContainer_reapedWhenEmpty: key nodes do not pile up. Once its
// last lock node is gone, the server deletes the key node by itself.
func TestKeyNode_isContainer_reapedWhenEmpty(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	c := plainClient(t, ctx, srv.Addr(), opts)
	keys := []string{"a", "b/c", "ключ"}
	for _, k := range keys {
		l := mustLock(t, ctx, c, k)
		mustUnlock(t, ctx, l)
	}
	for {
		names, _, ch, err := admin.ChildrenW(opts.Root)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("key nodes %v still there (watchdog)", names)
		}
	}
}
