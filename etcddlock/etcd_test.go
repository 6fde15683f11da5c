package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// longTTL keeps leases from being renewed during a test, so that request
// counts are exact: renewals start at a third of the TTL.
var longTTL = dlock.WithTTL(time.Minute)

// waitWaiters waits until key has n waiters queued.
func waitWaiters(t *testing.T, ctx context.Context, c *dlock.Client, key string, n int) {
	t.Helper()
	dlocktest.WaitWaiters(t, ctx, c, key, n)
}

// entry returns the etcd key-value of the only entry of key (release
// markers aside).
func entry(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) (etcdKey string, createRev int64, lease clientv3.LeaseID) {
	t.Helper()
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kvs := slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return strings.HasSuffix(string(kv.Key), releasedSuffix) })
	if len(kvs) != 1 {
		t.Fatalf("%d etcd entries for %q, want 1", len(kvs), key)
	}
	kv := kvs[0]
	return string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease)
}

// checkTokenIsOnlyEntry checks that key has exactly one entry and that l's
// token is its create revision, and returns the entry's lease.
func checkTokenIsOnlyEntry(t *testing.T, ctx context.Context, admin *clientv3.Client, key string, l *dlock.Lease) clientv3.LeaseID {
	t.Helper()
	_, rev, lease := entry(t, ctx, admin, key)
	if l.Token() != uint64(rev) {
		t.Errorf("token %d, want the entry's create revision %d", l.Token(), rev)
	}
	return lease
}

// lockOrTryLock returns c.Lock if wait, else c.TryLock.
func lockOrTryLock(c *dlock.Client, wait bool) func(context.Context, string, ...dlock.LockOption) (*dlock.Lease, error) {
	if wait {
		return c.Lock
	}
	return c.TryLock
}

// leaseAlive reports whether etcd still has a lease.
func leaseAlive(t *testing.T, ctx context.Context, admin *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	resp, err := admin.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL > 0
}

// A release wakes only the next waiter, and what each waiter costs does not
// depend on how many wait: per waiter one lease grant (first use of the
// client), one Txn to queue, one watch, one Txn to release, and no read when
// woken; and exactly one delete notice, that of the entry ahead of it, with
// that entry's release marker in the same revision.
func TestHandOff_wakesOnlyTheNextWaiter(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := testCtx(t)
			admin := adminClient(t, srv.Addr())
			key := "handoff/" + t.Name()
			holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
			lh, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			holderKey, _, _ := entry(t, ctx, admin, key)

			counters := make([]*counter, n)
			granted := make(chan int, n)
			errs := make(chan error, n)     // of Lock
			unlocked := make(chan error, n) // of Unlock
			for i := range n {
				counters[i] = newCounter()
				c := counters[i].client(t, ctx, srv.Addr(), longTTL)
				go func() {
					l, err := c.Lock(ctx, key)
					if err != nil {
						errs <- err
						return
					}
					granted <- i
					unlocked <- l.Unlock(ctx)
				}()
				waitWaiters(t, ctx, holder, key, i+1)
				// Its watch exists before the next waiter writes anything:
				// no revision passes between its queueing and its watch.
				counters[i].waitCreated(t, ctx, 2)
			}
			resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			order := []string{holderKey}
			for _, kv := range resp.Kvs[1:] {
				order = append(order, string(kv.Key))
			}

			if err := lh.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var served []int
			for range n {
				select {
				case i := <-granted:
					served = append(served, i)
				case err := <-errs:
					t.Fatal(err)
				case <-ctx.Done():
					t.Fatalf("served %v (watchdog)", served)
				}
			}
			for range n {
				if err := <-unlocked; err != nil {
					t.Fatal(err)
				}
			}
			if want := slices.Collect(func(yield func(int) bool) {
				for i := range n {
					yield(i)
				}
			}); !slices.Equal(served, want) {
				t.Fatalf("served in order %v, want %v", served, want)
			}

			for i, c := range counters {
				puts := c.putEvents()
				sent, dels := c.take()
				dels = slices.DeleteFunc(dels, func(d deleteEvent) bool { return strings.HasSuffix(d.key, releasedSuffix) })
				if len(dels) != 1 || dels[0].key != order[i] {
					t.Errorf("waiter %d received entry delete notices %+v, want one, for %s (the entry ahead of it)", i, dels, order[i])
				} else if len(puts) != 1 || puts[0].key != order[i]+releasedSuffix || puts[0].modRev != dels[0].modRev {
					t.Errorf("waiter %d received put notices %+v, want one: the release marker of %s, at the revision of its delete", i, puts, order[i])
				}
				want := map[string]int{
					"/etcdserverpb.Lease/LeaseGrant": 1,
					// The Txn that takes a free key (its Client had not
					// seen it busy), the join, the release.
					"/etcdserverpb.KV/Txn": 3,
					"watch create":         1,
					// No read when woken: the marker says that the
					// entry ahead was released by its holder.
				}
				delete(sent, "watch cancel") // sent when the watch ends, asynchronously
				if sent[readTxn] == 1 {
					// The check that the entry ahead did not go before
					// the watch started: made only if a revision passed
					// since the join (an earlier test's lease expiring).
					delete(sent, readTxn)
				}
				if !sameCounts(sent, want) {
					t.Errorf("waiter %d sent %v, want %v", i, sent, want)
				}
			}
		})
	}
}

