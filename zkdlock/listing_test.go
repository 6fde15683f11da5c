package zkdlock_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// gatedLists holds the first listing until gate is closed.
type gatedLists struct {
	*hookConn
	gate chan struct{}
	once sync.Once
}

func (g *gatedLists) Children(path string) ([]string, *zk.Stat, error) {
	g.once.Do(func() { <-g.gate })
	return g.hookConn.Children(path)
}

// TestLock_oneClientManyWaiters_shareListings: the waiters of one Client
// that join a key while a listing of it is in flight share the next one,
// instead of each moving the whole queue through the connection (which, for
// N waiters, is O(N²) bytes). The first listing is held until every waiter
// has asked for one (each lists the queue before its create, to check the
// key's kind); the others then share the next, and after their creates a
// few more, and are still served in arrival order.
func TestLock_oneClientManyWaiters_shareListings(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t)}
	holder := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{}), opts)
	const key, n = "shared-listings", 100
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedLists{hookConn: &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}, gate: make(chan struct{})}
	c := newClient(t, ctx, g, opts)
	var asked atomic.Int64
	path := zkdlock.KeyPathForTest(opts.Root, key)
	zkdlock.SetListAskHookForTest(func(p string) {
		if p == path {
			asked.Add(1)
		}
	})
	defer zkdlock.SetListAskHookForTest(nil)
	w := startWaiters(ctx, key, n, func(int) *dlock.Client { return c })
	never := make(chan struct{})
	awaitOrFail(t, ctx, "every waiter asked for a listing", func() bool { return asked.Load() >= n },
		func() { _, _ = holder.Inspect(ctx, key) }, never) // a round trip, as a pause
	close(g.gate)
	waitWaiters(t, ctx, holder, key, n)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w.servedInOrder(t, ctx)
	// The held listing, one for those that asked while it was held, and a
	// few for waiters whose predecessor went between the listing and the
	// watch; never one each.
	if l := g.lists.Load(); l > n/4 {
		t.Errorf("%d listings for %d waiters on one Client, want them shared", l, n)
	}
	t.Logf("%d listings for %d waiters", g.lists.Load(), n)
}
