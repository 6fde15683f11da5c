package dlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// WaitWaiters waits until key has n waiters queued, failing the test when
// ctx ends first. Backend tests use it to order waiters before a release;
// polling Inspect is the only way to observe a queue from outside.
func WaitWaiters(t testing.TB, ctx context.Context, c *dlock.Client, key string, n int) {
	t.Helper()
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters on %q, want %d (watchdog)", len(info.Waiters), key, n)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
