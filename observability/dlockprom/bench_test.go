package dlockprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
)

// BenchmarkLockUnlock is the cost of the metrics on the cheapest lock there
// is: an uncontended Lock and Unlock of memdlock, without hooks and with
// dlockprom's (go test -bench LockUnlock -benchmem).
func BenchmarkLockUnlock(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []dlock.Option
	}{
		{"hooks=none", nil},
		{"hooks=dlockprom", []dlock.Option{dlock.WithHooks(dlockprom.New().Hooks())}},
		{"hooks=dlockprom_keylabel", []dlock.Option{dlock.WithHooks(dlockprom.New(dlockprom.WithKeyLabel(dlockprom.KeyPrefix("/"))).Hooks())}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			client, _, err := memdlock.New(nil, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lease, err := client.Lock(ctx, "jobs/bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHooks is the hooks' own share of that: the calls a Client makes
// for one lease's life, waiting acquire to release, with no lock behind.
func BenchmarkHooks(b *testing.B) {
	h := dlockprom.New().Hooks()
	start := dlock.AcquireStartInfo{Backend: "mem", Key: "jobs/bench", Kind: dlock.KindLock, Limit: 1, Wait: true}
	done := dlock.AcquireDoneInfo{Backend: "mem", Key: "jobs/bench", Kind: dlock.KindLock, Limit: 1, Outcome: dlock.OutcomeAcquired, Waited: time.Millisecond, Token: 1}
	ended := dlock.LeaseEndedInfo{Backend: "mem", Key: "jobs/bench", Kind: dlock.KindLock, Token: 1, Reason: dlock.EndReleased, Held: time.Second}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := h.AcquireStart(ctx, start)
		c = h.AcquireDone(c, done)
		h.LeaseEnded(c, ended)
	}
}
