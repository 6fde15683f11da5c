package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/go-zookeeper/zk"
)

// countConn counts the requests a driver sends, passing everything through
// (the watch channels too, so that ZooKeeper's ordering of notifications
// before later replies still holds).
type countConn struct {
	Conn
	n, reads atomic.Int64 // every request; exists and getData of lock nodes
}

func (c *countConn) Children(p string) ([]string, *zk.Stat, error) {
	c.n.Add(1)
	return c.Conn.Children(p)
}

func (c *countConn) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	c.n.Add(1)
	return c.Conn.ChildrenW(p)
}

func (c *countConn) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	c.n.Add(1)
	return c.Conn.Create(p, data, flags, acl)
}

func (c *countConn) CreateContainer(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	c.n.Add(1)
	return c.Conn.CreateContainer(p, data, flags, acl)
}

func (c *countConn) Delete(p string, version int32) error {
	c.n.Add(1)
	return c.Conn.Delete(p, version)
}

func (c *countConn) Exists(p string) (bool, *zk.Stat, error) {
	c.n.Add(1)
	c.reads.Add(1)
	return c.Conn.Exists(p)
}

func (c *countConn) ExistsW(p string) (bool, *zk.Stat, <-chan zk.Event, error) {
	c.n.Add(1)
	return c.Conn.ExistsW(p)
}

func (c *countConn) Get(p string) ([]byte, *zk.Stat, error) {
	c.n.Add(1)
	return c.Conn.Get(p)
}

func (c *countConn) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	c.n.Add(1)
	c.reads.Add(1)
	return c.Conn.GetW(p)
}

func (c *countConn) GetACL(p string) ([]zk.ACL, *zk.Stat, error) {
	c.n.Add(1)
	return c.Conn.GetACL(p)
}

func (c *countConn) Sync(p string) (string, error) {
	c.n.Add(1)
	return c.Conn.Sync(p)
}

func (c *countConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	c.n.Add(1)
	return c.Conn.Multi(ops...)
}

// renewDriver is a driver made as Open makes it (its own dialer, which
// counts connections), at addr, under a root of the test's own, with
// params added to the URL; its requests counted, with no sweep of the
// lock-delay index among them.
func renewDriver(t *testing.T, ctx context.Context, addr string, timeout time.Duration, params string) (*zkDriver, *countConn) {
	t.Helper()
	u, err := url.Parse(fmt.Sprintf("zk://%s/test/renew-%d?session_timeout=%v&lock_delay_sweep=1h%s", addr, internalSeq.Add(1), timeout, params))
	if err != nil {
		t.Fatal(err)
	}
	dd, err := openURL(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	d := dd.(*zkDriver)
	t.Cleanup(func() { _ = d.Close() })
	c := &countConn{Conn: d.conn}
	d.conn = c
	return d, c
}

// acquireMany takes n distinct keys through d, 16 at a time.
func acquireMany(t *testing.T, ctx context.Context, d *zkDriver, n int) []driver.Grant {
	t.Helper()
	gs := make([]driver.Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				gs[i], errs[i] = d.Acquire(ctx, &driver.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: fmt.Sprintf("%032x", internalSeq.Add(1)), TTL: d.timeout(), Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire k%d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			_ = g.Release(context.Background())
		}
	})
	return gs
}

// renewAll calls RenewBatch and fails the test unless every grant was
// renewed; it returns the requests it sent.
func renewAll(t *testing.T, ctx context.Context, d *zkDriver, c *countConn, gs []driver.Grant) int64 {
	t.Helper()
	before := c.n.Load()
	for i, err := range d.RenewBatch(ctx, gs) {
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
	}
	return c.n.Load() - before
}

// renewedThree is renewDriver's driver and counter with three grants
// taken through it and renewed once.
func renewedThree(t *testing.T, ctx context.Context, addr string, timeout time.Duration, params string) (*zkDriver, *countConn, []driver.Grant) {
	t.Helper()
	d, c := renewDriver(t, ctx, addr, timeout, params)
	gs := acquireMany(t, ctx, d, 3)
	renewAll(t, ctx, d, c, gs)
	return d, c, gs
}

// adminConn is a session of the test's own at addr, for changing the
// driver's nodes behind its back.
func adminConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	admin, _, err := zk.Connect([]string{addr}, 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return admin
}

