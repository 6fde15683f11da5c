package etcddlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A Lock and Unlock with a lock-delay on a free key is still two Txns (the
// delay record is written and deleted with the entry) and leaves nothing
// in etcd.
func TestLockDelay_cycle_twoTxnsNothingLeft(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "delay-cycle/" + t.Name()
	c := newCounter()
	client := c.client(t, ctx, srv.Addr(), longTTL)
	// A first cycle takes the lease.
	l, err := client.Lock(ctx, key, dlock.WithLockDelay(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	c.take()
	if l, err = client.Lock(ctx, key, dlock.WithLockDelay(time.Second)); err != nil {
		t.Fatal(err)
	}
	info, err := client.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].LockDelay != time.Second || !info.DelayedUntil.IsZero() {
		t.Errorf("Inspect of a holder with a lock-delay: %+v, want its delay and none in force", info)
	}
	c.take() // the Inspect's requests
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if sent, _ := c.take(); sent["/etcdserverpb.KV/Txn"] != 1 || total(sent) != 1 {
		t.Errorf("Unlock sent %v, want 1 Txn", sent)
	}
	resp, err := admin.Get(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("after a clean Unlock, %d keys left in the queue, first %q", len(resp.Kvs), resp.Kvs[0].Key)
	}
}

// A waiter that leaves while it sits out a lock-delay (its call cancelled
// as its process would die) leaves the ended entry's record: the waiter
// behind it still waits the whole delay, counted from its own sight of it.
func TestLockDelay_waiterLeavesDuringDelay_nextStillWaits(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "delay-crash/" + t.Name()
	url := "etcd://" + srv.Addr()
	op := openClient(t, ctx, url)
	const d = 3 * time.Second
	held, err := openClient(t, ctx, url).Lock(ctx, key, dlock.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	bctx, leave := context.WithCancel(ctx)
	defer leave()
	first := lockAsync(t, func() (*dlock.Lease, error) {
		l, err := openClient(t, ctx, url).Lock(bctx, key)
		if errors.Is(err, context.Canceled) {
			return nil, nil
		}
		return l, err
	})
	waitWaiters(t, ctx, op, key, 1)
	next := lockAsync(t, func() (*dlock.Lease, error) { return openClient(t, ctx, url).Lock(ctx, key) })
	waitWaiters(t, ctx, op, key, 2)

	before := time.Now()
	if _, err := op.Revoke(ctx, key, dlock.RevokeToken(held.Token())); err != nil {
		t.Fatal(err)
	}
	// The delay is in force: the ended holder still shows.
	info, err := op.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].Token != held.Token() {
		t.Fatalf("Inspect after the revoke: %+v, want the ended holder and a delay in force", info)
	}
	leave()
	select {
	case l := <-first:
		if l != nil {
			t.Fatal("the first waiter was granted during the lock-delay")
		}
	case <-ctx.Done():
		t.Fatal("the first waiter did not leave (watchdog)")
	}
	l := awaitLease(t, ctx, next, "the second waiter")
	if at := time.Now(); at.Before(before.Add(d)) {
		t.Errorf("second waiter granted %v after the revoke, before the lock-delay of %v", at.Sub(before), d)
	}
	if l.Token() <= held.Token() {
		t.Errorf("second waiter's token %d, want above the revoked %d", l.Token(), held.Token())
	}
	// Its delay over, the ended holder's record is gone.
	if info, err = op.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	if !info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].Token != l.Token() {
		t.Errorf("Inspect after the grant: %+v, want the new holder alone and no delay", info)
	}
}

// TryLock during a lock-delay fails with ErrLocked; the same Client's
// TryLock succeeds once the delay has passed since it first saw it.
func TestLockDelay_tryLock_lockedUntilOver(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "delay-try/" + t.Name()
	url := "etcd://" + srv.Addr()
	const d = 2 * time.Second
	held, err := openClient(t, ctx, url).Lock(ctx, key, dlock.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	c := openClient(t, ctx, url)
	before := time.Now()
	if _, err := c.Revoke(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock during the lock-delay = %v, want ErrLocked", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := c.TryLock(ctx, key)
		if err == nil {
			if at := time.Now(); at.Before(before.Add(d)) {
				t.Errorf("TryLock granted %v after the revoke, before the lock-delay of %v", at.Sub(before), d)
			}
			if l.Token() <= held.Token() {
				t.Errorf("token %d, want above the revoked %d", l.Token(), held.Token())
			}
			_ = l.Unlock(ctx)
			return
		}
		if !errors.Is(err, dlock.ErrLocked) {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("TryLock never succeeded after the lock-delay (watchdog)")
		}
	}
}

// delayRecords returns the delay records of key, and the revision read.
func delayRecords(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) ([]string, int64) {
	t.Helper()
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	resp, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, kv := range resp.Kvs {
		if strings.Contains(strings.TrimPrefix(string(kv.Key), dir), "/delay-") {
			records = append(records, string(kv.Key))
		}
	}
	return records, resp.Header.Revision
}

// awaitNoRecord waits, at most within, until key has no delay record,
// woken by a watch of its queue, and fails the test if one is left.
func awaitNoRecord(t *testing.T, ctx context.Context, admin *clientv3.Client, key string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	records, rev := delayRecords(t, ctx, admin, key)
	w := admin.Watch(ctx, etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for len(records) != 0 {
		select {
		case _, ok := <-w:
			if !ok {
				t.Fatalf("delay records %q still there after %v, want them gone by themselves", records, within)
			}
		case <-ctx.Done():
			t.Fatalf("delay records %q still there after %v, want them gone by themselves", records, within)
		}
		records, _ = delayRecords(t, context.WithoutCancel(ctx), admin, key)
	}
}

// The delay record of a holder cut off from etcd goes by itself once its
// delay is over, though nobody locks the key again: its lease, the holder's
// TTL plus the delay, is no longer kept alive. The record is still there
// when the entry goes.
func TestLockDelay_holderCutOff_recordGoesByItself(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "delay-gone/" + t.Name()
	p := dlocktest.NewProxy(t, srv.Addr())
	cut, err := dlock.Open(ctx, "etcd://"+p.Addr(), dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	const d = time.Second
	held, err := cut.Lock(ctx, key, dlock.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	if records, _ := delayRecords(t, ctx, admin, key); len(records) != 1 {
		t.Fatalf("delay records of a holder: %q, want one", records)
	}
	p.Blackhole()
	select {
	case <-held.Done():
	case <-ctx.Done():
		t.Fatal("the cut-off holder's lease did not end (watchdog)")
	}
	// Its entry goes at its lease's expiry; the record stays longer.
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := admin.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithPrevKV())
	for ok := false; !ok; {
		resp, err := admin.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		switch n := len(resp.Kvs); {
		case n == 0:
			t.Fatal("the holder's entry and its delay record went together")
		case n == 1 && strings.Contains(strings.TrimPrefix(string(resp.Kvs[0].Key), dir), "/delay-"):
			ok = true // the entry is gone, its record holds the key
		default:
			select {
			case <-w:
			case <-ctx.Done():
				t.Fatal("the cut-off holder's entry did not go (watchdog)")
			}
		}
	}
	if info, err := openClient(t, ctx, "etcd://"+srv.Addr()).Inspect(ctx, key); err != nil || info.DelayedUntil.IsZero() {
		t.Fatalf("Inspect once the entry went: %+v, %v; want a delay in force", info, err)
	}
	awaitNoRecord(t, ctx, admin, key, 30*time.Second)
}

// A revoked holder's delay record goes by itself once the delay is over,
// though the holder's Client lives on and nobody locks the key again.
func TestLockDelay_revoked_recordGoesByItself(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "delay-revoked/" + t.Name()
	url := "etcd://" + srv.Addr()
	const d = time.Second
	held, err := openClient(t, ctx, url).Lock(ctx, key, dlock.WithLockDelay(d))
	if err != nil {
		t.Fatal(err)
	}
	op := openClient(t, ctx, url)
	if _, err := op.Revoke(ctx, key); err != nil {
		t.Fatal(err)
	}
	info, err := op.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.DelayedUntil.IsZero() || len(info.Holders) != 1 || info.Holders[0].Token != held.Token() {
		t.Fatalf("Inspect after the revoke: %+v, want the ended holder and a delay in force", info)
	}
	awaitNoRecord(t, ctx, admin, key, 30*time.Second)
}
