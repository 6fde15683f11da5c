package etcddlock_test

import (
	"context"
	"fmt"
	"github.com/dlockdev/dlock/etcddlock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

const (
	txnMethod       = "/etcdserverpb.KV/Txn"
	keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"
	grantMethod     = "/etcdserverpb.Lease/LeaseGrant"
	putMethod       = "/etcdserverpb.KV/Put"
)

// A busy etcd refuses writes with "too many requests" (its apply lags its
// commit). Lock, TryLock and Unlock retry until etcd takes the write: the
// call succeeds, having sent each refused Txn once more. etcd refuses before
// proposing, so the refused writes certainly did nothing: Unlock needs no
// fence (a Put of the lease's guard, as after a write of unknown outcome),
// and the lease lives on.
func TestLock_tooManyRequests_retried(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	const refusals = 3
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			key := "too-many-requests/" + t.Name()
			c := newCounter()
			client := c.client(t, ctx, srv.Addr(), longTTL)
			lock := lockOrTryLock(client, wait)
			c.refuseNext(txnMethod, refusals, rpctypes.ErrGRPCRequestTooManyRequests)
			l, err := lock(ctx, key)
			if err != nil {
				t.Fatalf("lock with %d refusals: %v", refusals, err)
			}
			sent, _ := c.take()
			if sent[txnMethod] != refusals+1 || sent["refused "+txnMethod] != refusals || sent[grantMethod] != 1 {
				t.Errorf("lock sent %v, want %d Txn of which %d refused, and 1 LeaseGrant", sent, refusals+1, refusals)
			}
			lease := checkTokenIsOnlyEntry(t, ctx, admin, key, l)

			c.refuseNext(txnMethod, refusals, rpctypes.ErrGRPCRequestTooManyRequests)
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("unlock with %d refusals: %v", refusals, err)
			}
			sent, _ = c.take()
			if sent[txnMethod] != refusals+1 || sent["refused "+txnMethod] != refusals || sent[putMethod] != 0 {
				t.Errorf("unlock sent %v, want %d Txn of which %d refused, and no Put (a fence)", sent, refusals+1, refusals)
			}
			checkNoEntriesAfterUnlock(t, ctx, admin, key)
			if !leaseAlive(t, ctx, admin, lease) {
				t.Error("lease revoked after refusals: a refused write did nothing, the lease should be kept")
			}
		})
	}
}

