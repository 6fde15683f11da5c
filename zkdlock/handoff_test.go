package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// pendingLock is a Lock call running in the background.
type pendingLock struct {
	done chan struct{} // closed when Lock has returned
	l    *dlock.Lease
	err  error
	at   time.Time // when Lock returned
}

func startLock(ctx context.Context, c *dlock.Client, key string) *pendingLock {
	p := &pendingLock{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.l, p.err = c.Lock(ctx, key)
		p.at = time.Now()
	}()
	return p
}

// lease waits for the Lock call and returns its lease, failing the test if
// it failed or at the watchdog.
func (p *pendingLock) lease(t *testing.T, ctx context.Context, what string) *dlock.Lease {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("%s: Lock never returned (watchdog)", what)
	}
	if p.err != nil {
		t.Fatalf("%s: %v", what, p.err)
	}
	return p.l
}

// awaitOrFail waits until cond holds, with pause (a round trip) between
// checks; it fails the test if early is closed first (a Lock returned: the
// key was taken when it must not be) or at the watchdog.
func awaitOrFail(t *testing.T, ctx context.Context, what string, cond func() bool, pause func(), early <-chan struct{}) {
	t.Helper()
	for !cond() {
		select {
		case <-early:
			t.Fatalf("a Lock returned before %s", what)
		case <-ctx.Done():
			t.Fatalf("%s: never (watchdog)", what)
		default:
		}
		pause()
	}
}

// queueWatching starts a Lock on key on a Client of its own, whose
// requests hook counts, and waits until it has set its watch on its
// predecessor (waiters is the number Inspect then shows).
func queueWatching(t *testing.T, ctx context.Context, addr string, opts zkdlock.Options, holder *dlock.Client, key string, waiters int) (*hookConn, *pendingLock) {
	t.Helper()
	hook := &hookConn{Conn: dialZK(t, ctx, addr, connOpts{timeout: opts.SessionTimeout})}
	p := startLock(ctx, newClient(t, ctx, hook, opts), key)
	awaitOrFail(t, ctx, "the waiter watches its predecessor", func() bool { return hook.getWs.Load() == 1 },
		func() { waitWaiters(t, ctx, holder, key, waiters) }, p.done)
	return hook, p
}

// headNode returns the path of the first lock node of the key node path.
func headNode(t *testing.T, admin *zk.Conn, path string) string {
	t.Helper()
	names := children(t, admin, path)
	if len(names) == 0 {
		t.Fatalf("no lock node under %s", path)
	}
	seq := func(name string) int {
		n, _ := strconv.Atoi(name[strings.LastIndex(name, "-")+1:])
		return n
	}
	slices.SortFunc(names, func(a, b string) int { return seq(a) - seq(b) })
	return path + "/" + names[0]
}

// TestLock_handOff_eightWaiters_fiveRequestsEach: eight waiters, each on a
// session of its own, queue behind a holder and then pass the key down the
// line, each releasing as soon as it is granted. Every one is woken by the
// release of the one before and takes the key without a request (the
// notification is a data change, which only a release makes, so nothing is
// left before it, however far back it queued), and its whole grant costs
// five requests: create, list ‖ watch its node, watch its predecessor,
// release.
func TestLock_handOff_eightWaiters_fiveRequestsEach(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	const key, n = "hand-off-8", 8
	lh := mustLock(t, ctx, holder, key)
	type result struct {
		i, order       int64
		atGrant, total int64
		err            error
	}
	var grants atomic.Int64
	results := make(chan result, n)
	failed := make(chan struct{})
	var failOnce sync.Once
	hooks := make([]*hookConn, n)
	for i := range hooks {
		hooks[i] = &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
		c := newClient(t, ctx, hooks[i], opts)
		start := hooks[i].requests.Load() // New's requests do not count
		go func() {
			l, err := c.Lock(ctx, key)
			if err != nil {
				failOnce.Do(func() { close(failed) })
				results <- result{i: int64(i), err: err}
				return
			}
			r := result{i: int64(i), order: grants.Add(1) - 1, atGrant: hooks[i].requests.Load()}
			r.err = l.Unlock(ctx)
			r.total = hooks[i].requests.Load() - start
			results <- r
		}()
		waitWaiters(t, ctx, holder, key, i+1) // arrival order: one at a time
	}
	pause := func() { waitWaiters(t, ctx, holder, key, n) }
	for i, h := range hooks {
		awaitOrFail(t, ctx, fmt.Sprintf("waiter %d watches its predecessor", i), func() bool { return h.getWs.Load() == 1 }, pause, failed)
	}
	queued := make([]int64, n)
	for i, h := range hooks {
		queued[i] = h.requests.Load()
	}
	mustUnlock(t, ctx, lh)
	for range n {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatal("the key did not go down the line (watchdog)")
		}
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		if r.order != r.i {
			t.Errorf("waiter %d was granted %dth, want arrival order", r.i, r.order)
		}
		if d := r.atGrant - queued[r.i]; d != 0 {
			t.Errorf("waiter %d sent %d requests between its predecessor's release and its grant, want 0", r.i, d)
		}
		if r.total != 5 {
			t.Errorf("waiter %d: a contended grant cost %d requests, want 5", r.i, r.total)
		}
	}
}

