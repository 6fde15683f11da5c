package etcddlock_test

import (
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// etcd keeps every write request in memory until its next snapshot (its
// Raft log), and each held lock's key in its index and its lease's table:
// the Txn that takes a free key is no larger than the one of etcd's own
// concurrency.Mutex for the same key under the same prefix, and the entry's
// name is the lease's 16 hex digits and 2 more for the first name a lease
// lends ("<lease>11"). A short key, as the benchmark's ("k123"), where the
// fixed parts of the request weigh most, and metadata of a fixed size: a
// short host name, as the benchmark machine's, and a 5-digit pid.
func TestLock_freeKey_requestNoLargerThanMutex(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	key := "kfree"
	c := newCounter()
	client := c.client(t, ctx, srv.Addr(), longTTL, dlock.WithMetadata(dlock.Metadata{Host: "vm", PID: 12345}))
	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	create := c.takeTxnSizes()
	etcdKey, _, lease := entry(t, ctx, admin, key)
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	if name := etcdKey[len(dir):]; len(name) != 18 {
		t.Errorf("entry name %q: %d bytes, want 18 (the lease's id %x in 16 hex digits, then 11)", name, len(name), int64(lease))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// etcd's Mutex, through a counted client of the same server, on the
	// same key: its keys are the prefix, "/" and the lease's id in hex.
	mc := newCounter()
	s, err := concurrency.NewSession(mc.etcdClient(t, srv.Addr()), concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m := concurrency.NewMutex(s, dir[:len(dir)-1])
	mc.takeTxnSizes()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	mutex := mc.takeTxnSizes()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if len(create) != 1 || len(mutex) != 1 {
		t.Fatalf("Txn sizes: %v taking a free key, %v for the Mutex's Lock; want one each", create, mutex)
	}
	t.Logf("Txn that takes a free key: %d bytes; the Mutex's: %d", create[0], mutex[0])
	if create[0] > mutex[0] {
		t.Errorf("the Txn that takes a free key is %d bytes, the Mutex's %d: want at most the Mutex's", create[0], mutex[0])
	}
}

// The release of a lone holder (a key taken by the small Txn) is one Txn
// that deletes its entry if there is no tail; with a waiter behind it (a
// tail), that Txn changes nothing and the full release follows, which
// writes the release marker that grants the waiter with no read; the key
// is then busy for the holder's Client, whose next cycle sends the full
// join and the full release at once.
func TestUnlock_loneHolder_smallTxn_waiterBehind_fullRelease(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "lone-release/" + t.Name()
	c, client, l := countedHolder(t, ctx, srv.Addr(), key)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	sent, _ := c.take()
	lone := c.takeTxnSizes()
	if want := map[string]int{txnMethod: 1}; !sameCounts(sent, want) {
		t.Errorf("a lone holder's release sent %v, want %v", sent, want)
	}

	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	other := newCounter()
	got := goLock(ctx, other.client(t, ctx, srv.Addr(), longTTL), key)
	waitWaiters(t, ctx, client, key, 1)
	other.waitCreated(t, ctx, 2) // its watch of our entry
	c.take()
	c.takeTxnSizes()
	other.take()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lw := awaitLock(t, ctx, got)
	sent, _ = c.take()
	releases := c.takeTxnSizes()
	if want := map[string]int{txnMethod: 2}; !sameCounts(sent, want) || len(releases) != 2 {
		t.Errorf("a lone holder's release with a waiter behind sent %v, want %v: the lone release, then the full one", sent, want)
	} else if releases[0] != lone[0] || releases[1] <= lone[0] {
		t.Errorf("release Txn sizes %v, want the lone release's %d, then the larger full release", releases, lone[0])
	}
	osent, _ := other.take()
	delete(osent, "watch cancel") // sent when the watch ends, asynchronously
	if len(osent) != 0 {
		t.Errorf("the waiter sent %v when granted, want nothing: the release marker grants it", osent)
	}
	if err := lw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Busy for this Client now: the full join, and the full release.
	if l, err = client.Lock(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	sent, _ = c.take()
	if sizes := c.takeTxnSizes(); !sameCounts(sent, map[string]int{txnMethod: 2}) || len(sizes) != 2 || sizes[1] <= lone[0] {
		t.Errorf("a cycle of a key seen busy sent %v, Txn sizes %v; want 2 Txn, the full join and the full release (larger than the lone release's %d bytes)", sent, sizes, lone[0])
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}
