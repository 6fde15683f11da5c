package zkdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
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

// fenceEnv is what the tests of the check share: a context, the shared
// server's address, an admin connection, the options of the test's own
// root, and its data node.
type fenceEnv struct {
	ctx   context.Context
	addr  string
	admin *zk.Conn
	opts  zkdlock.Options
	data  string
}

func newFenceEnv(t *testing.T) *fenceEnv {
	t.Helper()
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	return &fenceEnv{ctx: ctx, addr: srv.Addr(), admin: admin, opts: zkdlock.Options{Root: root}, data: dataNode(t, admin, root)}
}

// client returns a Client of the test's root, on a session of its own.
func (e *fenceEnv) client(t *testing.T) *dlock.Client { return plainClient(t, e.ctx, e.addr, e.opts) }

// hold is mustHold on the data node, through the admin connection.
func (e *fenceEnv) hold(t *testing.T, l *dlock.Lease, value string) {
	t.Helper()
	mustHold(t, e.admin, l, e.data, value)
}

// stale is mustBeStale on the data node, through the admin connection.
func (e *fenceEnv) stale(t *testing.T, l *dlock.Lease, value string) {
	t.Helper()
	mustBeStale(t, e.admin, l, e.data, value)
}

// wantData fails the test unless the data node holds want.
func (e *fenceEnv) wantData(t *testing.T, want string) {
	t.Helper()
	if got := dataOf(t, e.admin, e.data); got != want {
		t.Errorf("data = %q, want %q", got, want)
	}
}

// The check in the user's own Multi, through a connection that is not the
// lease's: the Multi commits while the lease holds, an op of the user's
// that fails is the user's error (not stale), and after Unlock the check
// fails the whole Multi with ZNONODE, as ZooKeeper's check op does for a
// missing node, so nothing is written.
func TestCheckHeld_lock_commitsWhileHeldRefusedAfterUnlock(t *testing.T) {
	e := newFenceEnv(t)
	c := e.client(t)
	l := mustLock(t, e.ctx, c, "orders")

	check, err := zkdlock.CheckHeld(l)
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := e.admin.Multi(check, set(e.data, "held")); err != nil {
		t.Fatalf("Multi(CheckHeld, setData) while held: %v (%+v)", err, rs)
	}
	e.hold(t, l, "held2")
	if rs, err := zkdlock.MultiHeld(e.admin, l); err != nil || len(rs) != 0 {
		t.Fatalf("MultiHeld with no ops while held = %+v, %v; want nothing, nil", rs, err)
	}
	// The user's own op failing is not a stale lease.
	rs, err := zkdlock.MultiHeld(e.admin, l, &zk.SetDataRequest{Path: e.data, Data: []byte("x"), Version: 999})
	if !errors.Is(err, zk.ErrBadVersion) || errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("MultiHeld with the user's setData at a wrong version: err = %v, want zk.ErrBadVersion, not stale", err)
	}
	if len(rs) != 1 || !errors.Is(rs[0].Error, zk.ErrBadVersion) {
		t.Errorf("responses = %+v, want the user's op's zk.ErrBadVersion", rs)
	}

	mustUnlock(t, e.ctx, l)
	rs, err = e.admin.Multi(check, set(e.data, "after unlock"))
	if err == nil || len(rs) != 2 || !errors.Is(rs[0].Error, zk.ErrNoNode) {
		t.Fatalf("Multi(CheckHeld, setData) after Unlock = %+v, %v; want the check failing with zk.ErrNoNode", rs, err)
	}
	e.stale(t, l, "after unlock")
	e.wantData(t, "held2")
}

// A holder cut off until the server expires its session: the next holder
// is granted once the server has deleted the node, and from then on the
// check of the old lease fails, through any connection, while the new
// holder's passes.
func TestCheckHeld_sessionExpired_refused(t *testing.T) {
	e := newFenceEnv(t)
	proxy := dlocktest.NewProxy(t, e.addr)
	a := newClient(t, e.ctx, dialZK(t, e.ctx, proxy.Addr(), connOpts{}), e.opts)
	b := e.client(t)

	la := mustLock(t, e.ctx, a, "orders")
	e.hold(t, la, "A1")
	proxy.Blackhole()
	lb := mustLock(t, e.ctx, b, "orders") // waits for the expiry
	e.hold(t, lb, "B")
	e.stale(t, la, "A2")
	proxy.Restore()
	e.wantData(t, "B")
	mustUnlock(t, e.ctx, lb)
}

