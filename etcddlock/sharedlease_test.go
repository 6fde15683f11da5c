package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lockMany locks n keys named after prefix on c, 16 at a time.
func lockMany(t *testing.T, ctx context.Context, c *dlock.Client, prefix string, n int, opts ...dlock.LockOption) []*dlock.Lease {
	t.Helper()
	leases := make([]*dlock.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				leases[i], errs[i] = c.Lock(ctx, fmt.Sprintf("%s/%d", prefix, i), opts...)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range leases {
			_ = l.Unlock(context.Background())
		}
	})
	return leases
}

// entryLease returns the lease of key's only entry.
func entryLease(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	_, _, lease := entry(t, ctx, admin, key)
	return lease
}

// A client holding 1,000 locks of one TTL renews them all with one
// keep-alive per renewal interval: their entries share one etcd lease, and
// the lease engine renews them in one batch (RenewBatch). Every lock's
// deadline moves on within 10 keep-alives; with a lease per lock, 10
// keep-alives renew at most 10 of them.
func TestSharedLease_thousandLocksRenewedTogether(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	c := newCounter()
	client := c.client(t, ctx, srv.Addr())
	const n = 1000
	leases := lockMany(t, ctx, client, "thousand/"+t.Name(), n, dlock.WithTTL(3*time.Second))
	lease := entryLease(t, ctx, admin, leases[0].Key())
	if last := entryLease(t, ctx, admin, leases[n-1].Key()); last != lease {
		t.Fatalf("entries on leases %x and %x, want one shared lease", lease, last)
	}
	before := make([]time.Time, n)
	for i, l := range leases {
		before[i] = l.Deadline()
	}
	c.take()
	renewed := func() int {
		k := 0
		for i, l := range leases {
			if l.Deadline().After(before[i]) {
				k++
			}
		}
		return k
	}
	const maxKeepAlives = 10
	for sent := 1; sent <= maxKeepAlives; sent++ {
		c.waitSent(t, ctx, "keep-alive", sent)
		if renewed() == n {
			break
		}
	}
	// The reply of the last keep-alive counted may still be on its way.
	got, _ := c.take()
	sent := got["keep-alive"]
	if k := renewed(); k < n && sent <= maxKeepAlives {
		c.waitSent(t, ctx, "keep-alive", 1) // the next one comes after the reply
		got, _ = c.take()
		sent += got["keep-alive"]
	}
	if k := renewed(); k < n {
		t.Fatalf("%d of %d locks renewed after %d keep-alives, want all", k, n, sent)
	}
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
	}
	if sent > maxKeepAlives {
		t.Errorf("%d keep-alives to renew %d locks once, want at most %d", sent, n, maxKeepAlives)
	}
	t.Logf("%d locks renewed with %d keep-alives", n, sent)
}

// An entry deleted by hand ends its own lock, not the others of its
// shared lease, which stay held and renewed.
func TestSharedLease_entryDeleted_endsOnlyItsLock(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	c := newCounter()
	client := c.client(t, ctx, srv.Addr())
	leases := lockMany(t, ctx, client, "delete-one/"+t.Name(), 3, dlock.WithTTL(2*time.Second))
	victim, _, lease := entry(t, ctx, admin, leases[1].Key())
	if _, err := admin.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leases[1].Done():
	case <-ctx.Done():
		t.Fatal("the lock whose entry was deleted is still held (watchdog)")
	}
	if err := leases[1].Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", err)
	}
	// The others live on: renewed after the loss, and released cleanly,
	// which needs their entries.
	c.take()
	c.waitSent(t, ctx, "keep-alive", 2)
	for _, i := range []int{0, 2} {
		if err := leases[i].Err(); err != nil {
			t.Errorf("lock %d: %v, want it held", i, err)
		}
		if err := leases[i].Unlock(ctx); err != nil {
			t.Errorf("Unlock of lock %d: %v", i, err)
		}
	}
	if !leaseAlive(t, ctx, admin, lease) {
		t.Error("shared lease gone: want it kept for the client's other calls")
	}
}

