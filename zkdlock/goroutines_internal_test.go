package zkdlock

import (
	"context"
	"fmt"
	"net/url"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("the runtime does not count the goroutines it creates")
	}
	return s[0].Value.Uint64()
}

// maxWaitGoroutines bounds the goroutines started by a Lock that waits
// behind a holder and is granted by its release, the release included: at
// most one per request (go-zookeeper's cannot be cancelled: the create, the
// listing, the exists on our node sent beside it, the getData watch on the
// node ahead, the release; fewer when a worker is idle, see worker.go),
// the grant's watch, keepFresh, and the test's.
const maxWaitGoroutines = 8

// A waiter's listing, and the exists on its own node that goes out beside
// it, take a goroutine each, the one that runs the request: waiting for
// them needs none more.
func TestAcquire_waitAndHandOff_goroutines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testserver.SharedZooKeeper(t)
	u, err := url.Parse(fmt.Sprintf("zk://%s/test/goroutines-%d?session_timeout=10s", srv.Addr(), internalSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *zkDriver {
		dd, err := openURL(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dd.Close() })
		return dd.(*zkDriver)
	}
	holder, waiter := open(), open()
	req := func() *driver.AcquireRequest {
		return &driver.AcquireRequest{Key: "k", Owner: fmt.Sprintf("%032x", internalSeq.Add(1)), TTL: 10 * time.Second, Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive}
	}
	held, err := holder.Acquire(ctx, req())
	if err != nil {
		t.Fatal(err)
	}

	before := goroutinesCreated(t)
	type result struct {
		g   driver.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := waiter.Acquire(ctx, req())
		done <- result{g, err}
	}()
	// Waiting for the release's notification (see beginWait).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		waiter.freshMu.Lock()
		n := waiter.waiters
		waiter.freshMu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the waiter never waited (watchdog)")
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	n := goroutinesCreated(t) - before
	t.Logf("%d goroutines", n)
	if n > maxWaitGoroutines {
		t.Errorf("a waiting Lock and the release that granted it started %d goroutines, want at most %d", n, maxWaitGoroutines)
	}
	if err := r.g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
