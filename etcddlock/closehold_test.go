package etcddlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testserver"
)

// Close of a Client built by New on the caller's etcd client leaves a lease
// in its minimum hold (HoldAtLeast) to expire, as Open's does: the key stays
// held after Close, which leaves the caller's client working, and etcd
// frees it when the lease's TTL runs out, since nobody renews it.
func TestNew_closeInMinimumHold_keyExpiresWithTTL(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	cli := adminClient(t, srv.Addr())
	c1, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c1.Close() })
	c2, err := etcddlock.New(ctx, adminClient(t, srv.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })

	const key = "closehold/job"
	var lease *dlock.Lease
	err = c1.Do(ctx, key, func(ctx context.Context) error {
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
	if _, err := cli.Get(ctx, "closehold/probe"); err != nil {
		t.Fatalf("the caller's client after Close: %v, want it open", err)
	}
	if _, err := c2.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock just after Close = %v, want ErrLocked (Close leaves a lease in its minimum hold to expire)", err)
	}
	l2, err := c2.Lock(ctx, key) // once etcd has expired the lease
	if err != nil {
		t.Fatalf("Lock after the abandoned lease's TTL: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