// Revoking the shared lease ends every lock on it, each with its Done
// closed, and a place in a queue; the client's next Lock takes a new lease.
func TestSharedLease_revoked_endsAll(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	prefix := "revoke-all/" + t.Name()
	other := newCounter().client(t, ctx, srv.Addr())
	held, err := other.Lock(ctx, prefix+"/busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	client := newCounter().client(t, ctx, srv.Addr())
	ttl := dlock.WithTTL(2 * time.Second)
	leases := lockMany(t, ctx, client, prefix, 3, ttl)
	waiting := make(chan error, 1)
	go func() {
		l, err := client.Lock(ctx, prefix+"/busy", ttl)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waiting <- err
	}()
	waitWaiters(t, ctx, other, prefix+"/busy", 1)
	lease := entryLease(t, ctx, admin, leases[0].Key())
	if _, err := admin.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatalf("lock %d still held after its lease was revoked (watchdog)", i)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("lock %d: Err = %v, want ErrLeaseLost", i, err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("lock %d: Unlock = %v, want ErrNotHeld", i, err)
		}
	}
	// The waiter lost its place with the lease, and queued again on a
	// new one.
	waitWaiters(t, ctx, other, prefix+"/busy", 1)
	if got := newestLease(t, ctx, admin, prefix+"/busy"); got == lease {
		t.Errorf("waiter queued again on the revoked lease %x", lease)
	}
	l, err := client.Lock(ctx, prefix+"/after", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got := entryLease(t, ctx, admin, prefix+"/after"); got == lease {
		t.Errorf("Lock after the revocation on the revoked lease %x", lease)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("the waiter: %v", err)
	}
}

// newestLease returns the lease of the newest entry of key.
func newestLease(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	k, _ := newestEntry(t, ctx, admin, key)
	resp, err := admin.Get(ctx, k)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("entry %s: %v, %v", k, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// A Lock whose join has an unknown outcome (its reply lost) and that is
// cancelled before its retry leaves no entry, and a late copy of the join
// creates none: the call fenced the shared lease before it deleted its
// entry. The lease lives on for the client's other calls.
func TestSharedLease_lostJoinCancelled_noOrphan(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			key := "lost-join-cancelled/" + t.Name()
			c := newCounter()
			client := c.client(t, ctx, srv.Addr(), longTTL)
			other, err := client.Lock(ctx, key+"/other") // the shared lease, and a lock on it
			if err != nil {
				t.Fatal(err)
			}
			lease := entryLease(t, ctx, admin, key+"/other")
			var holder *dlock.Lease
			if wait {
				h := newCounter().client(t, ctx, srv.Addr())
				if holder, err = h.Lock(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			retry := make(chan struct{})
			c.mu.Lock()
			c.dropNext, c.holdRetry = putApplied, retry
			c.mu.Unlock()
			lctx, cancel := context.WithCancel(ctx)
			got := make(chan error, 1)
			go func() {
				_, err := client.Lock(lctx, key)
				got <- err
			}()
			c.waitSent(t, ctx, "dropped", 1)
			cancel()
			close(retry)
			if err := <-got; !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock = %v, want context.Canceled", err)
			}
			c.replayDropped(t, ctx, admin)
			if holder != nil {
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			checkNothingStored(t, ctx, admin, key)
			if !leaseAlive(t, ctx, admin, lease) {
				t.Error("shared lease revoked: want it kept for the client's other calls")
			}
			if err := other.Unlock(ctx); err != nil {
				t.Errorf("Unlock of the other lock: %v", err)
			}
		})
	}
}

// A join whose comparison of the lease's guard fails (another call fenced
// the lease meanwhile: here a put by hand) created nothing, and is sent
// again with the guard as read.
func TestSharedLease_guardMoved_joinSentAgain(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "guard-moved/" + t.Name()
	c := newCounter()
	client := c.client(t, ctx, srv.Addr(), longTTL)
	first, err := client.Lock(ctx, key+"/first")
	if err != nil {
		t.Fatal(err)
	}
	lease := entryLease(t, ctx, admin, key+"/first")
	guard := fmt.Sprintf("%s\x00g%016x", etcddlock.DefaultPrefix, int64(lease))
	if _, err := admin.Put(ctx, guard, "", clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	c.take()
	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The small Txn of a free key, refused by the guard, says nothing: the
	// full join follows, and is sent again with the guard as read.
	if sent, _ := c.take(); sent[txnMethod] != 3 {
		t.Errorf("sent %v, want 3 Txn: the small one and the join refused by the guard, and the join again", sent)
	}
	checkTokenIsOnlyEntry(t, ctx, admin, key, l)
	for _, l := range []*dlock.Lease{l, first} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// An Unlock whose delete fails (etcd refuses it, here with an error that is
// not retried) gives the shared lease up rather than leave its entry
// holding the key on a lease the client keeps renewing: the lease is
// revoked, the key is free at once, and the client's other lock on that
// lease is lost with it.
func TestSharedLease_releaseFails_givesLeaseUp(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	prefix := "release-fails/" + t.Name()
	c := newCounter()
	client := c.client(t, ctx, srv.Addr(), longTTL)
	leases := lockMany(t, ctx, client, prefix, 2)
	lease := entryLease(t, ctx, admin, leases[0].Key())
	c.refuseNext(txnMethod, 2, status.Error(codes.Internal, "test: refused"))
	if err := leases[0].Unlock(ctx); err == nil {
		t.Fatal("Unlock with its delete refused succeeded")
	}
	if leaseAlive(t, ctx, admin, lease) {
		t.Error("the shared lease is alive after a failed Unlock: its entry would hold the key")
	}
	other := newCounter().client(t, ctx, srv.Addr())
	l, err := other.TryLock(ctx, leases[0].Key())
	if err != nil {
		t.Fatalf("TryLock of the key whose Unlock failed: %v, want it free", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leases[1].Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of the other lock on the given-up lease: %v, want ErrNotHeld", err)
	}
	l, err = client.Lock(ctx, prefix+"/after")
	if err != nil {
		t.Fatal(err)
	}
	if got := entryLease(t, ctx, admin, prefix+"/after"); got == lease {
		t.Errorf("Lock after the failed Unlock on the given-up lease %x", lease)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
