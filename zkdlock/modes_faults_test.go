package zkdlock_test

import (
	"fmt"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestSemaphore_crashedHolder_sessionExpiryFreesThePermit: a permit holder
// is cut off (a crash, as far as the server can tell): when its session
// expires, the server deletes its node and the waiter behind it is
// granted; the cut-off holder's lease has ended (Done) by then or ends at
// its local deadline.
func TestSemaphore_crashedHolder_sessionExpiryFreesThePermit(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	const key, limit = "sem-crash", 2
	proxy := dlocktest.NewProxy(t, srv.Addr())
	crashed, err := newClient(t, ctx, dialZK(t, ctx, proxy.Addr(), connOpts{}), opts).Semaphore(key, limit).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := plainClient(t, ctx, srv.Addr(), opts).Semaphore(key, limit).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insp := plainClient(t, ctx, srv.Addr(), opts)
	w := startAcquire(ctx, plainClient(t, ctx, srv.Addr(), opts).Semaphore(key, limit).Acquire)
	waitWaiters(t, ctx, insp, key, 1)
	proxy.Blackhole()
	l := w.lease(t, ctx, "the waiter behind a crashed holder")
	waitDone(t, ctx, crashed, "its session was cut off")
	if l.Token() <= other.Token() {
		t.Errorf("token %d after %d", l.Token(), other.Token())
	}
	mustUnlock(t, ctx, l)
	mustUnlock(t, ctx, other)
	proxy.Restore()
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, key))
}

// TestSharedModes_lostCreateReply_findsOwnNode: the create of a permit or
// of a reader succeeds on the server and its reply is lost. The retry
// finds the node by its owner and uses it: one create, no second node, no
// orphan.
func TestSharedModes_lostCreateReply_findsOwnNode(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	other := plainClient(t, ctx, srv.Addr(), opts)
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
	c := newClient(t, ctx, hook, opts)
	for i, tc := range []struct {
		name  string
		call  func(key string) acquireFunc
		block func(key string) (*dlock.Lease, error) // takes the key first, or nil
	}{
		{"Semaphore.Acquire/free", func(key string) acquireFunc { return c.Semaphore(key, 2).Acquire }, nil},
		{"Semaphore.TryAcquire/free", func(key string) acquireFunc { return c.Semaphore(key, 2).TryAcquire }, nil},
		{"Semaphore.Acquire/queued", func(key string) acquireFunc { return c.Semaphore(key, 1).Acquire },
			func(key string) (*dlock.Lease, error) { return other.Semaphore(key, 1).Acquire(ctx) }},
		{"RWMutex.RLock/free", func(key string) acquireFunc { return c.RWMutex(key).RLock }, nil},
		{"RWMutex.RLock/queued", func(key string) acquireFunc { return c.RWMutex(key).RLock },
			func(key string) (*dlock.Lease, error) { return other.RWMutex(key).Lock(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("lost-shared-%d", i)
			path := zkdlock.KeyPathForTest(opts.Root, key)
			var lo *dlock.Lease
			if tc.block != nil {
				var err error
				if lo, err = tc.block(key); err != nil {
					t.Fatal(err)
				}
			}
			creates := hook.creates.Load()
			hook.dropCreateReplies.Store(1)
			p := startAcquire(ctx, tc.call(key))
			if lo != nil {
				waitWaiters(t, ctx, other, key, 1)
				mustUnlock(t, ctx, lo)
			}
			l := p.lease(t, ctx, "after a lost create reply")
			if n := hook.creates.Load() - creates; n != 1 {
				t.Errorf("%d creates, want 1: the retry did not recognise its node", n)
			}
			if names := children(t, admin, path); len(names) != 1 {
				t.Errorf("nodes %v, want only the holder's", names)
			}
			info, err := other.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(info.Holders) != 1 || info.Holders[0].Token != l.Token() || info.Holders[0].Mode != dlock.Shared {
				t.Errorf("Inspect: holders %+v, want ours, shared, token %d", info.Holders, l.Token())
			}
			mustUnlock(t, ctx, l)
			checkNothingLeft(t, admin, path)
		})
	}
}