// secondAlone fails the test unless errs, a RenewBatch's for three grants
// after what was done to the second one's node, fail that grant alone with
// ErrNotHeld.
func secondAlone(t *testing.T, errs []error, after string) {
	t.Helper()
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], driver.ErrNotHeld) {
		t.Fatalf("RenewBatch after %s: %v, want ErrNotHeld for the second grant alone", after, errs)
	}
}

// TestRenewBatch_thousandGrants_oneRequest: a thousand grants of one
// session are renewed with one request, the standalone check where the
// server is found standalone and a sync by the ensemble rule, once each
// grant's watch is one that proves its node: the first batch reads every
// node (the attempts' watches were set without checking the version, or
// are child watches on the key node), no later batch reads any.
func TestRenewBatch_thousandGrants_oneRequest(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	for _, tc := range []struct{ name, params string }{
		{"detected standalone", ""},
		{"ensemble rule", "&standalone=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			// A long session: no lag to wait out beyond a tick's, and no
			// renewal falls due on its own (the engine is not running).
			d, c := renewDriver(t, ctx, srv.Addr(), 30*time.Second, tc.params)
			const n = 1000
			gs := acquireMany(t, ctx, d, n)
			reads := c.reads.Load()
			if got := renewAll(t, ctx, d, c, gs); got > n+2 {
				t.Errorf("first batch: %d requests for %d grants, want at most one read per grant and the proof", got, n)
			}
			if got := c.reads.Load() - reads; got != n {
				t.Errorf("first batch read %d nodes, want %d", got, n)
			}
			for i := range 3 {
				if got := renewAll(t, ctx, d, c, gs); got != 1 {
					t.Errorf("batch %d: %d requests for %d grants, want 1", i+2, got, n)
				}
			}
		})
	}
}

// TestRenewBatch_nodeDeleted_endsThatGrantAlone: a held node deleted by
// somebody else is caught by the next batch, which fails that grant alone
// with ErrNotHeld, and renews the others with no request but the proof
// and the read of the deleted node (its watch fired).
func TestRenewBatch_nodeDeleted_endsThatGrantAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := testserver.SharedZooKeeper(t)
	d, c, gs := renewedThree(t, ctx, srv.Addr(), 30*time.Second, "")
	admin := adminConn(t, srv.Addr())
	if err := admin.Delete(gs[1].(*grant).path, -1); err != nil {
		t.Fatal(err)
	}
	before := c.n.Load()
	errs := d.RenewBatch(ctx, gs)
	secondAlone(t, errs, "deleting the second node")
	if got := c.n.Load() - before; got > 2 {
		t.Errorf("%d requests, want at most 2 (the proof, and a read of the deleted node)", got)
	}
	if errs := d.RenewBatch(ctx, []driver.Grant{gs[0], gs[2]}); errs != nil {
		t.Fatalf("the others renewed again: %v", errs)
	}
}

// TestRenewBatch_nodeWritten_endsThatGrantAlone: a held node written by
// somebody else (which the waiter behind takes for a release) fails that
// grant alone with ErrNotHeld at the next batch.
func TestRenewBatch_nodeWritten_endsThatGrantAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := testserver.SharedZooKeeper(t)
	d, _, gs := renewedThree(t, ctx, srv.Addr(), 30*time.Second, "&standalone=false&tick_time=100ms")
	admin := adminConn(t, srv.Addr())
	if _, err := admin.Set(gs[1].(*grant).path, []byte("operator"), -1); err != nil {
		t.Fatal(err)
	}
	errs := d.RenewBatch(ctx, gs)
	secondAlone(t, errs, "writing the second node")
	if errs := d.RenewBatch(ctx, []driver.Grant{gs[0], gs[2]}); errs != nil {
		t.Fatalf("the others renewed again: %v", errs)
	}
}