// A waiter's keep-alive that etcd refuses because it is busy or between
// leaders does not cost the waiter its place: it retries while its lease
// certainly lives, and is granted the key from the same entry, with the
// same lease (one LeaseGrant, one join Txn).
func TestLock_waiterKeepAliveRefused_keepsPlace(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	const refusals = 3
	for _, e := range []error{
		rpctypes.ErrGRPCRequestTooManyRequests,
		rpctypes.ErrGRPCTimeoutWaitAppliedIndex,
		rpctypes.ErrGRPCLeaderChanged,
		rpctypes.ErrGRPCNotLeader,
		rpctypes.ErrGRPCNoLeader,
	} {
		t.Run(rpctypes.ErrorDesc(e), func(t *testing.T) {
			key := "keepalive-refused/" + t.Name()
			holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
			lh, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			c := newCounter()
			// The shortest TTL: the waiter renews within a third of it.
			waiter := c.client(t, ctx, srv.Addr(), dlock.WithTTL(time.Second))
			c.refuseNext(keepAliveMethod, refusals, e)
			got := make(chan error, 1)
			var token uint64
			go func() {
				l, err := waiter.Lock(ctx, key)
				if err == nil {
					token = l.Token()
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			// Every refusal, then one keep-alive that etcd answered.
			c.waitSent(t, ctx, "keep-alive", 1)
			info, err := holder.Inspect(ctx, key)
			if err != nil || len(info.Waiters) != 1 {
				t.Fatalf("Inspect = %+v, %v; want one waiter", info, err)
			}
			if err := lh.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter: %v", err)
			}
			sent, _ := c.take()
			if sent["refused "+keepAliveMethod] != refusals {
				t.Errorf("sent %v, want %d refused keep-alives", sent, refusals)
			}
			// Queued once: one lease, one join (after the Txn that takes
			// a free key: its Client had not seen the key busy), one release.
			if sent[grantMethod] != 1 || sent[txnMethod] != 3 {
				t.Errorf("waiter sent %v, want 1 LeaseGrant and 3 Txn: it queued again instead of keeping its place", sent)
			}
			if token <= lh.Token() {
				t.Errorf("waiter's token %d not above the holder's %d", token, lh.Token())
			}
		})
	}
}

// A waiter whose keep-alives go unanswered for longer than its lease is
// certainly alive does not give up its place as long as etcd kept the
// lease: a late renewal that succeeds proves that etcd never dropped it.
// Here another client keeps the waiter's lease alive while the waiter's own
// keep-alives are refused; the waiter is granted the key from its first
// entry (one LeaseGrant, one join).
func TestLock_waiterRenewalOverdue_keepsPlace(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "renewal-overdue/" + t.Name()
	holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
	lh, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, _, holderLease := entry(t, ctx, admin, key)
	c := newCounter()
	waiter := c.client(t, ctx, srv.Addr(), dlock.WithTTL(time.Second))
	// The waiter starts renewing at a third of its 1 s TTL, and retries
	// with backoff: waits of at least 2.5, 5, 10, … ms (half of 5 ms
	// doubling), so its 10th attempt comes at least 1.27 s after its
	// first, later than the moment its lease may have lapsed (≈ 0.66 s
	// after the first attempt). 16 refusals outlast that moment.
	const refusals = 16
	c.refuseNext(keepAliveMethod, refusals, rpctypes.ErrGRPCRequestTooManyRequests)
	got := goLockUnlock(ctx, waiter, key)
	waitWaiters(t, ctx, holder, key, 1)
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var waiterLease clientv3.LeaseID
	for _, kv := range resp.Kvs {
		if id := clientv3.LeaseID(kv.Lease); id != holderLease {
			waiterLease = id
		}
	}
	// Keep the waiter's lease alive on its behalf.
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	kch, err := admin.KeepAlive(kctx, waiterLease)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range kch {
		}
	}()
	c.waitSent(t, ctx, "refused "+keepAliveMethod, refusals)
	c.waitSent(t, ctx, "keep-alive", 1) // the first one let through
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	sent, _ := c.take()
	if sent[grantMethod] != 1 || sent[txnMethod] != 3 { // a free key's Txn, the join, the release
		t.Errorf("waiter sent %v, want 1 LeaseGrant and 3 Txn: it queued again instead of keeping its place", sent)
	}
}

// A release whose reply is lost after etcd applied it ("timed out", "leader
// changed", a broken connection) is retried; the retry finds the entry
// gone, and Unlock reports success, not ErrNotHeld: the lease is still
// alive, so the entry did not go with an expired lease.
func TestUnlock_lostReleaseReply(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "lost-release-reply/" + t.Name()
	c, _, l := countedHolder(t, ctx, srv.Addr(), key)
	c.dropNextReply(func(txn *pb.TxnRequest, _ *pb.TxnResponse) bool {
		return len(txn.Success) > 0 && txn.Success[0].GetRequestDeleteRange() != nil // the release
	})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after a lost reply: %v", err)
	}
	sent, _ := c.take()
	if sent[txnMethod] != 3 {
		t.Errorf("sent %v, want 3 Txn: the lone holder's release whose reply was lost, its retry, and the full release (the retry cannot tell a deleted entry from a tail)", sent)
	}
	checkNoEntriesAfterUnlock(t, ctx, admin, key)
}

// checkNoEntriesAfterUnlock fails the test if etcd still stores an entry
// for key.
func checkNoEntriesAfterUnlock(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) {
	t.Helper()
	if left, err := (&harness{admin: admin}).Leftovers(ctx, key); err != nil || len(left) != 0 {
		t.Errorf("after Unlock: entries %v, %v; want none", left, err)
	}
}
