package etcddlock_test

import (
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// maxAllocsPerCycle bounds the client's allocations for one uncontended
// Lock and Unlock: measured 380 (391 with the race detector), 520 with
// Txns built from clientv3's Cmp and Op, which copy every comparison
// (bench/analysis.md, Profile: etcd). Most are gRPC's, for the two Txns.
const maxAllocsPerCycle = 440

// An uncontended Lock and Unlock allocates no more than maxAllocsPerCycle
// (the whole process's allocations, so background work counts too).
func TestUncontended_allocsPerCycle(t *testing.T) {
	h := newHarness(t)
	ctx := testCtx(t)
	c, err := h.clientVia(ctx, t, h.srv.Addr(), dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := "allocs/" + t.Name()
	var failed error
	cycle := func() {
		l, err := c.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(ctx)
		}
		if err != nil && failed == nil {
			failed = err
		}
	}
	cycle() // the lease grant
	got := testing.AllocsPerRun(50, cycle)
	if failed != nil {
		t.Fatal(failed)
	}
	if got > maxAllocsPerCycle {
		t.Errorf("an uncontended Lock and Unlock allocated %.0f times, want at most %d", got, maxAllocsPerCycle)
	}
	t.Logf("%.0f allocations per cycle", got)
}
