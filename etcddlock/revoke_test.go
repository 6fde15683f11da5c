package etcddlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revoker opens an operator's driver of its own on the shared etcd.
func revoker(t *testing.T, ctx context.Context, addr string) driver.Revoker {
	t.Helper()
	d, err := etcddlock.OpenDriverForTest(ctx, "etcd://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	r, ok := d.(driver.Revoker)
	if !ok {
		t.Fatal("the etcd driver does not implement driver.Revoker")
	}
	return r
}

// lockAsync starts lock in a goroutine; the channel receives its lease, or
// nil after reporting its error with t.Error.
func lockAsync(t *testing.T, lock func() (*dlock.Lease, error)) <-chan *dlock.Lease {
	ch := make(chan *dlock.Lease, 1)
	go func() {
		l, err := lock()
		if err != nil {
			t.Error(err)
		}
		ch <- l
	}()
	return ch
}

// awaitLease waits for a lease from ch, failing the test at ctx's end.
func awaitLease(t *testing.T, ctx context.Context, ch <-chan *dlock.Lease, what string) *dlock.Lease {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.Fatalf("%s: not granted", what)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		return l
	case <-ctx.Done():
		t.Fatalf("%s: not granted (watchdog)", what)
	}
	return nil
}

// awaitLost waits until l's Done closes and checks that it says lost.
func awaitLost(t *testing.T, ctx context.Context, l *dlock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the revoked holder's lease is still held (watchdog)")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("revoked holder's Err = %v, want ErrLeaseLost", err)
	}
}

// A revoke by token deletes the holder's entry alone: the waiter is
// granted with a larger token, the holder's Done closes and its Unlock
// returns ErrNotHeld, and its Client's other lock, on the same etcd lease,
// is still held.
func TestRevoke_byToken_waiterGrantedAndHolderLost(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "revoke/" + t.Name()
	a, b := openClient(t, ctx, "etcd://"+srv.Addr()), openClient(t, ctx, "etcd://"+srv.Addr())
	held, err := a.Lock(ctx, key, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.Lock(ctx, key+"/other", dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next := lockAsync(t, func() (*dlock.Lease, error) { return b.Lock(ctx, key, dlock.WithTTL(2*time.Second)) })
	waitWaiters(t, ctx, a, key, 1)

	revoked, err := revoker(t, ctx, srv.Addr()).Revoke(ctx, key, held.Token())
	if err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0].Token != held.Token() || revoked[0].Mode != driver.Exclusive {
		t.Errorf("Revoke returned %+v, want the holder of token %d", revoked, held.Token())
	}
	l := awaitLease(t, ctx, next, "the waiter")
	if l.Token() <= held.Token() {
		t.Errorf("waiter granted with token %d, want above the revoked %d", l.Token(), held.Token())
	}
	awaitLost(t, ctx, held)
	if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("revoked holder's Unlock = %v, want ErrNotHeld", err)
	}
	if err := other.Err(); err != nil {
		t.Errorf("the holder's other lock: %v, want it held (its etcd lease is shared)", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Errorf("the holder's other lock: Unlock = %v", err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("the new holder's lease after the old one's Unlock: %v", err)
	}
}

// A token nobody holds revokes nothing: ErrNotHeld, and every key of the
// queue keeps its revision.
func TestRevoke_unknownToken_changesNothing(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "revoke/" + t.Name()
	admin := adminClient(t, srv.Addr())
	a := openClient(t, ctx, "etcd://"+srv.Addr())
	held, err := a.Lock(ctx, key, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	r := revoker(t, ctx, srv.Addr())
	before, err := admin.Get(ctx, etcddlock.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Revoke(ctx, key, held.Token()+1)
	if !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Revoke of an unknown token = %v, want ErrNotHeld", err)
	}
	after, err := admin.Get(ctx, etcddlock.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Errorf("etcd's revision moved from %d to %d: the refused revoke wrote", before.Header.Revision, after.Header.Revision)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock after a refused revoke: %v", err)
	}
	// A free key: nothing to revoke, and no error.
	if got, err := r.Revoke(ctx, key, 0); err != nil || len(got) != 0 {
		t.Errorf("Revoke of a free key = %v, %v; want none, nil", got, err)
	}
}

// A semaphore's permit revoked frees that permit only: the waiter is
// granted, the other holder keeps its permit.
func TestRevoke_semaphorePermit_freesOne(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "revoke/" + t.Name()
	c := openClient(t, ctx, "etcd://"+srv.Addr())
	sem := c.Semaphore(key, 2)
	first, err := sem.Acquire(ctx, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	second, err := sem.Acquire(ctx, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next := lockAsync(t, func() (*dlock.Lease, error) { return sem.Acquire(ctx, longTTL) })
	waitWaiters(t, ctx, c, key, 1)
	revoked, err := revoker(t, ctx, srv.Addr()).Revoke(ctx, key, second.Token())
	if err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0].Token != second.Token() {
		t.Errorf("Revoke returned %+v, want the permit of token %d", revoked, second.Token())
	}
	l := awaitLease(t, ctx, next, "the waiter")
	if l.Token() <= second.Token() {
		t.Errorf("waiter granted with token %d, want above the revoked %d", l.Token(), second.Token())
	}
	awaitLost(t, ctx, second)
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 2 || info.Holders[0].Token != first.Token() || info.Holders[1].Token != l.Token() {
		t.Errorf("holders after the revoke: %+v, want tokens %d and %d", info.Holders, first.Token(), l.Token())
	}
}

// Token 0 revokes every holder (two readers) and the writer waiting behind
// them is granted; a retry finds nobody to revoke.
func TestRevoke_all_readersThenWriterGranted(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "revoke/" + t.Name()
	a, b := openClient(t, ctx, "etcd://"+srv.Addr()), openClient(t, ctx, "etcd://"+srv.Addr())
	rw := a.RWMutex(key)
	r1, err := rw.RLock(ctx, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(ctx, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next := lockAsync(t, func() (*dlock.Lease, error) { return b.RWMutex(key).Lock(ctx, longTTL) })
	waitWaiters(t, ctx, a, key, 1)
	r := revoker(t, ctx, srv.Addr())
	revoked, err := r.Revoke(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 2 || revoked[0].Token != r1.Token() || revoked[1].Token != r2.Token() {
		t.Errorf("Revoke returned %+v, want the readers %d and %d", revoked, r1.Token(), r2.Token())
	}
	w := awaitLease(t, ctx, next, "the writer")
	if w.Token() <= r2.Token() {
		t.Errorf("writer granted with token %d, want above %d", w.Token(), r2.Token())
	}
	awaitLost(t, ctx, r1)
	awaitLost(t, ctx, r2)
	if got, err := r.Revoke(ctx, key, r1.Token()); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("a retry of the revoke = %v, %v; want ErrNotHeld", got, err)
	}
}
