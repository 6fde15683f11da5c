package etcddlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// How a semaphore's waiter waits (queue.Listing.Parallel): each of the
// first limit waiters counts the deletes of the entries ahead of it, a
// later one waits for a delete of the limit+1 entries nearest ahead of it
// and counts on those watches once a read makes it one of the first, and
// nobody writes a grant notice.

// heldPermits takes limit permits of key on one client and returns them.
func heldPermits(t *testing.T, ctx context.Context, addr, key string, limit int) (*dlock.Client, []*dlock.Lease) {
	t.Helper()
	c := newCounter().client(t, ctx, addr, longTTL)
	held := make([]*dlock.Lease, limit)
	for i := range held {
		l, err := permit(key, limit)(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	return c, held
}

// queuedPermit starts a waiter for a permit of key on a client of its own,
// and waits until it watches.
func queuedPermit(t *testing.T, ctx context.Context, addr, key string, limit int) (*counter, <-chan lockResult) {
	t.Helper()
	c := newCounter()
	got := goAcquire(ctx, c.client(t, ctx, addr, longTTL), permit(key, limit))
	c.waitCreated(t, ctx, 2) // the driver's own watch, and the wait's
	return c, got
}

// A waiter granted a permit writes nothing: no grant notice for the waiter
// behind it, which does not wait for one. Limit 2: h1 and h2 hold, p and
// q wait; h1 releases; from its wait to its grant p sends nothing: the
// delete it counted grants it, with no read (of the queue, or of its own
// entry: its lease's liveness proves that) and no write.
func TestSemaphore_handOff_writesNoNotice(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-no-notice/" + t.Name()
	_, held := heldPermits(t, ctx, srv.Addr(), key, 2)
	pc, pGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	_, qGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	pc.take()
	unlock(t, ctx, held[0])
	p := awaitLock(t, ctx, pGot)
	if sent, _ := pc.take(); sent[txnMethod] != 0 || sent[queueRead] != 0 || sent[rangeMethod] != 0 || sent[readTxn] != 0 {
		t.Errorf("p sent %v from its wait to its grant, want no Txn and no read", sent)
	}
	unlock(t, ctx, p, held[1])
	// q is granted once they released.
	unlockAll(t, ctx, srv.Addr(), key, awaitLock(t, ctx, qGot))
}

// One of the first limit waiters counts the departures ahead of it and is
// granted by the count. Limit 2: h1 and h2 hold, p and q wait (q behind
// three entries, two of which must go); h1 releases, then h2: q reads the
// queue neither at h1's release, nor at p's grant, nor at its own.
func TestSemaphore_firstWaiters_countDepartures(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-count/" + t.Name()
	_, held := heldPermits(t, ctx, srv.Addr(), key, 2)
	_, pGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	qc, qGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	qc.take()
	unlock(t, ctx, held[0])
	p := awaitLock(t, ctx, pGot)
	unlock(t, ctx, held[1])
	q := awaitLock(t, ctx, qGot)
	if sent, _ := qc.take(); sent[queueRead] != 0 {
		t.Errorf("q read the queue %d times from its wait to its grant, want 0: %v", sent[queueRead], sent)
	}
	if q.Token() <= p.Token() {
		t.Errorf("q's token %d not above p's %d", q.Token(), p.Token())
	}
	unlockAll(t, ctx, srv.Addr(), key, p, q)
}

// Permits released together are taken together, each by its own waiter on
// the events of its own watch: none waits for another's grant or notice.
// Limit 3: h0, h1 and h2 hold; w0, w1 and w2 wait, each on its own client.
// h0 and h1 release: w0 and w1 are granted, neither reading the queue nor
// writing, and w2 still waits.
func TestSemaphore_releasesTogether_takenTogether(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-together/" + t.Name()
	const limit = 3
	holder, held := heldPermits(t, ctx, srv.Addr(), key, limit)
	var cs []*counter
	var gots []<-chan lockResult
	for range 3 {
		c, got := queuedPermit(t, ctx, srv.Addr(), key, limit)
		cs, gots = append(cs, c), append(gots, got)
	}
	for _, c := range cs {
		c.take()
	}
	unlock(t, ctx, held[:2]...)
	var ls []*dlock.Lease
	for i := range 2 {
		ls = append(ls, awaitLock(t, ctx, gots[i]))
		if sent, _ := cs[i].take(); sent[txnMethod] != 0 || sent[queueRead] != 0 {
			t.Errorf("w%d sent %v from its wait to its grant, want no Txn and no read of the queue", i, sent)
		}
	}
	info := inspect(t, ctx, holder, key)
	if len(info.Holders) != limit || len(info.Waiters) != 1 {
		t.Errorf("Inspect: %d holders, %d waiters; want %d and 1", len(info.Holders), len(info.Waiters), limit)
	}
	select {
	case r := <-gots[2]:
		t.Errorf("w2 returned (%v) with %d permits held ahead of it", r.err, limit)
	default:
	}
	unlock(t, ctx, append(ls, held[2])...)
	unlock(t, ctx, awaitLock(t, ctx, gots[2]))
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// A later waiter watches one entry more than the limit nearest ahead of
// it, so that the read after that one goes finds it one of the first limit
// waiters, which counts on the same watches: the release that frees its
// permit grants it with no read and no watch created. Limit 2: h0 and h1
// hold, p and q wait, r waits behind them (watching h1, p and q); h0
// releases (p is granted), then h1 (q is granted, r reads the queue and
// counts p and q); p releases: r is granted by the count alone.
func TestSemaphore_laterWaiter_grantedByCount(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-later-count/" + t.Name()
	_, held := heldPermits(t, ctx, srv.Addr(), key, 2)
	_, pGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	_, qGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	rc, rGot := queuedPermit(t, ctx, srv.Addr(), key, 2)
	unlock(t, ctx, held[0])
	p := awaitLock(t, ctx, pGot)
	rc.take()
	unlock(t, ctx, held[1])
	q := awaitLock(t, ctx, qGot)
	rc.waitSent(t, ctx, queueRead, 1) // r woke at h1's release
	rc.take()
	unlock(t, ctx, p)
	r := awaitLock(t, ctx, rGot)
	if sent, _ := rc.take(); sent[queueRead] != 0 || sent[rangeMethod] != 0 || sent[readTxn] != 0 || sent[txnMethod] != 0 || sent["watch create"] != 0 {
		t.Errorf("r sent %v from p's release to its grant, want no read, no Txn and no watch created", sent)
	}
	if r.Token() <= q.Token() {
		t.Errorf("r's token %d not above q's %d", r.Token(), q.Token())
	}
	unlockAll(t, ctx, srv.Addr(), key, q, r)
}

// A later waiter of limit 1 that joins behind the tail waits for the entry
// just ahead, which the tail its join read names, so it waits with no read
// of the queue. h holds, p waits, q joins behind p.
func TestSemaphore_laterWaiter_behindTail_noRead(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-later/" + t.Name()
	_, held := heldPermits(t, ctx, srv.Addr(), key, 1)
	_, pGot := queuedPermit(t, ctx, srv.Addr(), key, 1)
	qc := newCounter()
	qClient := qc.client(t, ctx, srv.Addr(), longTTL)
	qc.take() // not New's check
	qGot := goAcquire(ctx, qClient, permit(key, 1))
	qc.waitCreated(t, ctx, 2) // q waits for p
	if sent, _ := qc.take(); sent[queueRead] != 0 {
		t.Errorf("q read the queue %d times before it waited, want 0: %v", sent[queueRead], sent)
	}
	unlock(t, ctx, held[0])
	unlock(t, ctx, awaitLock(t, ctx, pGot))
	// q is granted once p released.
	unlockAll(t, ctx, srv.Addr(), key, awaitLock(t, ctx, qGot))
}

// A permit that goes between a first waiter's read of the queue and the
// start of its watch is counted by the read at the watch's start, which
// grants the waiter with no second read of the queue. Limit 2: h1 and h2
// hold; q counts them, and h1 releases before q's watch starts.
func TestSemaphore_departureBeforeWatch_counted(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-before-watch/" + t.Name()
	_, held := heldPermits(t, ctx, srv.Addr(), key, 2)
	qc := newCounter()
	cli := qc.etcdClient(t, srv.Addr())
	var once sync.Once
	released := make(chan error, 1)
	q, err := etcddlock.NewWithBeforeWatchForTest(ctx, cli, &etcddlock.Options{ClientOptions: []dlock.Option{longTTL}}, func(ctx context.Context, _ string) {
		once.Do(func() { released <- held[0].Unlock(ctx) })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	qc.take() // not New's check
	l, err := permit(key, 2)(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("q never waited: the hook did not run")
	}
	if sent, _ := qc.take(); sent[queueRead] != 1 {
		t.Errorf("q read the queue %d times, want 1 (its count at the join): %v", sent[queueRead], sent)
	}
	unlockAll(t, ctx, srv.Addr(), key, l, held[1])
}

// A release reaches only the waiters that count it, not every waiter of
// the queue: each watches the keys it counts, one watch a key. Limit 2:
// h0 and h1 hold, 20 permits wait, each on its own client; h0's delete
// comes to the watches of at most 2·limit of them (the first limit
// waiters count it), however many wait.
func TestSemaphore_release_reachesBoundedWaiters(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-herd/" + t.Name()
	const limit, waiters = 2, 20
	_, held := heldPermits(t, ctx, srv.Addr(), key, limit)
	cs := make([]*counter, waiters)
	gots := make([]<-chan lockResult, waiters)
	for i := range cs {
		cs[i], gots[i] = queuedPermit(t, ctx, srv.Addr(), key, limit)
	}
	admin := adminClient(t, srv.Addr())
	dels := admin.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	if wr := <-dels; !wr.Created {
		t.Fatalf("admin watch not created: %v", wr.Err())
	}
	unlock(t, ctx, held[0])
	wr := <-dels
	if len(wr.Events) == 0 {
		t.Fatalf("no delete seen for the release: %v", wr.Err())
	}
	released := string(wr.Events[0].Kv.Key)
	ls := []*dlock.Lease{held[1]}
	for _, got := range gots {
		// Each release after h0's grants the next waiter: drain them all,
		// so that every event of h0's delete has been received.
		ls = append(ls, awaitLock(t, ctx, got))
		unlock(t, ctx, ls[0])
		ls = ls[1:]
	}
	unlock(t, ctx, ls...)
	reached := 0
	for _, c := range cs {
		_, evs := c.take()
		if slices.ContainsFunc(evs, func(e deleteEvent) bool { return e.key == released }) {
			reached++
		}
	}
	t.Logf("h0's release reached %d of %d waiters' watches", reached, waiters)
	if reached > 2*limit {
		t.Errorf("h0's release reached %d of %d waiters' watches, want at most %d", reached, waiters, 2*limit)
	}
	checkNothingStored(t, ctx, admin, key)
}

// unlock unlocks each lease in turn.
func unlock(t *testing.T, ctx context.Context, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// unlockAll unlocks each lease in turn and checks that key's queue keeps
// nothing on the server afterwards.
func unlockAll(t *testing.T, ctx context.Context, addr, key string, leases ...*dlock.Lease) {
	t.Helper()
	unlock(t, ctx, leases...)
	checkNothingStored(t, ctx, adminClient(t, addr), key)
}
