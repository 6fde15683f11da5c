package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// maxCycleAllocs bounds the allocations of an uncontended Lock and Unlock
// on memdlock: the Client's and the lease engine's (the Lease, which holds
// the request and the engine, the owner id and the lost-lease callback)
// and memdlock's own (its queue entry, channels and expiry timer). The
// default metadata is encoded once per Client, the lease runs on its
// group's timer (memdlock is a driver.BatchRenewer) and needs no
// goroutine (a driver.LostNotifier), and Done's channel is made only when
// asked for. A ctx that can be cancelled costs the call a context of its
// own, which Close can cancel: maxCancellableAllocs more.
const (
	maxCycleAllocs       = 14
	maxCancellableAllocs = 3
)

type allocCtxKey struct{}

// TestClient_lockUnlock_allocations pins what an uncontended cycle
// allocates, so that a change that adds to it shows here.
func TestClient_lockUnlock_allocations(t *testing.T) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		max  float64
	}{
		{"Background", context.Background(), maxCycleAllocs},
		{"values", context.WithValue(context.Background(), allocCtxKey{}, "v"), maxCycleAllocs},
		{"cancellable", cancellable, maxCycleAllocs + maxCancellableAllocs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := memdlock.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var failed error
			n := testing.AllocsPerRun(500, func() {
				if err := cycleIn(tc.ctx, c); err != nil {
					failed = err
				}
			})
			if failed != nil {
				t.Fatal(failed)
			}
			if n > tc.max {
				t.Errorf("an uncontended Lock and Unlock on memdlock allocates %v times, want at most %v", n, tc.max)
			}
		})
	}
}

func cycleIn(ctx context.Context, c *dlock.Client) error {
	l, err := c.Lock(ctx, "bench")
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}