// releasedSuffix ends the etcd key of a release marker.
const releasedSuffix = "/released"

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The waiter's watch is synced: etcd notifies it of the release as it
// applies the delete, not from the catch-up loop that serves watches
// started in the past every 100 ms. A synced watch's notice carries the
// delete's own revision in its header; the catch-up loop's carries the
// revision current when it runs, which a writer keeps moving on here.
// When the release comes before the watch exists, the waiter finds out by
// the read that follows the watch's creation instead: no notice at all.
func TestHandOff_notifiedBySyncedWatch(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "synced/" + t.Name()

	defer keepRevisionMoving(ctx, admin, key)()

	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	wc := newCounter()
	waiter := wc.client(t, ctx, srv.Addr(), longTTL)
	notices := 0
	for round := range 20 {
		lh, err := holder.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := goLockUnlock(ctx, waiter, key)
		waitWaiters(t, ctx, holder, key, 1)
		if err := lh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		_, dels := wc.take()
		for _, d := range dels {
			notices++
			if d.headerRev != d.modRev {
				t.Errorf("round %d: delete at revision %d notified with header revision %d: served by the catch-up loop, not synced",
					round, d.modRev, d.headerRev)
			}
		}
	}
	t.Logf("%d of 20 hand-offs notified by the watch, the others found by the read after creating it", notices)
}

// keepRevisionMoving starts a writer that keeps etcd's revision moving with
// puts next to key, and returns a function that stops it and waits for it.
func keepRevisionMoving(ctx context.Context, admin *clientv3.Client, key string) (stop func()) {
	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for wctx.Err() == nil {
			_, _ = admin.Put(wctx, "dlocktest-noise/"+key, "x")
		}
	})
	return func() {
		stopWriter()
		wg.Wait()
	}
}

