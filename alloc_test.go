package dlock_test

import (
	"testing"

	"github.com/dlockdev/dlock/memdlock"
)

// maxCycleAllocs bounds the allocations of an uncontended Lock and Unlock
// on memdlock: the Client's and the lease engine's (the Lease, which holds
// the request and the engine, the owner id and the lost-lease callback)
// and memdlock's own (its queue entry, channels and expiry timer). The
// default metadata is encoded once per Client, the lease runs on its
// group's timer (memdlock is a driver.BatchRenewer) and needs no
// goroutine (a driver.LostNotifier), and Done's channel is made only when
// asked for.
const maxCycleAllocs = 14

// TestClient_lockUnlock_allocations pins what an uncontended cycle
// allocates, so that a change that adds to it shows here.
func TestClient_lockUnlock_allocations(t *testing.T) {
	c, _, err := memdlock.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cycle := lockUnlock(c)
	var failed error
	n := testing.AllocsPerRun(500, func() {
		if err := cycle(); err != nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if n > maxCycleAllocs {
		t.Errorf("an uncontended Lock and Unlock on memdlock allocates %v times, want at most %d", n, maxCycleAllocs)
	}
}