// Somebody else's write to the holder's node hands the key to the waiter
// behind it (it takes the data change for a release: see grant.Release),
// while the node still exists. The check expects the grant's data version,
// so it fails then; a check of any version (-1) passed here, and both
// holders could write.
func TestCheckHeld_nodeWrittenBySomebodyElse_refused(t *testing.T) {
	e := newFenceEnv(t)
	a := e.client(t)
	b := e.client(t)

	la := mustLock(t, e.ctx, a, "orders")
	check, err := zkdlock.CheckHeld(la)
	if err != nil {
		t.Fatal(err)
	}
	waiting := startAcquire(e.ctx, func(ctx ctxT, opts ...dlock.LockOption) (*dlock.Lease, error) { return b.Lock(ctx, "orders", opts...) })
	waitWaiters(t, e.ctx, a, "orders", 1)
	if _, err := e.admin.Set(check.Path, []byte("oops"), -1); err != nil {
		t.Fatal(err)
	}
	lb := waiting.lease(t, e.ctx, "b's Lock after a write to a's node")
	e.hold(t, lb, "B")
	e.stale(t, la, "A")
	e.wantData(t, "B")
	mustUnlock(t, e.ctx, lb)
}

// A semaphore's permits: each passes while it is held, and fails once
// released, while the others pass. A permit granted after a wait, with a
// node behind it, writes nothing to its node (no grant notice): its check
// expects the create's version.
func TestCheckHeld_semaphore(t *testing.T) {
	e := newFenceEnv(t)
	sem := func() *dlock.Semaphore { return e.client(t).Semaphore("pool", 2) }
	c := e.client(t)
	s := c.Semaphore("pool", 2)
	p1, err := s.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	w3 := startAcquire(e.ctx, sem().Acquire)
	waitWaiters(t, e.ctx, c, "pool", 1)
	w4 := startAcquire(e.ctx, sem().Acquire)
	waitWaiters(t, e.ctx, c, "pool", 2)
	e.hold(t, p1, "p1")
	e.hold(t, p2, "p2")

	mustUnlock(t, e.ctx, p1)
	p3 := w3.lease(t, e.ctx, "the third permit")
	check, err := zkdlock.CheckHeld(p3)
	if err != nil {
		t.Fatal(err)
	}
	if _, stat, err := e.admin.Exists(check.Path); err != nil || stat.Version != 0 || check.Version != 0 {
		t.Fatalf("the third permit's node: version %v (err %v), its check expects %d; want 0 (no grant notice)", stat.Version, err, check.Version)
	}
	e.hold(t, p3, "p3")
	e.hold(t, p2, "p2")
	e.stale(t, p1, "p1")

	mustUnlock(t, e.ctx, p2)
	p4 := w4.lease(t, e.ctx, "the fourth permit")
	e.hold(t, p4, "p4")
	e.stale(t, p2, "p2")
	mustUnlock(t, e.ctx, p3)
	mustUnlock(t, e.ctx, p4)
	e.wantData(t, "p4")
}

// Readers share the key: each passes while it holds, and a writer granted
// after the last reader left passes while the readers fail.
func TestCheckHeld_readersAndWriter(t *testing.T) {
	e := newFenceEnv(t)
	c := e.client(t)
	rw := c.RWMutex("table")
	r1, err := rw.RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := startAcquire(e.ctx, e.client(t).RWMutex("table").Lock)
	waitWaiters(t, e.ctx, c, "table", 1)
	e.hold(t, r1, "r1")
	e.hold(t, r2, "r2")
	mustUnlock(t, e.ctx, r1)
	e.stale(t, r1, "r1")
	e.hold(t, r2, "r2")
	mustUnlock(t, e.ctx, r2)
	lw := w.lease(t, e.ctx, "the writer")
	e.hold(t, lw, "w")
	e.stale(t, r2, "r2")
	mustUnlock(t, e.ctx, lw)
	e.wantData(t, "w")
}