// For contrast, etcd's own recipe: a watch from a past revision is unsynced,
// and its notice comes from the catch-up loop. Logged only: whether the
// catch-up loop runs before the next write is a matter of timing.
func TestHandOff_unsyncedWatchControl(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "dlocktest-control/" + t.Name()
	defer keepRevisionMoving(ctx, admin, key)()
	late := 0
	for range 5 {
		put, err := admin.Put(ctx, key, "x")
		if err != nil {
			t.Fatal(err)
		}
		// Past revision: the put's. The writer has moved on since.
		w := admin.Watch(ctx, key, clientv3.WithRev(put.Header.Revision+1), clientv3.WithFilterPut())
		del, err := admin.Delete(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wr := <-w
		if len(wr.Events) == 1 && wr.Header.Revision != del.Header.Revision {
			late++
		}
	}
	t.Logf("unsynced watch: %d of 5 notices carried a later header revision than the delete's", late)
}

// A Txn that creates the entry whose reply is lost is retried, and the
// retry finds the entry instead of creating a second one: the call's name
// is the entry's. A late copy of the lost Txn, applied after the Unlock,
// creates nothing: the Unlock fenced the shared lease first (else the copy
// would create an orphan on a lease the client keeps renewing).
func TestLock_lostCreateReply(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			key := "lost-reply/" + t.Name()
			c := newCounter()
			client := c.client(t, ctx, srv.Addr(), longTTL)
			c.dropNextReply(putApplied)
			lock := lockOrTryLock(client, wait)
			l, err := lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			sent, _ := c.take()
			// The small Txn of a free key says nothing when it fails: the
			// full one after it finds the entry.
			if sent["/etcdserverpb.KV/Txn"] != 3 {
				t.Errorf("sent %v, want 3 Txn: the one whose reply was lost, its retry, and the full join or try", sent)
			}
			lease := checkTokenIsOnlyEntry(t, ctx, admin, key, l)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if !leaseAlive(t, ctx, admin, lease) {
				t.Error("shared lease revoked at Unlock: want it kept for the client's other calls")
			}
			c.replayDropped(t, ctx, admin)
			checkNothingStored(t, ctx, admin, key)
		})
	}
}

