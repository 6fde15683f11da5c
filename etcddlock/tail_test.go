package etcddlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A holder alone in its queue is one etcd key, its entry: a join or a try
// into an empty queue writes no tail. Every kind, waiting and trying. The
// first call behind it writes the tail (naming its own entry), and the
// release of both leaves nothing.
func TestLoneHolder_oneKey(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	c := newCounter().client(t, ctx, srv.Addr(), longTTL)
	c2 := newCounter().client(t, ctx, srv.Addr(), longTTL)
	campaign := func(key string) acquirer {
		return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			l, err := c.Election(key).Campaign(ctx, "v")
			if err != nil {
				return nil, err
			}
			return l.Lease(), nil
		}
	}
	for _, k := range []struct {
		name   string
		acq    func(key string) acquirer
		shared bool // a second call is granted beside the first
	}{
		{"lock", func(key string) acquirer {
			return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Lock(ctx, key) }
		}, false},
		{"trylock", func(key string) acquirer {
			return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.TryLock(ctx, key) }
		}, false},
		{"semaphore", func(key string) acquirer { return permit(key, 2) }, true},
		{"trysemaphore", func(key string) acquirer {
			return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
				return c.Semaphore(key, 2).TryAcquire(ctx)
			}
		}, true},
		{"reader", reader, true},
		{"writer", writer, false},
		{"election", campaign, false},
	} {
		t.Run(k.name, func(t *testing.T) {
			key := "lone/" + t.Name()
			acq := k.acq(key)
			l1, err := acq(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
			keys, err := stored(ctx, admin, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 1 || !strings.HasPrefix(keys[0], dir) {
				t.Fatalf("a lone holder stores %q, want its entry alone", keys)
			}
			// The second call: a holder beside it, or a waiter (a try
			// behind a holder is refused; a waiting call stands in).
			if !k.shared && strings.HasPrefix(k.name, "try") {
				acq = func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Lock(ctx, key) }
			}
			got := goAcquire(ctx, c2, acq)
			var l2 *dlock.Lease
			if k.shared {
				l2 = awaitLock(t, ctx, got)
			} else {
				waitWaiters(t, ctx, c, key, 1)
			}
			resp, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			if err != nil {
				t.Fatal(err)
			}
			tail, err := admin.Get(ctx, strings.TrimSuffix(dir, "/")+"\x00tail")
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 2 || len(tail.Kvs) != 1 || !strings.HasSuffix(string(tail.Kvs[0].Value), string(resp.Kvs[1].Key)) ||
				tail.Kvs[0].ModRevision != resp.Kvs[1].CreateRevision {
				t.Fatalf("behind a lone holder: entries %v, tail %v; want two entries and the tail naming the second, written with it", resp.Kvs, tail.Kvs)
			}
			if err := l1.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if l2 == nil {
				l2 = awaitLock(t, ctx, got)
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			checkNothingStored(t, ctx, admin, key)
		})
	}
}

// A join that finds no tail, and a queue it cannot join behind in the same
// Txn (a release marker in it), queues behind the newest entry its join
// read (behind); if another waiter queued between that read and its own
// entry's creation, it waits for that waiter, not for the entry it read.
// Had it taken the entry it read for the one just ahead, the holder's
// release, with its marker, would grant it beside the other waiter.
func TestLock_behindNoTail_otherJoinedBetween_waitsForIt(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "lone-between/" + t.Name()
	// The holder, granted by the release marker of the entry ahead of it
	// (kept until its own release), and no tail: the waiter behind it gave
	// up.
	first, lf := lockedHolder(t, ctx, srv.Addr(), key, longTTL)
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	gotH := goLock(ctx, holder, key)
	waitWaiters(t, ctx, first, key, 1)
	holderKey, _ := newestEntry(t, ctx, admin, key)
	xctx, cancelX := context.WithCancel(ctx)
	gotX := goLock(xctx, newCounter().client(t, ctx, srv.Addr(), longTTL), key)
	waitWaiters(t, ctx, first, key, 2)
	if err := lf.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lh := awaitLock(t, ctx, gotH)
	cancelX()
	if r := <-gotX; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the waiter that gives up: %v, want context.Canceled", r.err)
	}
	if keys, err := stored(ctx, admin, key); err != nil || len(keys) != 2 || !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, releasedSuffix) }) {
		t.Fatalf("stored %q, %v; want the holder's entry and a marker, no tail", keys, err)
	}

	c1 := newCounter()
	w1 := c1.client(t, ctx, srv.Addr(), longTTL)
	release := make(chan struct{})
	held := c1.holdNextTxn(isBehindTxn, release)
	got1 := goLock(ctx, w1, key)
	select {
	case <-held: // its join read the holder's entry, and no tail
	case <-ctx.Done():
		t.Fatal("the first waiter's Txn after its join was not sent (watchdog)")
	}
	c2 := newCounter()
	got2 := goLock(ctx, c2.client(t, ctx, srv.Addr(), longTTL), key)
	waitWaiters(t, ctx, holder, key, 1)
	second, _ := newestEntry(t, ctx, admin, key)
	close(release)
	waitWaiters(t, ctx, holder, key, 2)
	c1.waitCreated(t, ctx, 2) // its wait's watch
	if w := c1.watchedKeys(); len(w) != 2 || w[1] != second {
		t.Errorf("the first waiter watched %q, want the driver's watch and the entry just ahead of it, %q (not the holder's, %q)", w, second, holderKey)
	}

	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := awaitLock(t, ctx, got2)
	select {
	case r := <-got1:
		t.Fatalf("the first waiter was granted (%v, %v) while the one ahead of it holds the key", r.l, r.err)
	default:
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := awaitLock(t, ctx, got1).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, admin, key)
}

