package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// noopHooks fills every hook with a function that does nothing.
var noopHooks = dlock.Hooks{
	AcquireStart: func(ctx context.Context, _ dlock.AcquireStartInfo) context.Context { return ctx },
	AcquireDone:  func(ctx context.Context, _ dlock.AcquireDoneInfo) context.Context { return ctx },
	Renewed:      func(context.Context, dlock.RenewedInfo) {},
	LeaseEnded:   func(context.Context, dlock.LeaseEndedInfo) {},
	Unprotected:  func(context.Context, dlock.UnprotectedInfo) {},
}

// lockUnlock returns one uncontended Lock and Unlock on c, and a check
// that it worked.
func lockUnlock(c *dlock.Client) func() error {
	ctx := context.Background()
	return func() error {
		l, err := c.Lock(ctx, "bench")
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// BenchmarkHooks_lockUnlock measures an uncontended Lock and Unlock on
// memdlock without hooks and with hooks that do nothing: what a Client
// pays for calling them (run with -benchmem).
func BenchmarkHooks_lockUnlock(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []dlock.Option
	}{{"none", nil}, {"noop", []dlock.Option{dlock.WithHooks(noopHooks)}}} {
		b.Run(bc.name, func(b *testing.B) {
			c, _, err := memdlock.New(nil, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			cycle := lockUnlock(c)
			b.ReportAllocs()
			for b.Loop() {
				if err := cycle(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHooks_noopAddsNoAllocation: hooks that do nothing cost a Lock and
// Unlock no allocation over a Client without hooks.
func TestHooks_noopAddsNoAllocation(t *testing.T) {
	allocs := func(opts ...dlock.Option) float64 {
		c, _, err := memdlock.New(nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cycle := lockUnlock(c)
		var failed error
		n := testing.AllocsPerRun(200, func() {
			if err := cycle(); err != nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatal(failed)
		}
		return n
	}
	none, noop := allocs(), allocs(dlock.WithHooks(noopHooks))
	if noop != none {
		t.Errorf("allocations per Lock and Unlock: %v with no-op hooks, %v without", noop, none)
	}
}
