package redisdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// A revoked holder's release, sent before its lease has heard of the
// revoke and with nobody granted since, says ErrNotHeld: the slot's token
// record, which release.lua takes for proof of a release resent after a
// lost reply when it still equals the caller's token, is raised past it.
func TestRevoke_releaseBeforeRenewal_notHeld(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := newHarness(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, op := mustClient(t, h), mustClient(t, h)
	// A long TTL: no renewal comes between the revoke and the Unlock.
	l, err := holder.Lock(ctx, "rv-release", dlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Revoke(ctx, "rv-release"); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock after a revoke = %v, want ErrNotHeld", err)
	}
	// And the next grant's token is above the revoked one.
	l2, err := op.TryLock(ctx, "rv-release")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token after the revoke %d, not above the revoked %d", l2.Token(), l.Token())
	}
	_ = l2.Unlock(ctx)
}

// A holder whose grant expired on the server while its lock-delay runs
// cannot end the delay by releasing: its Unlock (which still sends the
// release, the server may have kept the grant) leaves the entry, and
// Inspect still shows the delay in force.
func TestLockDelay_expiredHolderReleaseKeepsDelay(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := newHarness(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, link, err := h.NewFaultyClient(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	op := mustClient(t, h)
	const delay = 30 * time.Second // longer than the test needs: no timing in the verdict
	l, err := holder.Lock(ctx, "ld-release", dlock.WithTTL(h.TTL()), dlock.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	link.Blackhole()
	<-l.Done()
	// The local deadline is no later than the server's: wait for the
	// server's, as Inspect shows it.
	for {
		info, err := op.Inspect(ctx, "ld-release")
		if err != nil {
			t.Fatal(err)
		}
		if !info.DelayedUntil.IsZero() {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the delay never showed in Inspect")
		case <-time.After(10 * time.Millisecond):
		}
	}
	link.Restore()
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired lease = %v, want ErrNotHeld", err)
	}
	info, err := op.Inspect(ctx, "ld-release")
	if err != nil {
		t.Fatal(err)
	}
	if info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].LockDelay != delay {
		t.Fatalf("after the expired holder's Unlock: delayed until %v, holders %+v; want the delay in force and the holder listed", info.DelayedUntil, info.Holders)
	}
	if _, err := op.TryLock(ctx, "ld-release"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock during the delay = %v, want ErrLocked", err)
	}
	// Revoke finds no grant to end: the expired one ended already.
	if got, err := op.Revoke(ctx, "ld-release"); err != nil || len(got) != 0 {
		t.Fatalf("Revoke during an expiry's delay = %v, %v; want nothing revoked", got, err)
	}
}

func mustClient(t *testing.T, h *harness) *dlock.Client {
	t.Helper()
	c, err := h.NewClient(context.Background(), t)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A waiter with a lock-delay handed the lock by a release (release_lock.lua's
// path) keeps its delay: Inspect shows it, and a revoke then keeps the key
// delayed.
func TestLockDelay_handOffKeepsWaitersDelay(t *testing.T) {
	srv := testserver.StartRedis(t)
	h := newHarness(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b, op := mustClient(t, h), mustClient(t, h), mustClient(t, h)
	const delay = 30 * time.Second
	la, err := a.Lock(ctx, "ld-handoff")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := b.Lock(ctx, "ld-handoff", dlock.WithLockDelay(delay))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	dlocktest.WaitWaiters(t, ctx, op, "ld-handoff", 1)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The release itself granted b: Inspect shows it at once.
	info, err := op.Inspect(ctx, "ld-handoff")
	if err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if len(info.Holders) != 1 || info.Holders[0].Token != lb.Token() || info.Holders[0].LockDelay != delay || !info.DelayedUntil.IsZero() {
		t.Fatalf("right after the release: holders %+v, delayed until %v; want b (token %d) with lock-delay %v and no delay in force", info.Holders, info.DelayedUntil, lb.Token(), delay)
	}
	if _, err := op.Revoke(ctx, "ld-handoff"); err != nil {
		t.Fatal(err)
	}
	if _, err := op.TryLock(ctx, "ld-handoff"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock after revoking the delayed holder = %v, want ErrLocked", err)
	}
}