// TestLock_waiterAheadLeaves_relistsAndWaits is the negative case of the
// hand-off without a request: the node just before a waiter is another
// waiter, which gives up (its ctx ends) and deletes its node. That deletion
// says nothing about the nodes before it: the waiter must list the queue
// again, find the holder still there, watch it, and keep waiting. Taking
// the key on any notification of its predecessor would hand it out twice.
func TestLock_waiterAheadLeaves_relistsAndWaits(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	const key = "waiter-ahead-leaves"
	lh := mustLock(t, ctx, holder, key)
	qctx, quit := context.WithCancel(ctx)
	defer quit()
	_, quitter := queueWatching(t, qctx, srv.Addr(), opts, holder, key, 1)
	hook, w := queueWatching(t, ctx, srv.Addr(), opts, holder, key, 2)
	lists := hook.lists.Load()

	quit()
	<-quitter.done
	if !errors.Is(quitter.err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v (lease %v), want context.Canceled", quitter.err, quitter.l)
	}
	// Its node is gone now that its Lock has returned: the waiter behind
	// it has been (or is being) notified of the deletion.
	awaitOrFail(t, ctx, "the waiter watches the holder", func() bool { return hook.getWs.Load() == 2 },
		func() { waitWaiters(t, ctx, holder, key, 1) }, w.done)
	if d := hook.lists.Load() - lists; d != 1 {
		t.Errorf("the waiter listed the queue %d times after the one ahead left, want 1", d)
	}
	select {
	case <-lh.Done():
		t.Fatalf("the holder lost its lease: %v", lh.Err())
	default:
	}
	info, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) == 0 || info.Holders[0].Token != lh.Token() || len(info.Waiters) != 1 {
		t.Fatalf("Inspect: holder %+v and %d waiters, want the holder (token %d) and one waiter", info.Holders, len(info.Waiters), lh.Token())
	}
	before := hook.requests.Load()
	mustUnlock(t, ctx, lh)
	lw := w.lease(t, ctx, "the waiter after the release")
	if d := hook.requests.Load() - before; d != 0 {
		t.Errorf("the waiter sent %d requests between the release and its grant, want 0", d)
	}
	if lw.Token() <= lh.Token() {
		t.Errorf("token %d after %d", lw.Token(), lh.Token())
	}
	mustUnlock(t, ctx, lw)
}

