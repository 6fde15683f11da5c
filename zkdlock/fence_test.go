package zkdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// dataNode creates a persistent node next to the test's root, holding
// "0": the data a lock holder protects. It creates the parents it needs.
func dataNode(t *testing.T, admin *zk.Conn, root string) string {
	t.Helper()
	path := root + "-data"
	parts := strings.Split(path[1:], "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		data := []byte(nil)
		if p == path {
			data = []byte("0")
		}
		if _, err := admin.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	return path
}

// dataOf reads path.
func dataOf(t *testing.T, admin *zk.Conn, path string) string {
	t.Helper()
	b, _, err := admin.Get(path)
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	return string(b)
}

// set is the user's write: a setData of path, any version.
func set(path, value string) *zk.SetDataRequest {
	return &zk.SetDataRequest{Path: path, Data: []byte(value), Version: -1}
}

// mustHold fails the test unless a Multi under l commits (a setData of
// path to value) through conn.
func mustHold(t *testing.T, conn zkdlock.MultiConn, l *dlock.Lease, path, value string) {
	t.Helper()
	rs, err := zkdlock.MultiHeld(conn, l, set(path, value))
	if err != nil {
		t.Fatalf("MultiHeld under the lease on %q (%v): %v", l.Key(), l.Mode(), err)
	}
	if len(rs) != 1 || rs[0].Error != nil || rs[0].Stat == nil {
		t.Fatalf("MultiHeld responses = %+v, want the setData's", rs)
	}
}

// mustBeStale fails the test unless a Multi under l (a setData of path to
// value) is refused with dlock.ErrStaleToken through conn.
func mustBeStale(t *testing.T, conn zkdlock.MultiConn, l *dlock.Lease, path, value string) {
	t.Helper()
	_, err := zkdlock.MultiHeld(conn, l, set(path, value))
	if !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("MultiHeld under the lost lease on %q (%v): err = %v, want ErrStaleToken", l.Key(), l.Mode(), err)
	}
	var stale *dlock.StaleTokenError
	if !errors.As(err, &stale) || stale.Fence != l.Key() || stale.Token != l.Token() || stale.Recorded != 0 {
		t.Errorf("stale error %v: want a *dlock.StaleTokenError of fence %q, token %d, nothing recorded", err, l.Key(), l.Token())
	}
}

// The check in the user's own Multi, through a connection that is not the
// lease's: the Multi commits while the lease holds, an op of the user's
// that fails is the user's error (not stale), and after Unlock the check
// fails the whole Multi with ZNONODE, as ZooKeeper's check op does for a
// missing node, so nothing is written.
func TestCheckHeld_lock_commitsWhileHeldRefusedAfterUnlock(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	c := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	l := mustLock(t, ctx, c, "orders")

	check, err := zkdlock.CheckHeld(l)
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := admin.Multi(check, set(data, "held")); err != nil {
		t.Fatalf("Multi(CheckHeld, setData) while held: %v (%+v)", err, rs)
	}
	mustHold(t, admin, l, data, "held2")
	if rs, err := zkdlock.MultiHeld(admin, l); err != nil || len(rs) != 0 {
		t.Fatalf("MultiHeld with no ops while held = %+v, %v; want nothing, nil", rs, err)
	}
	// The user's own op failing is not a stale lease.
	rs, err := zkdlock.MultiHeld(admin, l, &zk.SetDataRequest{Path: data, Data: []byte("x"), Version: 999})
	if !errors.Is(err, zk.ErrBadVersion) || errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("MultiHeld with the user's setData at a wrong version: err = %v, want zk.ErrBadVersion, not stale", err)
	}
	if len(rs) != 1 || !errors.Is(rs[0].Error, zk.ErrBadVersion) {
		t.Errorf("responses = %+v, want the user's op's zk.ErrBadVersion", rs)
	}

	mustUnlock(t, ctx, l)
	rs, err = admin.Multi(check, set(data, "after unlock"))
	if err == nil || len(rs) != 2 || !errors.Is(rs[0].Error, zk.ErrNoNode) {
		t.Fatalf("Multi(CheckHeld, setData) after Unlock = %+v, %v; want the check failing with zk.ErrNoNode", rs, err)
	}
	mustBeStale(t, admin, l, data, "after unlock")
	if got := dataOf(t, admin, data); got != "held2" {
		t.Errorf("data = %q after the refused writes, want held2", got)
	}
}

