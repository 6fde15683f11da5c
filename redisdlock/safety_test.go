package redisdlock_test

// Safety tests against the server's faults: a retried release that must
// not report a false ErrNotHeld, and the server's wall clock stepping back
// or ahead (an evicting maxmemory-policy is in eviction_test.go).
// The clock is stepped for one redis-server alone (testserver.Clock).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// The reply to a release with nobody waiting is lost after the server ran
// it, and go-redis resends it on a new connection. The first attempt freed
// the key; the resent one must report what the first did — Unlock (and Do)
// return nil — and not ErrNotHeld ("your work may have overlapped another
// holder's"), which nobody's did. So the resent release.lua must find
// something remembering the grant, though the hash is gone.
func TestUnlock_lostReplyWithNobodyWaiting(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.ReleaseScriptHashForTest())

	l, err := c.Lock(ctx, "lost-release", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ld.armed.Store(true)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose first reply was lost: %v, want nil: nobody else held the key", err)
	}
	if n := ld.hits.Load(); n != 1 {
		t.Fatalf("injected %d lost replies, want 1", n)
	}
	// It was released for real: another client takes it at once.
	l2, err := other.TryLock(ctx, "lost-release")
	if err != nil {
		t.Fatalf("key not free after the retried Unlock: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	ld.armed.Store(true)
	if err := c.Do(ctx, "lost-release-do", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do whose release reply was lost: %v, want nil", err)
	}
	if n := ld.hits.Load(); n != 2 {
		t.Fatalf("injected %d lost replies in all, want 2", n)
	}
}

// Fencing tokens never go down while the server keeps its data, whatever
// its wall clock does. The server's clock steps back 5 s (an NTP step),
// once after a release and once after a holder vanished (its key expired
// unreleased). Each time the next grant must get a higher token, not one
// taken from the stepped-back clock (≈5·10⁶ lower than the one before).
func TestToken_increasesWhenServerClockStepsBack(t *testing.T) {
	srv, clock := testserver.StartRedisSteppedClock(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })

	t.Run("after a release", func(t *testing.T) {
		ctx := testCtx(t)
		c := newTestClient(t, ctx, srv.Addr(), nil)
		const key = "back-after-release"
		l1, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l1.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Step(-5 * time.Second)
		l2, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token() <= l1.Token() {
			t.Errorf("after a release and the server's clock stepping back 5 s: token %d, not above the previous %d (by %d)",
				l2.Token(), l1.Token(), int64(l2.Token())-int64(l1.Token()))
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("after a holder vanished", func(t *testing.T) {
		ctx := testCtx(t)
		c := newTestClient(t, ctx, srv.Addr(), nil)
		const key = "back-after-expiry"
		// Cut off, the holder neither renews nor releases, and its key
		// expires on the server.
		link := dlocktest.NewProxy(t, srv.Addr())
		gone := newTestClient(t, ctx, link.Addr(), nil)
		l1, err := gone.Lock(ctx, key, dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		link.Blackhole()
		defer link.Restore()
		lockKey := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)
		for admin.Exists(ctx, lockKey).Val() != 0 {
			select {
			case <-ctx.Done():
				t.Fatal("the vanished holder's key never expired (watchdog)")
			case <-time.After(5 * time.Millisecond):
			}
		}
		clock.Step(-5 * time.Second)
		l2, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token() <= l1.Token() {
			t.Errorf("after a holder's key expired and the server's clock stepped back 5 s: token %d, not above the vanished holder's %d (by %d)",
				l2.Token(), l1.Token(), int64(l2.Token())-int64(l1.Token()))
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// The server's wall clock jumps 60 s ahead while a key is held.
// Redis expires keys by that clock, so the key is free at once and another
// client takes it: dlock cannot prevent that (doc.go, # Safety). What it
// must do is end the holder's lease at its next renewal, and say why: the
// error names the server's clock, not only that the key "expired or passed
// to another owner": the user must be pointed at the server's clock.
//
// The TTL is 15 s, so the first renewal (at 5 s) comes long before the
// lease's local deadline (≈14.8 s), which would end it with another error.
func TestLease_lostAtRenewalWhenServerClockJumpsAhead(t *testing.T) {
	srv, clock := testserver.StartRedisSteppedClock(t)
	ctx := testCtx(t)
	holder := newTestClient(t, ctx, srv.Addr(), nil)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "jump-ahead"

	lh, err := holder.Lock(ctx, key, dlock.WithTTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clock.Step(60 * time.Second)
	lo, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("after the server's clock jumped 60 s ahead the key is still held (%v): the step did not expire it, so the test proves nothing", err)
	}
	if lo.Token() <= lh.Token() {
		t.Errorf("token %d after the jump, not above the holder's %d", lo.Token(), lh.Token())
	}
	select {
	case <-lh.Done():
	case <-ctx.Done():
		t.Fatal("the holder's lease never ended although its key passed to another client (watchdog)")
	}
	err = lh.Err()
	if !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), "server's clock") {
		t.Fatalf("the holder's lease ended with %v, want ErrLeaseLost found at the renewal, naming the server's clock", err)
	}
	if err := lo.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The other side: a forward jump smaller than what is left of the
// key's TTL expires nothing: the renewal after it finds the key still the
// holder's, so nobody else can have held it, and the lease goes on. Ending
// it there would be a false alarm.
func TestLease_survivesSmallServerClockJump(t *testing.T) {
	srv, clock := testserver.StartRedisSteppedClock(t)
	ctx := testCtx(t)
	holder := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "small-jump"

	lh, err := holder.Lock(ctx, key, dlock.WithTTL(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := lh.Deadline()
	clock.Step(2 * time.Second)
	// The key has lost 2 s of its TTL on the server. The next renewal
	// (every 3 s) gives it a full one again, and moves the local deadline
	// once its reply is in.
	if err := leasewait.RenewedPast(ctx, lh, before); err != nil {
		t.Fatalf("%v, after a harmless 2 s jump of the server's clock", err)
	}
	if err := lh.Err(); err != nil {
		t.Fatalf("the lease ended after a harmless 2 s jump of the server's clock: %v", err)
	}
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
