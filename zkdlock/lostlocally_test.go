package zkdlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// TestLease_lostLocallySessionSaved_nodeRemoved cuts a Client off for longer
// than its leases last but shorter than its session, and lets it reconnect:
// every lease ends (ErrLeaseLost, the local deadline) while the session
// lives on, and with it the leases' ephemeral nodes. Each of those nodes
// must go once the connection is back, so that another Client is granted
// the key, and so is the same Client's next call; for every kind of node.
// A waiting Lock cancelled during the outage leaves no node either.
func TestLease_lostLocallySessionSaved_nodeRemoved(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	// The server keeps a's session for 10 s while a's leases last testTTL
	// (Options.SessionTimeout may be shorter than the session): an outage
	// between the two loses the leases and not the session.
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: 10 * time.Second})
	a := newClient(t, ctx, conn, opts)
	b := plainClient(t, ctx, srv.Addr(), opts)
	c := plainClient(t, ctx, srv.Addr(), opts)

	election := func(cl *dlock.Client, key string) acquireFunc {
		return func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) {
			t, err := cl.Election(key).Campaign(ctx, "v", opts...)
			if err != nil {
				return nil, err
			}
			return t.Lease(), nil
		}
	}
	cases := []struct {
		key   string
		a, b  func(cl *dlock.Client, key string) acquireFunc // a's call, then the other's that its node would block
		lease *dlock.Lease                                   // a's
		stale []string                                       // a's node
	}{
		{key: "lock", a: lockFunc, b: lockFunc},
		{key: "semaphore", a: semaphoreFunc, b: semaphoreFunc},
		{key: "writer", a: writeFunc, b: readFunc},
		{key: "reader", a: readFunc, b: writeFunc},
		{key: "election", a: election, b: election},
	}
	for i := range cases {
		tc := &cases[i]
		l, err := tc.a(a, tc.key)(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		tc.lease, tc.stale = l, children(t, admin, zkdlock.KeyPathForTest(opts.Root, tc.key))
	}
	// a also waits for a key that c holds, and gives up during the outage.
	const waited = "waited"
	held := mustLock(t, ctx, c, waited)
	holderNode := children(t, admin, zkdlock.KeyPathForTest(opts.Root, waited))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startAcquire(wctx, lockFunc(a, waited))
	waitWaiters(t, ctx, c, waited, 1)

	sid := conn.SessionID()
	proxy.Blackhole()
	cancel()
	for _, tc := range cases {
		waitDone(t, ctx, tc.lease, "its connection was cut off")
		if err := tc.lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Fatalf("%s: Err = %v, want ErrLeaseLost", tc.key, err)
		}
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		t.Fatal("the cancelled Lock never returned (watchdog)")
	}
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("the cancelled Lock: err = %v, want context.Canceled", w.err)
	}
	proxy.Reset() // the connection breaks too: go-zookeeper reconnects
	proxy.Restore()

	// The nodes go once the connection is back, with no Unlock.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var left []string
		for _, tc := range cases {
			for _, n := range children(t, admin, zkdlock.KeyPathForTest(opts.Root, tc.key)) {
				if slices.Contains(tc.stale, n) {
					left = append(left, tc.key+"/"+n)
				}
			}
		}
		if now := children(t, admin, zkdlock.KeyPathForTest(opts.Root, waited)); !slices.Equal(now, holderNode) {
			left = append(left, waited+": "+strings.Join(now, ","))
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("lock nodes of leases lost locally still there after the reconnect (watchdog; a's session saved: %v): %v", conn.SessionID() == sid, left)
		}
	}
	if now := conn.SessionID(); now != sid {
		t.Fatalf("a's session changed from 0x%x to 0x%x: the test needs it saved by the reconnect", sid, now)
	}
	for _, tc := range cases {
		l, err := tc.b(b, tc.key)(ctx)
		if err != nil {
			t.Fatalf("%s: another Client: %v", tc.key, err)
		}
		mustUnlock(t, ctx, l)
		if l, err = tc.a(a, tc.key)(ctx); err != nil {
			t.Fatalf("%s: the same Client again: %v", tc.key, err)
		}
		mustUnlock(t, ctx, l)
		if err := tc.lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Unlock of the lost lease: err = %v, want ErrNotHeld", tc.key, err)
		}
		checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, tc.key))
	}
	mustUnlock(t, ctx, held)
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, waited))
}