// TestLease_lockNodeWritten_lost: a write to a lock node is how a release
// tells the waiter behind it that the key is its own. So a write by
// anybody else (an operator's `set`) hands the key on too, and the holder
// must be told at once, as when its node is deleted: its lease is lost.
func TestLease_lockNodeWritten_lost(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	const key = "written"
	lh := mustLock(t, ctx, holder, key)
	_, w := queueWatching(t, ctx, srv.Addr(), opts, holder, key, 1)
	if _, err := admin.Set(headNode(t, admin, zkdlock.KeyPathForTest(opts.Root, key)), []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	waitDone(t, ctx, lh, "its node was written")
	if !errors.Is(lh.Err(), dlock.ErrLeaseLost) {
		t.Errorf("holder's Err = %v, want ErrLeaseLost", lh.Err())
	}
	if err := w.lease(t, ctx, "the waiter behind the written node").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRelease_withoutWritePermission_deletes: when the lock node's ACL
// (Options.ACL) does not let its owner write to it, the release's multi
// fails as a whole, and a plain delete releases the key; the waiter behind,
// which listed the holder behind another node, lists once more and takes
// the key.
func TestRelease_withoutWritePermission_deletes(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	const key = "no-write"
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession, ACL: zk.WorldACL(zk.PermAll &^ zk.PermWrite)}
	first := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	// The key node lets everybody write to it (the create's multi sets its
	// data); the lock nodes do not.
	if _, err := admin.Create(zkdlock.KeyPathForTest(opts.Root, key), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// The holder is granted by a hand-off, with a waiter queued behind it
	// already: its release is the multi, which the waiter needs.
	l0 := mustLock(t, ctx, first, key)
	hh, h := queueWatching(t, ctx, srv.Addr(), opts, first, key, 1)
	hook, w := queueWatching(t, ctx, srv.Addr(), opts, first, key, 2)
	mustUnlock(t, ctx, l0)
	lh := h.lease(t, ctx, "the holder after the first release")
	before, hb := hook.requests.Load(), hh.requests.Load()
	if err := lh.Unlock(ctx); err != nil {
		t.Fatalf("Unlock without write permission: %v", err)
	}
	if d := hh.requests.Load() - hb; d != 2 {
		t.Errorf("the release took %d requests, want 2 (the refused multi, the delete)", d)
	}
	lw := w.lease(t, ctx, "the waiter after the release")
	if d := hook.requests.Load() - before; d != 1 {
		t.Errorf("the waiter sent %d requests between the release and its grant, want 1 (a listing)", d)
	}
	mustUnlock(t, ctx, lw)
}

// TestRelease_grantedAlone_plainDelete: a lock granted with nobody behind
// it in its listing releases with a plain delete, and the waiter that
// queued behind it after the grant, which listed it at the head, takes the
// key without a request. Granted alone in a new key, the release tries the
// key node's delete with its node's first, which the waiter refuses (not
// empty): two requests, once per key and Client (see keyHint.keep).
func TestRelease_grantedAlone_plainDelete(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	hh := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	holder := newClient(t, ctx, hh, opts)
	const key = "alone"
	lh := mustLock(t, ctx, holder, key)
	hook, w := queueWatching(t, ctx, srv.Addr(), opts, holder, key, 1)
	before, hb, hd := hook.requests.Load(), hh.requests.Load(), hh.deletes.Load()
	mustUnlock(t, ctx, lh)
	if d, dd := hh.requests.Load()-hb, hh.deletes.Load()-hd; d != 2 || dd != 1 {
		t.Errorf("the release took %d requests, %d of them plain deletes, want 2: the refused multi, the delete", d, dd)
	}
	lw := w.lease(t, ctx, "the waiter after the release")
	if d := hook.requests.Load() - before; d != 0 {
		t.Errorf("the waiter sent %d requests between the release and its grant, want 0", d)
	}
	if lw.Token() <= lh.Token() {
		t.Errorf("token %d after %d", lw.Token(), lh.Token())
	}
	// The waiter was granted by a hand-off: its own release is the multi.
	hd = hook.deletes.Load()
	mustUnlock(t, ctx, lw)
	if d := hook.deletes.Load() - hd; d != 0 {
		t.Errorf("a hand-off's release sent %d plain deletes, want the multi", d)
	}
}

// TestLock_waiterReconnects_noFalseRelease: go-zookeeper sets a waiter's
// watches again when it reconnects, with the last zxid it saw; the server
// then reports a data change only for a node written since, and a deletion
// for a node that is gone. So a reconnect while the predecessor waits must
// not look like a release, and a release missed while cut off (the
// notification lost with the connection) comes back as a deletion, which
// makes the waiter list again rather than trust it.
func TestLock_waiterReconnects_noFalseRelease(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
	const key = "reconnect"
	lh := mustLock(t, ctx, holder, key)
	_, a := queueWatching(t, ctx, srv.Addr(), opts, holder, key, 1)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	sniff := &sessionSniffer{}
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: longSession, dialer: sniff.dial})
	hook := &hookConn{Conn: conn}
	b := startLock(ctx, newClient(t, ctx, hook, opts), key)
	pause := func() { waitWaiters(t, ctx, holder, key, 2) }
	awaitOrFail(t, ctx, "the waiter behind watches the one ahead", func() bool { return hook.getWs.Load() == 1 }, pause, b.done)

	// A reconnect while the one ahead still waits.
	dials := sniff.dials.Load()
	proxy.Reset()
	awaitOrFail(t, ctx, "the waiter reconnects", func() bool { return sniff.dials.Load() > dials && conn.State() == zk.StateHasSession }, pause, b.done)
	if _, err := conn.Sync("/"); err != nil {
		t.Fatal(err)
	}

	// The one ahead takes the key and releases it while the waiter is cut
	// off; the notification is lost with the connection.
	proxy.Blackhole()
	mustUnlock(t, ctx, lh)
	la := a.lease(t, ctx, "the first waiter")
	lists := hook.lists.Load()
	releasing := time.Now()
	mustUnlock(t, ctx, la)
	proxy.Reset()
	proxy.Restore()
	lb := b.lease(t, ctx, "the waiter that was cut off")
	if !b.at.After(releasing) {
		t.Errorf("the waiter was granted at %v, before the one ahead released at %v", b.at, releasing)
	}
	if d := hook.lists.Load() - lists; d != 1 {
		t.Errorf("the waiter listed the queue %d times after its reconnect, want 1 (a deletion is no proof of a release)", d)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}
	mustUnlock(t, ctx, lb)
}