// An election's leader: its check passes while it leads, also after its
// own Proclaim rewrote its node (which hands nothing over), and fails once
// it resigned, while the next leader's passes.
func TestCheckHeld_electionLeader(t *testing.T) {
	e := newFenceEnv(t)
	c1 := e.client(t)
	first, err := c1.Election("leader").Campaign(e.ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	check, err := zkdlock.CheckHeld(first.Lease())
	if err != nil {
		t.Fatal(err)
	}
	next := startCampaign(e.ctx, e.client(t), "leader", "n1")
	waitWaiters(t, e.ctx, c1, "leader", 1)
	if err := first.Proclaim(e.ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	// The op made before the Proclaim still passes: leadership is the node.
	if rs, err := e.admin.Multi(check, set(e.data, "v2")); err != nil {
		t.Fatalf("Multi(CheckHeld before Proclaim, setData) while leading: %v (%+v)", err, rs)
	}
	e.hold(t, first.Lease(), "v2")
	if err := first.Resign(e.ctx); err != nil {
		t.Fatal(err)
	}
	second := next.term(t, e.ctx, "the next candidate")
	e.hold(t, second.Lease(), "n1")
	e.stale(t, first.Lease(), "v3")
	if err := second.Resign(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.wantData(t, "n1")
}

// A MultiLease: the checks of all its leases in one Multi commit while all
// are held; once one is lost (its node deleted, as an operator could), the
// whole Multi fails on that lease's check, ZNONODE.
func TestCheckHeld_multiLease(t *testing.T) {
	e := newFenceEnv(t)
	c := e.client(t)
	m, err := c.LockAll(e.ctx, []string{"a", "b"})
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
	if rs, err := e.admin.Multi(append(checks, set(e.data, "both"))...); err != nil {
		t.Fatalf("Multi(both checks, setData) while both held: %v (%+v)", err, rs)
	}
	if err := e.admin.Delete(checks[1].(*zk.CheckVersionRequest).Path, -1); err != nil {
		t.Fatal(err)
	}
	rs, err := e.admin.Multi(append(checks, set(e.data, "one"))...)
	if err == nil || len(rs) != 3 || rs[0].Error != nil || !errors.Is(rs[1].Error, zk.ErrNoNode) {
		t.Fatalf("Multi(both checks, setData) with the second lease's node gone = %+v, %v; want its check failing with zk.ErrNoNode", rs, err)
	}
	e.wantData(t, "both")
	_ = m.Unlock(e.ctx) // ErrNotHeld: one lease was lost
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

// lostReply is a MultiConn whose Multi is applied on the server and whose
// answer is then lost, as when the connection breaks before it arrives.
type lostReply struct{ conn zkdlock.MultiConn }

func (c lostReply) Multi(ops ...any) ([]zk.MultiResponse, error) {
	_, _ = c.conn.Multi(ops...)
	return nil, zk.ErrConnectionClosed // what go-zookeeper returns then
}

// A Multi under the check whose answer is lost has an unknown outcome:
// MultiHeld says neither stale nor done, but the connection's error. (It
// was applied here, while the lease held; after a loss, it is refused by
// the server the same way, and still unknown to the caller.)
func TestMultiHeld_lostReply_neitherStaleNorDone(t *testing.T) {
	e := newFenceEnv(t)
	l := mustLock(t, e.ctx, e.client(t), "orders")
	for _, state := range []string{"held", "released"} {
		if state == "released" {
			mustUnlock(t, e.ctx, l)
		}
		rs, err := zkdlock.MultiHeld(lostReply{e.admin}, l, set(e.data, state))
		if !errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, dlock.ErrStaleToken) || len(rs) != 0 {
			t.Errorf("%s: MultiHeld with its answer lost = %+v, %v; want zk.ErrConnectionClosed, not stale", state, rs, err)
		}
	}
	e.wantData(t, "held")
}
