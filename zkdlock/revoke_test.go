package zkdlock_test

import (
	"errors"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// TestRevoke_holder_waiterGrantedWithGreaterToken: revoking the holder of
// a lock ends its lease at once (its lost-lease watch sees the node
// deleted), its Unlock returns ErrNotHeld, and the waiter behind it is
// granted with a greater token; the waiter was not revoked.
func TestRevoke_holder_waiterGrantedWithGreaterToken(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := testRoot(t)
	holderC := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	waiterC := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	rv := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	const key = "job"

	h := mustLock(t, ctx, holderC, key)
	w := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return waiterC.Lock(ctx, key) })
	waitWaiters(t, ctx, holderC, key, 1)

	revoked, err := rv.Revoke(ctx, key)
	if err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if len(revoked) != 1 || revoked[0].Token != h.Token() {
		t.Fatalf("Revoke returned %+v, want the holder with token %d", revoked, h.Token())
	}
	waitDone(t, ctx, h, "a revoke")
	if !errors.Is(h.Err(), dlock.ErrLeaseLost) {
		t.Errorf("revoked lease's Err = %v, want ErrLeaseLost", h.Err())
	}
	wl := w.lease(t, ctx, "the waiter")
	if wl.Token() <= h.Token() {
		t.Errorf("waiter's token %d, not above the revoked holder's %d", wl.Token(), h.Token())
	}
	if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("revoked holder's Unlock = %v, want ErrNotHeld", err)
	}
	select {
	case <-wl.Done():
		t.Fatalf("the revoked holder's Unlock ended the waiter's lease: %v", wl.Err())
	default:
	}
	mustUnlock(t, ctx, wl)
}

// TestRevoke_byToken_onlyThatPermit: revoking one permit of a semaphore by
// its token ends that lease only; an unknown token is ErrNotHeld and
// changes nothing; a free key revokes nothing, without error.
func TestRevoke_byToken_onlyThatPermit(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := testRoot(t)
	c := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	rv := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	const key = "pool"
	sem := c.Semaphore(key, 2)

	if got, err := rv.Revoke(ctx, key); err != nil || len(got) != 0 {
		t.Fatalf("Revoke of a free key = %+v, %v; want nothing, no error", got, err)
	}
	a, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return sem.Acquire(ctx) })
	waitWaiters(t, ctx, c, key, 1)

	if _, err := rv.Revoke(ctx, key, dlock.RevokeToken(b.Token()+1_000_000)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Revoke of an unknown token = %v, want ErrNotHeld", err)
	}
	if info := waitWaiters(t, ctx, c, key, 1); len(info.Holders) != 2 {
		t.Fatalf("after a refused revoke: %d holders, want 2", len(info.Holders))
	}

	revoked, err := rv.Revoke(ctx, key, dlock.RevokeToken(a.Token()))
	if err != nil {
		t.Fatalf("Revoke(token %d): %v", a.Token(), err)
	}
	if len(revoked) != 1 || revoked[0].Token != a.Token() {
		t.Fatalf("Revoke returned %+v, want the permit with token %d", revoked, a.Token())
	}
	waitDone(t, ctx, a, "its revoke")
	wl := w.lease(t, ctx, "the waiter")
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 2 || info.Holders[0].Token != b.Token() || info.Holders[1].Token != wl.Token() {
		t.Fatalf("holders after the revoke: %+v; want tokens %d, %d", info.Holders, b.Token(), wl.Token())
	}
	select {
	case <-b.Done():
		t.Fatalf("the other permit was lost: %v", b.Err())
	default:
	}
	mustUnlock(t, ctx, b)
	mustUnlock(t, ctx, wl)
}
