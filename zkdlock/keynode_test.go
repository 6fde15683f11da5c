package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// keyNodeExists reports whether key's node exists under root.
func keyNodeExists(t *testing.T, conn *zk.Conn, root, key string) bool {
	t.Helper()
	ok, _, err := conn.Exists(zkdlock.KeyPathForTest(root, key))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// keyNodeRig is a Client on a counted connection, under a root of the
// test's own, and a raw connection to the same server to look at nodes.
type keyNodeRig struct {
	ctx  context.Context
	addr string
	opts zkdlock.Options
	raw  *zk.Conn
	hook *hookConn
	c    *dlock.Client
}

func newKeyNodeRig(t *testing.T) keyNodeRig {
	t.Helper()
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	r := keyNodeRig{ctx: ctx, addr: srv.Addr(), opts: zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}}
	r.raw = dialZK(t, ctx, r.addr, connOpts{timeout: longSession})
	r.hook = &hookConn{Conn: r.raw}
	r.c = newClient(t, ctx, r.hook, r.opts)
	return r
}

// client is another Client under the rig's root, on a connection of its own.
func (r keyNodeRig) client(t *testing.T) *dlock.Client {
	t.Helper()
	return newClient(t, r.ctx, dialZK(t, r.ctx, r.addr, connOpts{timeout: longSession}), r.opts)
}

// writes is the number of requests of hook that are transactions of the
// server: creates, multis, deletes.
func writes(h *hookConn) int64 {
	return h.multis.Load() + h.containers.Load() + h.deletes.Load()
}

// keyDeletes counts the multis that delete a key node beside a lock node
// (the lone holder's release) and those that failed.
type keyDeletes struct {
	sent, notEmpty, noNode int
}

// watchKeyDeletes makes hook count into k the releases that delete the key
// node; the test reads k once the Client's calls have returned.
func watchKeyDeletes(hook *hookConn, k *keyDeletes) {
	after := func(ops []any, err error) {
		if len(ops) != 2 {
			return
		}
		if _, ok := ops[1].(*zk.DeleteRequest); !ok {
			return
		}
		k.sent++
		switch {
		case errors.Is(err, zk.ErrNotEmpty):
			k.notEmpty++
		case errors.Is(err, zk.ErrNoNode):
			k.noNode++
		}
	}
	hook.afterMulti.Store(&after)
}

// TestLock_newKey_releaseDeletesKeyNode: a lock on a key that had no key
// node, released by its lone holder, leaves no key node behind (nothing
// for the server's container reaper, which deletes at most 10,000 a
// minute), for the same requests and transactions as before: five
// requests (list, createContainer, create, watch, release), three of them
// transactions, the release deleting lock node and key node in one.
func TestLock_newKey_releaseDeletesKeyNode(t *testing.T) {
	r := newKeyNodeRig(t)
	ctx, opts, raw, hook := r.ctx, r.opts, r.raw, r.hook
	c := r.c
	for i := range 10 {
		key := fmt.Sprintf("new-%d", i)
		before, wrote, deletes := hook.requests.Load(), writes(hook), hook.deletes.Load()
		l := mustLock(t, ctx, c, key)
		mustUnlock(t, ctx, l)
		if keyNodeExists(t, raw, opts.Root, key) {
			t.Errorf("key %d: the key node is left after the lone holder's Unlock", i)
		}
		n, w, d := hook.requests.Load()-before, writes(hook)-wrote, hook.deletes.Load()-deletes
		if n != 5 || w != 3 || d != 0 {
			t.Errorf("key %d: %d requests, %d transactions, %d plain deletes; want 5, 3 and 0", i, n, w, d)
		}
	}
}