// TestLease_lostLocally_nodeWrittenSinceStays: the node of a lease lost
// locally is written by somebody else during the outage (which hands the key
// to the waiter behind, see Release). The Client's delete after the
// reconnect is refused for the version, and the node stays: it is not the
// grant's any more.
func TestLease_lostLocally_nodeWrittenSinceStays(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	hook := &hookConn{Conn: dialZK(t, ctx, proxy.Addr(), connOpts{timeout: 10 * time.Second})}
	a := newClient(t, ctx, hook, opts)
	l := mustLock(t, ctx, a, "k")
	keyPath := zkdlock.KeyPathForTest(opts.Root, "k")
	node := keyPath + "/" + children(t, admin, keyPath)[0]
	tried := releaseSent(hook, node)
	answered := make(chan error, 100)
	got := func(err error) {
		select {
		case answered <- err:
		default:
		}
	}
	afterMulti := func(ops []any, err error) {
		if isRelease(ops, node) {
			got(err)
		}
	}
	afterDelete := func(path string, err error) {
		if path == node {
			got(err)
		}
	}
	hook.afterMulti.Store(&afterMulti)
	hook.afterDelete.Store(&afterDelete)

	proxy.Blackhole()
	waitDone(t, ctx, l, "its connection was cut off")
	select {
	case <-tried:
	case <-ctx.Done():
		t.Fatal("the Client never tried to delete the node of its lost lease (watchdog)")
	}
	if _, err := admin.Set(node, []byte("somebody else"), -1); err != nil {
		t.Fatal(err)
	}
	proxy.Reset()
	proxy.Restore()
	for done := false; !done; {
		select {
		case err := <-answered:
			switch {
			case err == nil:
				t.Fatal("the Client deleted a node written by somebody else")
			case errors.Is(err, zk.ErrBadVersion):
				done = true
			}
		case <-ctx.Done():
			t.Fatal("no answer to the Client's delete after the reconnect (watchdog)")
		}
	}
	if ok, _, err := admin.Exists(node); err != nil || !ok {
		t.Fatalf("the node written by somebody else: exists %v, %v; want it there", ok, err)
	}
	if err := admin.Delete(node, -1); err != nil {
		t.Fatal(err)
	}
}

// isRelease reports whether ops, a multi, releases the lock node at node:
// the release transaction (setData, delete), or, for a lock granted alone
// in its queue, the delete of the node and of the key node. A lock granted
// with nobody behind it releases with a plain delete instead.
func isRelease(ops []any, node string) bool {
	switch op := ops[0].(type) {
	case *zk.SetDataRequest:
		return len(ops) == 2 && op.Path == node
	case *zk.DeleteRequest:
		return len(ops) == 2 && op.Path == node
	}
	return false
}

// releaseSent returns a channel that is closed when hook first sends a
// release of the lock node at node, a multi or a plain delete. It sets
// hook's before-hooks of both.
func releaseSent(hook *hookConn, node string) <-chan struct{} {
	sent := make(chan struct{})
	var once sync.Once
	beforeMulti := func(ops []any) {
		if isRelease(ops, node) {
			once.Do(func() { close(sent) })
		}
	}
	beforeDelete := func(path string) {
		if path == node {
			once.Do(func() { close(sent) })
		}
	}
	hook.beforeMulti.Store(&beforeMulti)
	hook.beforeDelete.Store(&beforeDelete)
	return sent
}

func lockFunc(c *dlock.Client, key string) acquireFunc {
	return func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return c.Lock(ctx, key, opts...) }
}

func semaphoreFunc(c *dlock.Client, key string) acquireFunc { return c.Semaphore(key, 1).Acquire }
func writeFunc(c *dlock.Client, key string) acquireFunc     { return c.RWMutex(key).Lock }
func readFunc(c *dlock.Client, key string) acquireFunc      { return c.RWMutex(key).RLock }

// TestLease_lostLocallyLinkBack_waiterGranted: a holder's link is
// blackholed for longer than its lease and shorter than its session, and
// comes back without the connection breaking (go-zookeeper's own timeout,
// two thirds of the 10 s session, never passes). The lease ends at its
// local deadline; the waiter queued behind it is granted once the link is
// back, without the holder calling Unlock.
func TestLease_lostLocallyLinkBack_waiterGranted(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: 10 * time.Second})
	a := newClient(t, ctx, conn, opts)
	b := plainClient(t, ctx, srv.Addr(), opts)
	l := mustLock(t, ctx, a, "k")
	w := startAcquire(ctx, lockFunc(b, "k"))
	waitWaiters(t, ctx, a, "k", 1)

	sid := conn.SessionID()
	proxy.Blackhole()
	waitDone(t, ctx, l, "its link was blackholed")
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	if w.returned() {
		t.Fatal("the waiter was granted while the holder's node was still there")
	}
	proxy.Restore()
	mustUnlock(t, ctx, w.lease(t, ctx, "the waiter behind a lease lost locally"))
	if now := conn.SessionID(); now != sid {
		t.Fatalf("a's session changed from 0x%x to 0x%x: the test needs it kept", sid, now)
	}
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, "k"))
}