// A holder cut off until the server expires its session: the next holder
// is granted once the server has deleted the node, and from then on the
// check of the old lease fails, through any connection, while the new
// holder's passes.
func TestCheckHeld_sessionExpired_refused(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	proxy := dlocktest.NewProxy(t, srv.Addr())
	a := newClient(t, ctx, dialZK(t, ctx, proxy.Addr(), connOpts{}), opts)
	b := plainClient(t, ctx, srv.Addr(), opts)

	la := mustLock(t, ctx, a, "orders")
	mustHold(t, admin, la, data, "A1")
	proxy.Blackhole()
	lb := mustLock(t, ctx, b, "orders") // waits for the expiry
	mustHold(t, admin, lb, data, "B")
	mustBeStale(t, admin, la, data, "A2")
	proxy.Restore()
	if got := dataOf(t, admin, data); got != "B" {
		t.Errorf("data = %q, want B", got)
	}
	mustUnlock(t, ctx, lb)
}

// Somebody else's write to the holder's node hands the key to the waiter
// behind it (it takes the data change for a release: see grant.Release),
// while the node still exists. The check expects the grant's data version,
// so it fails then; a check of any version (-1) passed here, and both
// holders could write.
func TestCheckHeld_nodeWrittenBySomebodyElse_refused(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	a := plainClient(t, ctx, srv.Addr(), opts)
	b := plainClient(t, ctx, srv.Addr(), opts)

	la := mustLock(t, ctx, a, "orders")
	check, err := zkdlock.CheckHeld(la)
	if err != nil {
		t.Fatal(err)
	}
	waiting := startAcquire(ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return b.Lock(ctx, "orders", opts...) })
	waitWaiters(t, ctx, a, "orders", 1)
	if _, err := admin.Set(check.Path, []byte("oops"), -1); err != nil {
		t.Fatal(err)
	}
	lb := waiting.lease(t, ctx, "b's Lock after a write to a's node")
	mustHold(t, admin, lb, data, "B")
	mustBeStale(t, admin, la, data, "A")
	if got := dataOf(t, admin, data); got != "B" {
		t.Errorf("data = %q, want B", got)
	}
	mustUnlock(t, ctx, lb)
}

// A semaphore's permits: each passes while it is held, and fails once
// released, while the others pass. The permit granted with a node behind
// it writes its node (the grant notice, data version 1) before its grant:
// its check expects that version.
func TestCheckHeld_semaphore(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	sem := func() *dlock.Semaphore { return plainClient(t, ctx, srv.Addr(), opts).Semaphore("pool", 2) }
	c := plainClient(t, ctx, srv.Addr(), opts)
	s := c.Semaphore("pool", 2)
	p1, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w3 := startAcquire(ctx, sem().Acquire)
	waitWaiters(t, ctx, c, "pool", 1)
	w4 := startAcquire(ctx, sem().Acquire)
	waitWaiters(t, ctx, c, "pool", 2)
	mustHold(t, admin, p1, data, "p1")
	mustHold(t, admin, p2, data, "p2")

	mustUnlock(t, ctx, p1)
	p3 := w3.lease(t, ctx, "the third permit")
	check, err := zkdlock.CheckHeld(p3)
	if err != nil {
		t.Fatal(err)
	}
	if _, stat, err := admin.Exists(check.Path); err != nil || stat.Version != 1 {
		t.Fatalf("the third permit's node: version %v (err %v), want 1 (its grant notice): the test would not cover the notice", stat.Version, err)
	}
	mustHold(t, admin, p3, data, "p3")
	mustHold(t, admin, p2, data, "p2")
	mustBeStale(t, admin, p1, data, "p1")

	mustUnlock(t, ctx, p2)
	p4 := w4.lease(t, ctx, "the fourth permit")
	mustHold(t, admin, p4, data, "p4")
	mustBeStale(t, admin, p2, data, "p2")
	mustUnlock(t, ctx, p3)
	mustUnlock(t, ctx, p4)
	if got := dataOf(t, admin, data); got != "p4" {
		t.Errorf("data = %q, want p4", got)
	}
}