// TestLock_loneRelease_waiterJoined_keyNodeStays: a waiter that queued
// behind a lone holder after its grant makes the release's key node delete
// fail (not empty): the multi writes nothing, the plain delete follows, the
// waiter is granted and the key node stays.
func TestLock_loneRelease_waiterJoined_keyNodeStays(t *testing.T) {
	r := newKeyNodeRig(t)
	ctx, opts, raw, hook := r.ctx, r.opts, r.raw, r.hook
	holder := r.c
	var k keyDeletes
	watchKeyDeletes(hook, &k)

	const key = "joined"
	l := mustLock(t, ctx, holder, key) // alone: the listing found no key node
	_, p := queueWatching(t, ctx, r.addr, opts, holder, key, 1)
	deletes := hook.deletes.Load()
	mustUnlock(t, ctx, l)
	l2 := p.lease(t, ctx, "the waiter")
	defer mustUnlock(t, ctx, l2)
	if k.sent != 1 || k.notEmpty != 1 || hook.deletes.Load()-deletes != 1 {
		t.Errorf("release: %d key node deletes (%d not empty), %d plain deletes; want 1, 1 and 1", k.sent, k.notEmpty, hook.deletes.Load()-deletes)
	}
	if !keyNodeExists(t, raw, opts.Root, key) {
		t.Error("the key node is gone while the waiter holds the key")
	}
	if l2.Token() <= l.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l2.Token(), l.Token())
	}
}

// TestLock_loneRelease_waiterCreateInFlight_keyNodeAgain: a waiter whose
// create reaches the server after the lone holder's release deleted the key
// node finds no key node, makes it again and is granted.
func TestLock_loneRelease_waiterCreateInFlight_keyNodeAgain(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	raw := dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})
	holder := newClient(t, ctx, raw, opts)
	const key = "in-flight"
	l := mustLock(t, ctx, holder, key)

	wh := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
	sending, released := make(chan struct{}), make(chan struct{})
	first := true
	before := func(ops []any) {
		if _, ok := ops[0].(*zk.CreateRequest); ok && first {
			first = false // the attempt's creates are sent one after another
			close(sending)
			<-released
		}
	}
	wh.beforeMulti.Store(&before)
	p := startLock(ctx, newClient(t, ctx, wh, opts), key)
	select {
	case <-sending:
	case <-p.done:
		t.Fatalf("the waiter's Lock returned before its create: %v", p.err)
	case <-ctx.Done():
		t.Fatal("the waiter never sent its create (watchdog)")
	}
	mustUnlock(t, ctx, l)
	gone := !keyNodeExists(t, raw, opts.Root, key)
	close(released)
	l2 := p.lease(t, ctx, "the waiter")
	defer mustUnlock(t, ctx, l2)
	if !gone {
		t.Error("the lone holder's release left the key node")
	}
	if n := wh.containers.Load(); n != 1 {
		t.Errorf("the waiter made the key node %d times, want 1", n)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", l2.Token(), l.Token())
	}
}

// TestLock_loneRelease_lostReply_recreatedKeyNodeKept: a lone holder's
// release whose reply is lost is sent again; when another Client has made
// the key node again meanwhile and queued in it (a holder and a waiter),
// the retry deletes nothing: its lock node's delete fails, and a multi is
// all or nothing.
func TestLock_loneRelease_lostReply_recreatedKeyNodeKept(t *testing.T) {
	r := newKeyNodeRig(t)
	ctx, opts, raw, hook := r.ctx, r.opts, r.raw, r.hook
	c, other := r.c, r.client(t)
	const key = "lost-reply"
	l := mustLock(t, ctx, c, key)

	var k keyDeletes
	watchKeyDeletes(hook, &k)
	var (
		taken   *pendingLock
		waiting *pendingLock
		inner   func(ops []any, err error)
	)
	counted := hook.afterMulti.Load()
	inner = func(ops []any, err error) {
		(*counted)(ops, err)
		if k.sent != 1 || !errors.Is(err, zk.ErrConnectionClosed) {
			return
		}
		// The first release landed, and its reply is lost: before the
		// retry, another Client makes the key node again and queues two
		// nodes in it.
		taken = startLock(ctx, other, key)
		<-taken.done
		waiting = startLock(ctx, other, key)
		for ctx.Err() == nil { // no t.Fatal here: not the test's goroutine
			if info, err := other.Inspect(ctx, key); err == nil && len(info.Waiters) == 1 {
				break
			}
		}
	}
	hook.afterMulti.Store(&inner)
	hook.dropReleaseReplies.Store(1)
	mustUnlock(t, ctx, l)
	if taken == nil || taken.err != nil {
		t.Fatalf("the other Client's Lock: %v", taken)
	}
	if k.sent != 2 || k.noNode != 1 {
		t.Errorf("%d releases sent (%d found no lock node), want 2 and 1", k.sent, k.noNode)
	}
	if !keyNodeExists(t, raw, opts.Root, key) {
		t.Fatal("the retried release deleted the key node another Client made again")
	}
	select {
	case <-taken.l.Done():
		t.Fatalf("the other Client's lease ended: %v", taken.l.Err())
	default:
	}
	mustUnlock(t, ctx, taken.l)
	mustUnlock(t, ctx, waiting.lease(t, ctx, "the other Client's waiter"))
}