// The same when the call must wait: it queues once, in its place.
func TestLock_lostCreateReplyWhileQueued(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "lost-reply-queued/" + t.Name()
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter()
	waiter := c.client(t, ctx, srv.Addr(), longTTL)
	c.dropNextReply(putApplied)
	got := goLockUnlock(ctx, waiter, key)
	waitWaiters(t, ctx, holder, key, 1)
	c.waitCreated(t, ctx, 2)
	if info, err := holder.Inspect(ctx, key); err != nil || len(info.Waiters) != 1 {
		t.Fatalf("Inspect = %+v, %v; want one waiter", info, err)
	}
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// The fencing token is the entry's create revision, which etcd increments
// for every write in the cluster.
func TestToken_isCreateRevision(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "token/" + t.Name()
	a, b := newCounter().client(t, ctx, srv.Addr()), newCounter().client(t, ctx, srv.Addr())
	var last uint64
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		_, rev, _ := entry(t, ctx, admin, key)
		if l.Token() != uint64(rev) || l.Token() <= last {
			t.Fatalf("token %d: want the create revision %d, above %d", l.Token(), rev, last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// etcd leases last whole seconds: a TTL is rounded up, and raised to the
// server's minimum (one second on the test server).
func TestTTL_roundedUpToWholeSeconds(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	c := newCounter().client(t, ctx, srv.Addr())
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{{dlock.MinTTL, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {3 * time.Second, 3}} {
		key := fmt.Sprintf("ttl/%s/%v", t.Name(), tc.ttl)
		start := time.Now()
		l, err := c.Lock(ctx, key, dlock.WithTTL(tc.ttl))
		if err != nil {
			t.Fatal(err)
		}
		_, _, lease := entry(t, ctx, admin, key)
		resp, err := admin.TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL != tc.want {
			t.Errorf("TTL %v: etcd granted %d s, want %d s", tc.ttl, resp.GrantedTTL, tc.want)
		}
		// The local deadline never counts on more than etcd granted,
		// from before the request was sent.
		if max := start.Add(time.Duration(resp.GrantedTTL) * time.Second); l.Deadline().After(max) {
			t.Errorf("TTL %v: deadline %v after %v", tc.ttl, l.Deadline(), max)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Taking a free key and releasing it costs two requests: a Txn each. The
// lease of the first call serves the next ones.
func TestUncontended_twoRequestsPerCycle(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "cycle/" + t.Name()
	c := newCounter()
	client := c.client(t, ctx, srv.Addr(), longTTL)
	for i := range 11 {
		l, err := client.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			c.take() // the New check and the first lease grant
		}
	}
	sent, _ := c.take()
	if want := map[string]int{"/etcdserverpb.KV/Txn": 20}; !sameCounts(sent, want) {
		t.Errorf("10 cycles sent %v, want %v", sent, want)
	}
}

// A waiter that gives up deletes its entry, and leaves the lease, which
// its client's other calls share.
func TestLock_cancelWhileWaiting_deletesEntry(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "cancel/" + t.Name()
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wc := newCounter()
	waiter := wc.client(t, ctx, srv.Addr(), longTTL)
	lctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(lctx, key)
		got <- err
	}()
	waitWaiters(t, ctx, holder, key, 1)
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v, want context.Canceled", err)
	}
	if !leaseAlive(t, ctx, admin, lease) {
		t.Error("the cancelled waiter's shared lease was revoked")
	}
	if info, err := holder.Inspect(ctx, key); err != nil || len(info.Waiters) != 0 {
		t.Errorf("Inspect = %+v, %v; want no waiter left", info, err)
	}
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, admin, key)
}

// Close revokes the lease kept for later calls; a Client built by New
// leaves the etcd client open.
func TestClose_revokesLease(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	cli := adminClient(t, srv.Addr())
	c, err := etcddlock.New(ctx, cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := "close/" + t.Name()
	l, err := c.Lock(ctx, key, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, lease := entry(t, ctx, admin, key)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !leaseAlive(t, ctx, admin, lease) {
		t.Fatal("lease revoked at Unlock: want it kept for the next call")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if leaseAlive(t, ctx, admin, lease) {
		t.Error("lease alive after Close")
	}
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Errorf("the caller's etcd client after Close: %v", err)
	}
}

// Keys map to etcd keys that keep one lock's entries apart from another's,
// even when one key is a prefix of the other or contains the escapes.
func TestList_keysStayApart(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	c := newCounter().client(t, ctx, srv.Addr(), longTTL)
	base := "list/" + t.Name() + "/"
	names := []string{"a", "a/b", "a%2Fb", "a%b", "ab", "a/"}
	for _, n := range names {
		l, err := c.TryLock(ctx, base+n)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", base+n, err)
		}
		defer l.Unlock(ctx)
	}
	for _, n := range names {
		info, err := c.Inspect(ctx, base+n)
		if err != nil || len(info.Holders) == 0 || len(info.Waiters) != 0 {
			t.Errorf("Inspect(%q) = %+v, %v; want a holder and no waiters", base+n, info, err)
		}
	}
	list, err := c.List(ctx, base+"a/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, li := range list {
		got = append(got, li.Key)
	}
	if want := []string{base + "a/", base + "a/b"}; !slices.Equal(got, want) {
		t.Errorf("List(%q) = %q, want %q", base+"a/", got, want)
	}
	list, err = c.List(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, li := range list {
		got = append(got, li.Key)
	}
	want := slices.Clone(names)
	for i := range want {
		want[i] = base + want[i]
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("List(%q) = %q, want %q", base, got, want)
	}
}

// A waiter whose entry is deleted by hand does not take the key without
// one: at its next renewal (a third of its TTL) it finds its entry gone and
// queues again.
func TestLock_waiterEntryDeleted_queuesAgain(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "requeue-deleted/" + t.Name()
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newCounter().client(t, ctx, srv.Addr(), dlock.WithTTL(time.Second))
	got := goLock(ctx, waiter, key)
	waitWaiters(t, ctx, holder, key, 1)
	deleted, _ := newestEntry(t, ctx, admin, key)
	if _, err := admin.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	waitWaiters(t, ctx, holder, key, 0)
	waitWaiters(t, ctx, holder, key, 1) // queued again, with a new entry
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := awaitLock(t, ctx, got)
	_, rev, _ := entry(t, ctx, admin, key)
	if l.Token() != uint64(rev) || l.Token() <= lh.Token() {
		t.Fatalf("token %d, want the create revision %d of its new entry, above %d", l.Token(), rev, lh.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// goLock calls c.Lock(ctx, key) in a goroutine.
func goLock(ctx context.Context, c *dlock.Client, key string) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		got <- lockResult{l, err}
	}()
	return got
}

// goLockUnlock calls c.Lock(ctx, key, opts...) in a goroutine, then Unlock
// if it was granted, and sends the first error (or nil) on the channel.
func goLockUnlock(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

// awaitLock waits for a Lock started by goLock, which must succeed.
func awaitLock(t *testing.T, ctx context.Context, got <-chan lockResult) *dlock.Lease {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.l
	case <-ctx.Done():
		t.Fatal("waiter not granted (watchdog)")
		return nil
	}
}

// The limit of that check, documented in docs/etcd.md: a waiter whose entry
// is deleted by hand just before the release ahead of it is granted the key
// (the grant reads nothing), as a holder whose entry is deleted by hand
// keeps believing it holds. Its lease then ends at its first renewal, when
// the watch on its entry starts from the revision where it was last seen,
// and Unlock reports ErrNotHeld.
func TestLock_waiterEntryDeletedAtRelease_leaseLost(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "deleted-at-release/" + t.Name()
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wc := newCounter()
	waiter := wc.client(t, ctx, srv.Addr(), dlock.WithTTL(time.Second))
	got := goLock(ctx, waiter, key)
	waitWaiters(t, ctx, holder, key, 1)
	wc.waitCreated(t, ctx, 2)
	// One write deletes the waiter's entry and releases the holder's, so
	// that no renewal of the waiter can come in between; the release
	// marker is what the holder's release writes.
	holderKey, _, _ := oldestEntry(t, ctx, admin, key)
	waiterKey, _ := newestEntry(t, ctx, admin, key)
	if _, err := admin.Txn(ctx).Then(
		clientv3.OpDelete(waiterKey),
		clientv3.OpDelete(holderKey),
		clientv3.OpPut(holderKey+releasedSuffix, ""),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	l := awaitLock(t, ctx, got)
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
			t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
		}
	case <-ctx.Done():
		t.Fatal("lease of a grant without an entry not lost (watchdog)")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock: %v, want ErrNotHeld", err)
	}
	_ = lh.Unlock(ctx)
	if _, err := admin.Delete(ctx, holderKey+releasedSuffix); err != nil {
		t.Fatal(err)
	}
}

// newestEntry returns the etcd key and create revision of the newest entry
// of key.
func newestEntry(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) (string, int64) {
	t.Helper()
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no entry of %s: %v", key, err)
	}
	return string(resp.Kvs[0].Key), resp.Kvs[0].CreateRevision
}

// oldestEntry returns the etcd key, create revision and lease of the oldest
// entry of key.
func oldestEntry(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) (string, int64, clientv3.LeaseID) {
	t.Helper()
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no entry of %s: %v", key, err)
	}
	kv := resp.Kvs[0]
	return string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease)
}

// A waiter cut off from etcd for longer than its TTL loses its place (etcd
// expires its lease and entry) and queues again when it can reach etcd.
func TestLock_waiterCutOff_queuesAgain(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "requeue-cutoff/" + t.Name()
	holder, err := dlock.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	lh, err := holder.Lock(ctx, key, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	p := dlocktest.NewProxy(t, srv.Addr())
	waiter, err := dlock.Open(ctx, "etcd://"+p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	got := goLockUnlock(ctx, waiter, key, dlock.WithTTL(time.Second))
	waitWaiters(t, ctx, holder, key, 1)
	p.Blackhole()
	waitWaiters(t, ctx, holder, key, 0) // etcd expired the waiter's lease
	p.Restore()
	waitWaiters(t, ctx, holder, key, 1) // queued again
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("waiter not granted after queueing again (watchdog)")
	}
}
