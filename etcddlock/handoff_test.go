package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Eight contenders, each with its own client, take one key in turn: every
// request and stream message they send, divided by the grants, is at most
// 5 (dlock's target): a join Txn, a watch create and cancel, a release
// Txn, and now and then a check read after creating a watch. No read of the
// queue at all: every wake-up comes with its release marker.
func TestContended_requestsPerGrant(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "per-grant/" + t.Name()
	const n, rounds = 8, 25
	counters := make([]*counter, n)
	clients := make([]*dlock.Client, n)
	for i := range n {
		counters[i] = newCounter()
		clients[i] = counters[i].client(t, ctx, srv.Addr(), longTTL)
	}
	runContenders(t, ctx, clients, key, rounds, nil)
	grants := n * rounds
	sent, by := takeAll(counters)
	perGrant := float64(sent) / float64(grants)
	t.Logf("%d grants, %.2f messages per grant: %v", grants, perGrant, by)
	if perGrant > 5 {
		t.Errorf("%.2f messages per grant, want at most 5", perGrant)
	}
	// Each contender's first Lock may find the key free, and a wake-up
	// whose watch started after the release reads the queue: rare.
	if by[queueRead] > grants/10 {
		t.Errorf("%d reads of the queue in %d grants: wake-ups read the queue", by[queueRead], grants)
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// checkNothingStored fails the test if etcd stores anything for key: no
// entry, no release marker, no tail.
func checkNothingStored(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) {
	t.Helper()
	left, err := stored(ctx, admin, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range left {
		t.Errorf("left in etcd for %q: %q", key, k)
	}
}

// A waiter whose entry ahead is a waiter that gives up must not take the
// key while the holder ahead of that one holds it: the delete it sees comes
// without a release marker (a revoked lease), so it reads the queue and
// waits for the holder. A marker put by hand beforehand, at another
// revision than the delete, must not count. Were every delete, or any
// marker, taken as a release, the waiter would hold the key with the
// holder.
func TestHandOff_waiterAheadGivesUp_noGrant(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, fakeMarker := range []bool{false, true} {
		t.Run(fmt.Sprintf("marker put by hand=%v", fakeMarker), func(t *testing.T) {
			key := "gives-up/" + t.Name()
			holder, lh := lockedHolder(t, ctx, srv.Addr(), key, longTTL)
			c1 := newCounter()
			w1 := c1.client(t, ctx, srv.Addr(), longTTL)
			ctx1, cancel1 := context.WithCancel(ctx)
			defer cancel1()
			got1 := goLock(ctx1, w1, key)
			waitWaiters(t, ctx, holder, key, 1)
			c1.waitCreated(t, ctx, 2)
			w1Key, _ := newestEntry(t, ctx, admin, key)

			c2 := newCounter()
			w2 := c2.client(t, ctx, srv.Addr(), longTTL)
			got2 := goLock(ctx, w2, key)
			waitWaiters(t, ctx, holder, key, 2)
			c2.waitCreated(t, ctx, 2)
			if fakeMarker {
				if _, err := admin.Put(ctx, w1Key+releasedSuffix, ""); err != nil {
					t.Fatal(err)
				}
				defer admin.Delete(ctx, w1Key+releasedSuffix)
			}
			c2.take()

			cancel1()
			if r := <-got1; !errors.Is(r.err, context.Canceled) {
				t.Fatalf("w1's Lock: %v, want context.Canceled", r.err)
			}
			// w2 reads the queue and watches the holder's entry.
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			read := make(chan int, 1)
			go func() { read <- c2.sentAtLeast(rctx, queueRead, 1) }()
			select {
			case r := <-got2:
				t.Fatalf("w2 granted (%v) while the holder holds the key", r.err)
			case n := <-read:
				if n < 1 {
					t.Fatal("w2 did not read the queue (watchdog)")
				}
			}
			c2.waitCreated(t, ctx, 3)
			select {
			case r := <-got2:
				t.Fatalf("w2 granted (%v) while the holder holds the key", r.err)
			default:
			}
			info, err := holder.Inspect(ctx, key)
			if err != nil || len(info.Holders) == 0 || info.Holders[0].Token != lh.Token() || len(info.Waiters) != 1 {
				t.Fatalf("Inspect = %+v, %v; want the holder and one waiter", info, err)
			}
			if err := lh.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l2 := awaitLock(t, ctx, got2)
			if l2.Token() <= lh.Token() {
				t.Errorf("w2's token %d not above the holder's %d", l2.Token(), lh.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Release markers do not accumulate: after many hand-offs, with waiters
// that give up at random points (some just as the entry ahead of them is
// released for them), nothing is left for the key; and a marker whose
// waiter crashed after it was granted (its lease revoked, as etcd does when
// it expires) goes with the releaser's lease, which etcd drops by itself
// when nobody uses it (here, within the 1 s TTL of the test server).
func TestMarkers_doNotAccumulate(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())

	t.Run("cycles and cancels", func(t *testing.T) {
		key := "markers-cycles/" + t.Name()
		const n, rounds = 6, 30
		clients := make([]*dlock.Client, n)
		for i := range n {
			clients[i] = newCounter().client(t, ctx, srv.Addr(), longTTL)
		}
		runContenders(t, ctx, clients, key, rounds, func(i, r int) (context.Context, context.CancelFunc) {
			if i%2 == 1 && r%3 == 0 {
				// Give up at some point of the wait: the deadline is
				// the fault injected, not a synchronization.
				return context.WithTimeout(ctx, time.Duration(r%5)*time.Millisecond)
			}
			return context.WithCancel(ctx)
		})
		checkNothingStored(t, ctx, admin, key)
	})

	t.Run("waiter crashes holding", func(t *testing.T) {
		key := "markers-crash/" + t.Name()
		ttl := dlock.WithTTL(time.Second)
		holder, lh := lockedHolder(t, ctx, srv.Addr(), key, ttl)
		holderKey, _, _ := oldestEntry(t, ctx, admin, key)
		wc := newCounter()
		waiter := wc.client(t, ctx, srv.Addr(), longTTL)
		got := goLock(ctx, waiter, key)
		waitWaiters(t, ctx, holder, key, 1)
		wc.waitCreated(t, ctx, 2)
		marker := holderKey + releasedSuffix
		gone := admin.Watch(ctx, marker, clientv3.WithFilterPut())
		if err := lh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lw := awaitLock(t, ctx, got)
		if resp, err := admin.Get(ctx, marker); err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("release marker %s: %v, %v; want it there while its waiter holds", marker, resp, err)
		}
		// The waiter crashes: etcd revokes its lease.
		_, _, wlease := entry(t, ctx, admin, key)
		if _, err := admin.Revoke(ctx, wlease); err != nil {
			t.Fatal(err)
		}
		_ = lw // never released: its Unlock would find nothing
		// A marker does not make the key look taken.
		l, err := holder.TryLock(ctx, key, longTTL)
		if err != nil {
			t.Fatalf("TryLock with only a marker left: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Nobody uses the holder's 1 s lease (idle in its client) any more.
		select {
		case wr := <-gone:
			if len(wr.Events) == 0 || wr.Events[0].Type != mvccpb.DELETE {
				t.Fatalf("watch of the marker: %+v", wr)
			}
		case <-ctx.Done():
			t.Fatal("marker not deleted with the releaser's lease (watchdog)")
		}
		checkNothingStored(t, ctx, admin, key)
	})
}

// A waiter that gives up just as the holder ahead of it releases may delete
// the holder's release marker before the holder writes it: the cancelled
// waiter deletes its entry and the marker (nothing yet), and then
// the release, whose tail names the waiter behind, puts it. The waiter
// behind woke on the revoked entry (no marker), and its read of the queue,
// after the release, grants it the key: it never watched the holder's
// entry, so it knew nothing of that marker. The marker is on the holder's
// lease, which lives on for the holder's client's other calls (the
// conformance scenario Lock_cancelAtHandOff_nextWaiterServed leaves it
// about 1 run in 80 under load, unless it is cleaned up). The read here is
// held until the holder has released, which makes that interleaving
// certain. The waiter granted by a read deletes, at its release, the
// markers of the queue, all of entries that are gone, so no marker is left.
func TestHandOff_waiterAheadGivesUpBeforeRelease_noMarkerLeft(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "gives-up-before-release/" + t.Name()
	holder, lh := lockedHolder(t, ctx, srv.Addr(), key, longTTL)
	holderKey, _, _ := oldestEntry(t, ctx, admin, key)

	c1 := newCounter()
	w1 := c1.client(t, ctx, srv.Addr(), longTTL)
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	got1 := goLock(ctx1, w1, key)
	waitWaiters(t, ctx, holder, key, 1)
	c1.waitCreated(t, ctx, 2)

	c2 := newCounter()
	w2 := c2.client(t, ctx, srv.Addr(), longTTL)
	got2 := goLock(ctx, w2, key)
	waitWaiters(t, ctx, holder, key, 2)
	c2.waitCreated(t, ctx, 2) // w2 watches w1's entry
	release := make(chan struct{})
	held := c2.holdNextRead(release)

	// w1 gives up: its lease revoked, the holder's marker (not there yet)
	// deleted, before its Lock returns.
	cancel1()
	if r := <-got1; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("w1's Lock: %v, want context.Canceled", r.err)
	}
	// w2 woke on w1's delete, without a marker: its read of the queue waits.
	select {
	case <-held:
	case r := <-got2:
		t.Fatalf("w2's Lock returned (%v) before reading the queue", r.err)
	case <-ctx.Done():
		t.Fatal("w2 did not read the queue (watchdog)")
	}
	// The release, with w2's tail newer than the holder's entry: a marker.
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := admin.Get(ctx, holderKey+releasedSuffix); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the holder's release marker: %v, %v; want one", resp, err)
	}
	close(release)
	l2 := awaitLock(t, ctx, got2)
	if l2.Token() <= lh.Token() {
		t.Errorf("w2's token %d not above the holder's %d", l2.Token(), lh.Token())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder's lease is idle in its client, alive for a minute: the
	// marker must not be left to it.
	checkNothingStored(t, ctx, admin, key)
}

// A waiter whose join reply is lost, and whose retry comes after the holder
// ahead of it released the key for it, holds the key without having
// watched anybody: it finds the release marker written for it, and its
// release deletes it.
func TestLock_lostJoinReply_releasedBeforeRetry(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "lost-join-released/" + t.Name()
	_, lh := lockedHolder(t, ctx, srv.Addr(), key, longTTL)
	holderKey, _, _ := oldestEntry(t, ctx, admin, key)
	c := newCounter()
	waiter := c.client(t, ctx, srv.Addr(), longTTL)
	retry := make(chan struct{})
	c.mu.Lock()
	c.dropNext, c.holdRetry = putApplied, retry
	c.mu.Unlock()
	got := goLock(ctx, waiter, key)
	c.waitSent(t, ctx, "dropped", 1)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := admin.Get(ctx, holderKey+releasedSuffix); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the holder's release marker: %v, %v; want one, for the waiter", resp, err)
	}
	close(retry)
	l := awaitLock(t, ctx, got)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, admin, key)
}

// runContenders has every client take key rounds times, all at once, and
// checks that nobody else holds the key while one does. lockCtx, if not
// nil, gives the context of round r of client i: a Lock that it ends is
// skipped.
func runContenders(t *testing.T, ctx context.Context, clients []*dlock.Client, key string, rounds int,
	lockCtx func(i, r int) (context.Context, context.CancelFunc)) {
	t.Helper()
	if lockCtx == nil {
		lockCtx = func(int, int) (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }
	}
	var mu sync.Mutex
	holders := 0
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for i, c := range clients {
		wg.Go(func() {
			for r := range rounds {
				lctx, cancel := lockCtx(i, r)
				l, err := c.Lock(lctx, key)
				cancel()
				if lctx.Err() != nil && errors.Is(err, lctx.Err()) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				holders++
				if holders != 1 {
					errs <- fmt.Errorf("%d holders at once", holders)
				}
				holders--
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	waitContenders(t, &wg, errs)
}

// lockedHolder returns a client of its own, with a counter, and its lease
// on key, taken before anybody else queues: the holder the hand-off tests
// release to their waiters.
func lockedHolder(t *testing.T, ctx context.Context, addr, key string, opts ...dlock.Option) (*dlock.Client, *dlock.Lease) {
	t.Helper()
	holder := newCounter().client(t, ctx, addr, opts...)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return holder, lh
}