// TestRenewBatch_afterReconnect_readsEveryNode: a node deleted while the
// Client's connection is down is caught by the first batch after the
// reconnect, which cannot rely on any watch (go-zookeeper sets them again
// on the new connection from a goroutine of its own, maybe after the
// batch's proof is answered) and reads every node; the batch after it
// relies on the watches it set.
func TestRenewBatch_afterReconnect_readsEveryNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := testserver.SharedZooKeeper(t)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	d, c, gs := renewedThree(t, ctx, proxy.Addr(), 30*time.Second, "")
	if got := renewAll(t, ctx, d, c, gs); got != 1 {
		t.Fatalf("%d requests before the reconnect, want 1", got)
	}
	admin := adminConn(t, srv.Addr())
	conns := d.connGen()
	proxy.Reset() // the connection breaks; go-zookeeper dials again
	if err := admin.Delete(gs[1].(*grant).path, -1); err != nil {
		t.Fatal(err)
	}
	reads := c.reads.Load()
	errs := d.RenewBatch(ctx, gs)
	for errs != nil && !errors.Is(errs[1], driver.ErrNotHeld) && ctx.Err() == nil {
		// The connection was still down: the batch failed as a whole.
		for i, err := range errs {
			if !errors.Is(err, driver.ErrUnavailable) {
				t.Fatalf("grant %d while reconnecting: %v, want ErrUnavailable", i, err)
			}
		}
		errs = d.RenewBatch(ctx, gs)
	}
	secondAlone(t, errs, "the reconnect")
	if d.connGen() == conns {
		t.Fatal("no new connection")
	}
	if got := c.reads.Load() - reads; got < 3 {
		t.Errorf("%d nodes read after the reconnect, want every one (3)", got)
	}
	if got := renewAll(t, ctx, d, c, []driver.Grant{gs[0], gs[2]}); got != 1 {
		t.Errorf("%d requests for the batch after, want 1", got)
	}
}

// TestRenewBatch_sessionExpired_endsAll: once the session has expired,
// every grant of it fails with ErrNotHeld, for the session's reason.
func TestRenewBatch_sessionExpired_endsAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := testserver.SharedZooKeeper(t)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	d, _, gs := renewedThree(t, ctx, proxy.Addr(), 4*time.Second, "")
	admin := adminConn(t, srv.Addr())
	_, _, gone, err := admin.ExistsW(gs[0].(*grant).path)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	// The server expires the session and deletes its nodes.
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the session never expired")
	}
	proxy.Restore()
	errs := d.RenewBatch(ctx, gs)
	for errs != nil && errors.Is(errs[0], driver.ErrUnavailable) && ctx.Err() == nil {
		errs = d.RenewBatch(ctx, gs) // still reconnecting
	}
	if len(errs) != 3 {
		t.Fatalf("RenewBatch after the session expired: %v, want ErrNotHeld for all", errs)
	}
	for i, err := range errs {
		if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, zk.ErrSessionExpired) {
			t.Errorf("grant %d: %v, want ErrNotHeld for the expired session", i, err)
		}
	}
}

// BenchmarkRenewBatch_thousandGrants: one RenewBatch of 1,000 grants of
// one session, each proved by its watch (a standalone check and no read):
// the client's cost of a renewal interval of a Client holding that many.
func BenchmarkRenewBatch_thousandGrants(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := testserver.SharedZooKeeper(b)
	u, err := url.Parse(fmt.Sprintf("zk://%s/test/renew-bench-%d?session_timeout=30s", srv.Addr(), internalSeq.Add(1)))
	if err != nil {
		b.Fatal(err)
	}
	dd, err := openURL(ctx, u)
	if err != nil {
		b.Fatal(err)
	}
	d := dd.(*zkDriver)
	defer func() { _ = d.Close() }()
	const n = 1000
	gs := make([]driver.Grant, n)
	for i := range gs {
		g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: fmt.Sprintf("k%d", i), Owner: fmt.Sprintf("%032x", internalSeq.Add(1)), TTL: d.timeout(), Wait: true, Kind: driver.KindLock, Limit: 1, Mode: driver.Exclusive})
		if err != nil {
			b.Fatal(err)
		}
		gs[i] = g
		defer func() { _ = g.Release(context.Background()) }()
	}
	if errs := d.RenewBatch(ctx, gs); errs != nil { // the first reads every node
		b.Fatal(errs)
	}
	b.ReportAllocs()
	for b.Loop() {
		if errs := d.RenewBatch(ctx, gs); errs != nil {
			b.Fatal(errs)
		}
	}
}
