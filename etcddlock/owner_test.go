package etcddlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fenceEnv is what the fencing tests need: a dlock client and a plain etcd
// client of the shared server, and a data key of the test's own.
type fenceEnv struct {
	ctx   context.Context
	srv   *testserver.Etcd
	c     *dlock.Client
	admin *clientv3.Client
	key   string // the lock key
	data  string // the etcd key the holders write
	fence string // the token fence's key
}

func newFenceEnv(t *testing.T) *fenceEnv {
	t.Helper()
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	h := &harness{srv: srv}
	c, err := h.NewClient(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	// The keys are the run's own: the shared server keeps what an earlier
	// run of the test (go test -count) wrote.
	id := t.Name() + "/" + rand.Text()[:8]
	return &fenceEnv{ctx: ctx, srv: srv, c: c, admin: adminClient(t, srv.Addr()),
		key: "fence/" + id, data: "fence-data/" + id, fence: "fences/" + id}
}

// value returns what the data key holds, "" when it is absent.
func (e *fenceEnv) value(t *testing.T, k string) string {
	t.Helper()
	resp, err := e.admin.Get(e.ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// ownerPut writes v to the data key in a Txn guarded by IsOwner(l) and
// reports whether it committed.
func (e *fenceEnv) ownerPut(t *testing.T, l *dlock.Lease, v string) bool {
	t.Helper()
	cmp, err := etcddlock.IsOwner(l)
	if err != nil {
		t.Fatal(err)
	}
	return e.cmpPut(t, cmp, v)
}

// cmpPut writes v to the data key in a Txn guarded by cmp and reports
// whether it committed; the data key holds v exactly when it did.
func (e *fenceEnv) cmpPut(t *testing.T, cmp clientv3.Cmp, v string) bool {
	t.Helper()
	before := e.value(t, e.data)
	resp, err := e.admin.Txn(e.ctx).If(cmp).Then(clientv3.OpPut(e.data, v)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.value(t, e.data), map[bool]string{true: v, false: before}[resp.Succeeded]; got != want {
		t.Fatalf("data = %q after a Txn that succeeded=%v, want %q", got, resp.Succeeded, want)
	}
	return resp.Succeeded
}

// A lock's IsOwner holds while it is held, and not after Unlock; OwnerTxn
// then returns a StaleTokenError naming the key and the token, and writes
// nothing.
func TestIsOwner_heldThenUnlocked(t *testing.T) {
	e := newFenceEnv(t)
	l, err := e.c.Lock(e.ctx, e.key)
	if err != nil {
		t.Fatal(err)
	}
	cmp, err := etcddlock.IsOwner(l)
	if err != nil {
		t.Fatal(err)
	}
	if !e.cmpPut(t, cmp, "one") {
		t.Fatal("IsOwner false while the lock is held")
	}
	if _, err := etcddlock.OwnerTxn(e.ctx, e.admin, l, clientv3.OpPut(e.data, "two")); err != nil {
		t.Fatalf("OwnerTxn while held: %v", err)
	}
	if err := l.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.cmpPut(t, cmp, "after") {
		t.Fatal("IsOwner (made while held) true after Unlock")
	}
	if e.ownerPut(t, l, "after") {
		t.Fatal("IsOwner (made after Unlock) true after Unlock")
	}
	resp, err := etcddlock.OwnerTxn(e.ctx, e.admin, l, clientv3.OpPut(e.data, "after"))
	var se *dlock.StaleTokenError
	if !errors.Is(err, dlock.ErrStaleToken) || !errors.As(err, &se) || se.Fence != e.key || se.Token != l.Token() || resp == nil || resp.Succeeded {
		t.Fatalf("OwnerTxn after Unlock: %v (%+v), want a StaleTokenError of %q, token %d", err, se, e.key, l.Token())
	}
	if got := e.value(t, e.data); got != "two" {
		t.Fatalf("data = %q, want the last write while held, %q", got, "two")
	}
}

// An entry that went with its etcd lease (revoked here: etcd deletes the
// keys attached to a lease the same way when it expires, which the SIGSTOP
// proof covers) fails IsOwner.
func TestIsOwner_etcdLeaseRevoked(t *testing.T) {
	e := newFenceEnv(t)
	l, err := e.c.Lock(e.ctx, e.key)
	if err != nil {
		t.Fatal(err)
	}
	_, _, id := entry(t, e.ctx, e.admin, e.key)
	if _, err := e.admin.Revoke(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	if e.ownerPut(t, l, "lost") {
		t.Fatal("IsOwner true after the etcd lease was revoked")
	}
	if err := l.Unlock(e.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease: %v", err)
	}
}

// The next Lock on the same Client reuses the etcd lease, and with it the
// entry's name: a comparison by existence would hold for the old lease
// again. IsOwner compares the create revision. Pinned by running it with
// clientv3.Compare(clientv3.Version(entry), ">", 0) in ownerCmp: the stale
// lease's Txn then commits and the test fails at "stale lease".
func TestIsOwner_reusedEntryName(t *testing.T) {
	e := newFenceEnv(t)
	var first, second *dlock.Lease
	var cmp1 clientv3.Cmp
	// The driver keeps a released lease for the next call with the same
	// TTL; try a few times in case a renewal hiccup made it revoke one.
	for try := 0; ; try++ {
		l1, err := e.c.Lock(e.ctx, e.key)
		if err != nil {
			t.Fatal(err)
		}
		k1, _, _ := entry(t, e.ctx, e.admin, e.key)
		if cmp1, err = etcddlock.IsOwner(l1); err != nil {
			t.Fatal(err)
		}
		if err := l1.Unlock(e.ctx); err != nil {
			t.Fatal(err)
		}
		l2, err := e.c.Lock(e.ctx, e.key)
		if err != nil {
			t.Fatal(err)
		}
		k2, _, _ := entry(t, e.ctx, e.admin, e.key)
		if k1 == k2 {
			first, second = l1, l2
			break
		}
		if err := l2.Unlock(e.ctx); err != nil {
			t.Fatal(err)
		}
		if try == 5 {
			t.Fatalf("the etcd lease was never reused (%s, then %s)", k1, k2)
		}
	}
	defer second.Unlock(e.ctx)
	if e.cmpPut(t, cmp1, "stale lease") {
		t.Fatalf("stale lease (token %d): IsOwner true for the re-created entry of its name (token %d)", first.Token(), second.Token())
	}
	if e.ownerPut(t, first, "stale lease") {
		t.Fatal("stale lease: IsOwner made after Unlock true for the re-created entry")
	}
	if !e.ownerPut(t, second, "current") {
		t.Fatal("current lease: IsOwner false")
	}
}

// Shared modes: IsOwner of a permit or a read lease holds while that permit
// or read lease is held, beside the others, whoever waits behind; it fails
// once that one is released, and not for the others.
func TestIsOwner_sharedModes(t *testing.T) {
	t.Run("semaphore", func(t *testing.T) {
		e := newFenceEnv(t)
		sem := e.c.Semaphore(e.key, 2)
		p1, err := sem.Acquire(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := sem.Acquire(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		third := make(chan lockResult, 1)
		go func() { l, err := sem.Acquire(e.ctx); third <- lockResult{l, err} }()
		waitWaiters(t, e.ctx, e.c, e.key, 1)
		if !e.ownerPut(t, p1, "p1") || !e.ownerPut(t, p2, "p2") {
			t.Fatal("IsOwner false for a held permit")
		}
		if err := p1.Unlock(e.ctx); err != nil {
			t.Fatal(err)
		}
		p3 := awaitLock(t, e.ctx, third)
		defer p3.Unlock(e.ctx)
		defer p2.Unlock(e.ctx)
		if e.ownerPut(t, p1, "p1 released") {
			t.Fatal("IsOwner true for a released permit")
		}
		if !e.ownerPut(t, p2, "p2") || !e.ownerPut(t, p3, "p3") {
			t.Fatal("IsOwner false for a held permit after another's release")
		}
	})
	t.Run("rwmutex", func(t *testing.T) {
		e := newFenceEnv(t)
		rw := e.c.RWMutex(e.key)
		r1, err := rw.RLock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := rw.RLock(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		writer := make(chan lockResult, 1)
		go func() { l, err := rw.Lock(e.ctx); writer <- lockResult{l, err} }()
		waitWaiters(t, e.ctx, e.c, e.key, 1)
		if !e.ownerPut(t, r1, "r1") || !e.ownerPut(t, r2, "r2") {
			t.Fatal("IsOwner false for a held read lease with a writer waiting")
		}
		if err := r1.Unlock(e.ctx); err != nil {
			t.Fatal(err)
		}
		if e.ownerPut(t, r1, "r1 released") {
			t.Fatal("IsOwner true for a released read lease")
		}
		if !e.ownerPut(t, r2, "r2") {
			t.Fatal("IsOwner false for the other reader")
		}
		if err := r2.Unlock(e.ctx); err != nil {
			t.Fatal(err)
		}
		w := awaitLock(t, e.ctx, writer)
		defer w.Unlock(e.ctx)
		if e.ownerPut(t, r2, "r2 released") || !e.ownerPut(t, w, "w") {
			t.Fatal("after the readers: IsOwner true for a reader or false for the writer")
		}
	})
}

// wrappedDriver wraps the etcd driver's grants in a type of its own, as a
// middleware driver would: its leases are not etcddlock's to check.
type wrappedDriver struct{ driver.Driver }

type wrappedGrant struct{ driver.Grant }

func (d wrappedDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return wrappedGrant{g}, nil
}

// A nil lease, a zero Lease and a lease of another driver get
// dlock.ErrInvalidFence naming the problem, and OwnerTxn sends nothing.
func TestIsOwner_foreignLease(t *testing.T) {
	e := newFenceEnv(t)
	d, err := etcddlock.OpenDriverForTest(e.ctx, e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	wc, err := dlock.NewClient(wrappedDriver{d})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	foreign, err := wc.Lock(e.ctx, e.key)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Unlock(e.ctx)
	for _, tc := range []struct {
		name  string
		lease *dlock.Lease
		want  string
	}{
		{"nil", nil, "nil lease"},
		{"zero", &dlock.Lease{}, "not an etcd lease"},
		{"wrapped", foreign, `lease of key "` + e.key + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := etcddlock.IsOwner(tc.lease); !errors.Is(err, dlock.ErrInvalidFence) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("IsOwner: %v, want dlock.ErrInvalidFence saying %q", err, tc.want)
			}
			_, err := etcddlock.OwnerTxn(e.ctx, e.admin, tc.lease, clientv3.OpPut(e.data, "x"))
			if !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, dlock.ErrStaleToken) {
				t.Fatalf("OwnerTxn: %v, want dlock.ErrInvalidFence", err)
			}
			if got := e.value(t, e.data); got != "" {
				t.Fatalf("data = %q after a refused argument, want nothing", got)
			}
		})
	}
}

// A MultiLease's leases are etcd leases: their comparisons in one If make
// a Txn that commits only while every key is held.
func TestIsOwner_multiLease(t *testing.T) {
	e := newFenceEnv(t)
	m, err := e.c.LockAll(e.ctx, []string{e.key + "/a", e.key + "/b"})
	if err != nil {
		t.Fatal(err)
	}
	var cmps []clientv3.Cmp
	for _, l := range m.Leases() {
		cmp, err := etcddlock.IsOwner(l)
		if err != nil {
			t.Fatal(err)
		}
		cmps = append(cmps, cmp)
	}
	put := func(v string) bool {
		resp, err := e.admin.Txn(e.ctx).If(cmps...).Then(clientv3.OpPut(e.data, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !put("both held") {
		t.Fatal("IsOwner of every lease of a held MultiLease: false")
	}
	if err := m.Unlock(e.ctx); err != nil {
		t.Fatal(err)
	}
	if put("released") {
		t.Fatal("IsOwner of a released MultiLease's leases: true")
	}
	if got := e.value(t, e.data); got != "both held" {
		t.Fatalf("data = %q", got)
	}
}
