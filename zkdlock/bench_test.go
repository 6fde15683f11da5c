package zkdlock_test

import (
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// BenchmarkUncontended is one client taking and releasing a free key, on
// zkdlock and on go-zookeeper's Lock, each on a connection of its own to
// the same server: three requests a cycle on both, so the difference in
// time and allocations is the client's.
//
//	go -C zkdlock test -run '^$' -bench Uncontended -benchmem .
func BenchmarkUncontended(b *testing.B) {
	ctx := testCtx(b)
	srv := testserver.SharedZooKeeper(b)
	b.Run("zkdlock", func(b *testing.B) {
		c := newClient(b, ctx, dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession}),
			zkdlock.Options{Root: testRoot(b), SessionTimeout: longSession})
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.Lock(ctx, "k")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		conn := dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession})
		root := testRoot(b)
		if _, err := conn.Create("/test", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
		l := zk.NewLock(conn, root, zk.WorldACL(zk.PermAll))
		b.ReportAllocs()
		for b.Loop() {
			if err := l.LockWithData(nil); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// maxCycleAllocs bounds the allocations of an uncontended Lock+Unlock on
// zkdlock, everything in the process counted (go-zookeeper's reader
// included): 143 measured, of which about 90 are go-zookeeper's for the
// cycle's requests (its Multi codec is reflective: a create and a delete
// alone cost 40), and about 25 the root package's and the lease engine's.
const maxCycleAllocs = 146

// TestLock_uncontendedCycle_allocations pins the client's allocations per
// uncontended cycle (BenchmarkUncontended measures them beside
// go-zookeeper's Lock).
func TestLock_uncontendedCycle_allocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	c := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}),
		zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession})
	cycle := func() {
		l, err := c.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // the first cycle on a key sets an exists watch: one request more
	n := testing.AllocsPerRun(200, cycle)
	t.Logf("%.0f allocations per cycle", n)
	if n > maxCycleAllocs {
		t.Errorf("%.0f allocations per uncontended Lock+Unlock, want at most %d", n, maxCycleAllocs)
	}
}