// TestLock_keyNodeMadeByAnother_afterOwnDelete: a Client whose release
// deleted the key node makes it again at its next Lock without listing
// first; when another Client made it meanwhile and holds the key, the
// Lock queues behind that holder and is granted when it releases.
func TestLock_keyNodeMadeByAnother_afterOwnDelete(t *testing.T) {
	r := newKeyNodeRig(t)
	ctx, opts, raw, hook := r.ctx, r.opts, r.raw, r.hook
	c, other := r.c, r.client(t)
	const key = "made-by-another"
	mustUnlock(t, ctx, mustLock(t, ctx, c, key))
	if keyNodeExists(t, raw, opts.Root, key) {
		t.Fatal("the lone holder's release left the key node")
	}
	lo := mustLock(t, ctx, other, key)

	containers := hook.containers.Load()
	p := startLock(ctx, c, key)
	waitWaiters(t, ctx, other, key, 1)
	if n := hook.containers.Load() - containers; n != 1 {
		t.Errorf("%d createContainer before the create, want 1 (found the key node made)", n)
	}
	mustUnlock(t, ctx, lo)
	l := p.lease(t, ctx, "the Lock behind the other Client's")
	if l.Token() <= lo.Token() {
		t.Errorf("token %d is not above the other Client's %d", l.Token(), lo.Token())
	}
	mustUnlock(t, ctx, l)
}

// TestLock_twoClientsTakeTurns_keyNodeKept: two Clients that take turns
// at one key, neither waiting, soon leave its key node be: each makes the
// key node again once after its own release deleted it, and keeps it from
// then on, so the turns settle at the uncontended cycle's three requests,
// with no createContainer per turn. The test server's container reaper
// (every 100 ms) may delete the empty key node between two turns; the
// turn after that makes it again, as it should, and is not counted.
func TestLock_twoClientsTakeTurns_keyNodeKept(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession}
	const key = "turns"
	keyPath := zkdlock.KeyPathForTest(opts.Root, key)
	var keyDeletes atomic.Int64 // releases that delete the key node too
	countKeyDeletes := func(ops []any) {
		for _, op := range ops {
			if d, ok := op.(*zk.DeleteRequest); ok && d.Path == keyPath {
				keyDeletes.Add(1)
			}
		}
	}
	hooks := [2]*hookConn{}
	clients := [2]*dlock.Client{}
	for i := range hooks {
		hooks[i] = &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession})}
		hooks[i].beforeMulti.Store(&countKeyDeletes)
		clients[i] = newClient(t, ctx, hooks[i], opts)
	}
	// made is the key node's creation zxid, 0 when there is none.
	made := func() int64 {
		_, st, err := admin.Exists(keyPath)
		if err != nil {
			t.Fatal(err)
		}
		return st.Czxid
	}
	const settle, turns, maxTurns = 4, 4, 100
	counted := 0
	for turn := 0; counted < turns; turn++ {
		if turn == maxTurns {
			t.Fatalf("only %d of %d turns after %d counted: the reaper took the key node between all the others", counted, turns, maxTurns-settle)
		}
		h, c := hooks[turn%2], clients[turn%2]
		before, containers, deletes, node := h.requests.Load(), h.containers.Load(), keyDeletes.Load(), made()
		mustUnlock(t, ctx, mustLock(t, ctx, c, key))
		if turn < settle {
			continue
		}
		if n := keyDeletes.Load() - deletes; n != 0 {
			t.Fatalf("turn %d: the release deleted the key node (%d multis); want it kept", turn, n)
		}
		if now := made(); node == 0 || now != node {
			continue // reaped before or during the turn, and made again
		}
		counted++
		if n, cc := h.requests.Load()-before, h.containers.Load()-containers; n != 3 || cc != 0 {
			t.Errorf("turn %d: %d requests, %d createContainer; want 3 and 0", turn, n, cc)
		}
	}
}