// Readers share the key: each passes while it holds, and a writer granted
// after the last reader left passes while the readers fail.
func TestCheckHeld_readersAndWriter(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	c := plainClient(t, ctx, srv.Addr(), opts)
	rw := c.RWMutex("table")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := startAcquire(ctx, plainClient(t, ctx, srv.Addr(), opts).RWMutex("table").Lock)
	waitWaiters(t, ctx, c, "table", 1)
	mustHold(t, admin, r1, data, "r1")
	mustHold(t, admin, r2, data, "r2")
	mustUnlock(t, ctx, r1)
	mustBeStale(t, admin, r1, data, "r1")
	mustHold(t, admin, r2, data, "r2")
	mustUnlock(t, ctx, r2)
	lw := w.lease(t, ctx, "the writer")
	mustHold(t, admin, lw, data, "w")
	mustBeStale(t, admin, r2, data, "r2")
	mustUnlock(t, ctx, lw)
	if got := dataOf(t, admin, data); got != "w" {
		t.Errorf("data = %q, want w", got)
	}
}

// An election's leader: its check passes while it leads, also after its
// own Proclaim rewrote its node (which hands nothing over), and fails once
// it resigned, while the next leader's passes.
func TestCheckHeld_electionLeader(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	c1 := plainClient(t, ctx, srv.Addr(), opts)
	first, err := c1.Election("leader").Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	check, err := zkdlock.CheckHeld(first.Lease())
	if err != nil {
		t.Fatal(err)
	}
	next := startCampaign(ctx, plainClient(t, ctx, srv.Addr(), opts), "leader", "n1")
	waitWaiters(t, ctx, c1, "leader", 1)
	if err := first.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	// The op made before the Proclaim still passes: leadership is the node.
	if rs, err := admin.Multi(check, set(data, "v2")); err != nil {
		t.Fatalf("Multi(CheckHeld before Proclaim, setData) while leading: %v (%+v)", err, rs)
	}
	mustHold(t, admin, first.Lease(), data, "v2")
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := next.term(t, ctx, "the next candidate")
	mustHold(t, admin, second.Lease(), data, "n1")
	mustBeStale(t, admin, first.Lease(), data, "v3")
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dataOf(t, admin, data); got != "n1" {
		t.Errorf("data = %q, want n1", got)
	}
}

// A MultiLease: the checks of all its leases in one Multi commit while all
// are held; once one is lost (its node deleted, as an operator could), the
// whole Multi fails on that lease's check, ZNONODE.
func TestCheckHeld_multiLease(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	c := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	m, err := c.LockAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	var checks []any
	for _, l := range m.Leases() {
		check, err := zkdlock.CheckHeld(l)
		if err != nil {
			t.Fatal(err)
		}
		checks = append(checks, check)
	}
	if rs, err := admin.Multi(append(checks, set(data, "both"))...); err != nil {
		t.Fatalf("Multi(both checks, setData) while both held: %v (%+v)", err, rs)
	}
	if err := admin.Delete(checks[1].(*zk.CheckVersionRequest).Path, -1); err != nil {
		t.Fatal(err)
	}
	rs, err := admin.Multi(append(checks, set(data, "one"))...)
	if err == nil || len(rs) != 3 || rs[0].Error != nil || !errors.Is(rs[1].Error, zk.ErrNoNode) {
		t.Fatalf("Multi(both checks, setData) with the second lease's node gone = %+v, %v; want its check failing with zk.ErrNoNode", rs, err)
	}
	if got := dataOf(t, admin, data); got != "both" {
		t.Errorf("data = %q, want both", got)
	}
	_ = m.Unlock(ctx) // ErrNotHeld: one lease was lost
}

