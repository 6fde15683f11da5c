package redisdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// Close of a Client built by New on the caller's Redis client leaves a
// lease in its minimum hold (HoldAtLeast) to expire, as Open's does: the
// key stays held after Close, which leaves the caller's client open, and
// Redis frees it when the lease's TTL runs out, since nobody renews it.
func TestNew_closeInMinimumHold_keyExpiresWithTTL(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	newClient := func() (*dlock.Client, *redis.Client) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := redisdlock.New(ctx, rdb, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, rdb
	}
	c1, rdb := newClient()
	c2, _ := newClient()

	const key = "closehold/job"
	var lease *dlock.Lease
	err := c1.Do(ctx, key, func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		return nil
	}, dlock.NoWait(), dlock.HoldAtLeast(time.Hour), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("Do(HoldAtLeast) = %v", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("lease Err after Close = %v, want ErrClosed", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the caller's client after Close: %v, want it open", err)
	}
	if _, err := c2.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock just after Close = %v, want ErrLocked (Close leaves a lease in its minimum hold to expire)", err)
	}
	l2, err := c2.Lock(ctx, key) // once Redis has expired the key
	if err != nil {
		t.Fatalf("Lock after the abandoned lease's TTL: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