// A Lock of a key its Client has not seen busy takes it with a small Txn:
// etcd keeps every request in memory until its next snapshot, and the
// join that serves every state of a queue is five times larger. A key
// seen busy is joined with the full Txn at once: a contended key costs no
// extra request.
func TestLock_freeKey_smallTxn_busyKey_oneJoin(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "free-small/" + t.Name()
	c, client, l := countedHolder(t, ctx, srv.Addr(), key)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := c.take()
	sizes := c.takeTxnSizes()
	if want := map[string]int{"/etcdserverpb.KV/Txn": 2}; !sameCounts(sent, want) {
		t.Errorf("a cycle of a free key sent %v, want %v", sent, want)
	}

	// Busy: another Client waits while this one holds, and queues behind
	// it; then, its Lock granted and released, it queues again behind
	// this one.
	other := newCounter()
	oc := other.client(t, ctx, srv.Addr(), longTTL)
	got := goLock(ctx, oc, key)
	waitWaiters(t, ctx, client, key, 1)
	sent, _ = other.take()
	joins := other.takeTxnSizes()
	if sent["/etcdserverpb.KV/Txn"] != 2 || len(joins) != 2 {
		t.Fatalf("the first waiter of a key its Client had not seen busy sent %v, want 2 Txn: the free key's, then the join", sent)
	}
	if len(sizes) != 2 || sizes[1] != joins[0] || 2*sizes[1] > joins[1] {
		t.Errorf("Txn sizes: %v for a cycle, %v for the first waiter; want the take of a free key (the second of the cycle, the first of the waiter) at most half the full join's", sizes, joins)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := awaitLock(t, ctx, got).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err = client.Lock(ctx, key); err != nil {
		t.Fatal(err)
	}
	other.take()
	got = goLock(ctx, oc, key)
	waitWaiters(t, ctx, client, key, 1)
	if sent, _ := other.take(); sent["/etcdserverpb.KV/Txn"] != 1 {
		t.Errorf("a waiter of a key its Client saw busy sent %v, want 1 Txn: the join", sent)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := awaitLock(t, ctx, got).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}