// A nil lease, or one of another backend, is refused with dlock.ErrInvalidFence
// before anything is sent.
func TestCheckHeld_foreignOrNilLease(t *testing.T) {
	ctx := testCtx(t)
	foreign, err := dlock.NewClient(otherBackend{})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	fl, err := foreign.Lock(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Unlock(ctx)
	conn := noConn{t}
	for _, c := range []struct {
		name  string
		lease *dlock.Lease
		says  string
	}{{"nil", nil, "nil lease"}, {"foreign", fl, `lease of key "orders"`}} {
		t.Run(c.name, func(t *testing.T) {
			if op, err := zkdlock.CheckHeld(c.lease); !errors.Is(err, dlock.ErrInvalidFence) || op != nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("CheckHeld = %v, %v; want nil and dlock.ErrInvalidFence saying %q", op, err, c.says)
			}
			if _, err := zkdlock.MultiHeld(conn, c.lease, set("/x", "y")); !errors.Is(err, dlock.ErrInvalidFence) || errors.Is(err, dlock.ErrStaleToken) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("MultiHeld: err = %v, want dlock.ErrInvalidFence saying %q, not stale", err, c.says)
			}
		})
	}
}

// noConn fails the test if anything is sent through it.
type noConn struct{ t *testing.T }

func (c noConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	c.t.Errorf("Multi sent for a lease that is not ZooKeeper's: %v", ops)
	return nil, errors.New("not sent")
}

// otherBackend is a backend that is not ZooKeeper, for a lease to give
// CheckHeld that is not zkdlock's: it grants every key at once.
type otherBackend struct{}

func (otherBackend) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	return otherGrant{}, nil
}
func (otherBackend) Close() error { return nil }

type otherGrant struct{}

func (otherGrant) Token() uint64                   { return 1 }
func (otherGrant) ValidFrom() time.Time            { return time.Now() }
func (otherGrant) Validity() time.Duration         { return time.Minute }
func (otherGrant) Renew(ctx context.Context) error { return nil }
func (otherGrant) Release(context.Context) error   { return nil }
func (otherGrant) Lost() <-chan error              { return nil }

// A semaphore permit's grant notice is applied on the server and its reply
// is lost; when the attempt looks again, the waiter behind it has gone, so
// no notice is needed any more. The node's data version is 1 all the same,
// and the grant must expect it. Pinned: the grant kept version 0, so its
// check failed with zk.ErrBadVersion while the permit was held ("MultiHeld
// under the lease … want nil: … was written by somebody else"), and its
// first renewal would have declared the lease lost.
func TestCheckHeld_semaphore_lostNoticeReply(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	data := dataNode(t, admin, root)
	opts := zkdlock.Options{Root: root}
	const key = "pool"
	insp := plainClient(t, ctx, srv.Addr(), opts)
	p1, err := insp.Semaphore(key, 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	behind := make(chan *pendingAcquire, 1) // the waiter behind, once started
	dctx, cancelBehind := context.WithCancel(ctx)
	defer cancelBehind()
	var notices, dropped atomic.Int32
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
	hook.onSetData = func(path string, err error) bool {
		notices.Add(1)
		if err != nil || !dropped.CompareAndSwap(0, 1) {
			return false
		}
		// Before the reply would arrive, the waiter behind gives up:
		// its Acquire returns once its node is deleted.
		cancelBehind()
		select {
		case w := <-behind:
			<-w.done
		case <-ctx.Done():
		}
		return true
	}
	c := newClient(t, ctx, hook, opts)
	w := startAcquire(ctx, c.Semaphore(key, 1).Acquire)
	waitWaiters(t, ctx, insp, key, 1)
	behind <- startAcquire(dctx, plainClient(t, ctx, srv.Addr(), opts).Semaphore(key, 1).Acquire)
	waitWaiters(t, ctx, insp, key, 2)
	mustUnlock(t, ctx, p1)
	l := w.lease(t, ctx, "the permit whose notice's reply was lost")
	if dropped.Load() != 1 {
		t.Fatalf("no notice's reply was dropped (%d notices): the test does not cover the case", notices.Load())
	}
	check, err := zkdlock.CheckHeld(l)
	if err != nil {
		t.Fatal(err)
	}
	_, stat, err := admin.Exists(check.Path)
	if err != nil {
		t.Fatal(err)
	}
	if stat.Version < 1 || check.Version != stat.Version {
		t.Errorf("the permit's node has data version %d, its check expects %d", stat.Version, check.Version)
	}
	mustHold(t, admin, l, data, "held")
	mustUnlock(t, ctx, l)
}
