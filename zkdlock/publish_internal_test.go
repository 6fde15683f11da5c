package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/go-zookeeper/zk"
)

// lossyConn applies a setData multi on the server and then loses its reply
// when dropSets is above zero, as a connection breaking at that moment does.
type lossyConn struct {
	*zk.Conn
	dropSets atomic.Int32
	// holdGetWs, when set, makes getData-with-watch wait until it is
	// closed: the grant's watch then cannot read its node.
	holdGetWs atomic.Pointer[chan struct{}]
	// holdExists and existsRead: see Exists.
	holdExists atomic.Pointer[chan struct{}]
	existsRead chan struct{}
}

// Exists, while holdExists is set, answers from the server at once but
// returns only when holdExists is closed, after telling existsRead: a
// reply that comes late.
func (c *lossyConn) Exists(path string) (bool, *zk.Stat, error) {
	ok, stat, err := c.Conn.Exists(path)
	if p := c.holdExists.Load(); p != nil {
		c.existsRead <- struct{}{}
		<-*p
	}
	return ok, stat, err
}

func (c *lossyConn) GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	if p := c.holdGetWs.Load(); p != nil {
		<-*p
	}
	return c.Conn.GetW(path)
}

func (c *lossyConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	rs, err := c.Conn.Multi(ops...)
	if _, ok := ops[0].(*zk.SetDataRequest); ok && len(ops) == 1 && err == nil && c.dropSets.Add(-1) >= 0 {
		return nil, zk.ErrConnectionClosed
	}
	return rs, err
}

var internalSeq atomic.Int64

// testDriver is a driver on a session of its own to the shared server,
// under a root of the test's own, and an admin connection.
func testDriver(t *testing.T, ctx context.Context) (*zkDriver, *lossyConn, *zk.Conn) {
	t.Helper()
	srv := testserver.SharedZooKeeper(t)
	dial := func() *zk.Conn {
		conn, ev, err := zk.Connect([]string{srv.Addr()}, time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		for e := range ev {
			if e.State == zk.StateHasSession {
				break
			}
		}
		return conn
	}
	conn := &lossyConn{Conn: dial(), existsRead: make(chan struct{}, 1)}
	o, err := (&Options{Root: fmt.Sprintf("/test/internal-%d", internalSeq.Add(1)), SessionTimeout: time.Second}).withDefaults(true)
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(conn, o, srv.Addr(), func() time.Duration { return time.Second }, nil)
	t.Cleanup(func() { _ = d.Close() })
	if err := d.init(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return d, conn, dial()
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func acquireKind(t *testing.T, ctx context.Context, d *zkDriver, key string, k driver.Kind, meta string) *grant {
	t.Helper()
	g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: key, Owner: fmt.Sprintf("%032x", internalSeq.Add(1)), TTL: time.Second, Metadata: []byte(meta), Wait: true, Kind: k, Limit: 1, Mode: driver.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Release(context.Background()) })
	return g.(*grant)
}

func nodeData(t *testing.T, admin *zk.Conn, path string) string {
	t.Helper()
	data, _, err := admin.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func notLost(t *testing.T, g *grant) {
	t.Helper()
	select {
	case err := <-g.lost:
		t.Fatalf("grant lost: %v", err)
	default:
	}
}

// TestPublish_lostReply_retrySucceeds: a Publish whose reply is lost landed
// on the server; the caller's retry succeeds (without taking the write for
// somebody else's), and so does a Publish of other data after another lost
// reply; the grant is not lost and renews. The grant's watch, which would
// learn of the landed write by itself, is held off the node meanwhile, so
// that the retry must settle the doubt (without it, the retry fails with
// ErrNotHeld: ErrBadVersion, the version moved).
func TestPublish_lostReply_retrySucceeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, conn, admin := testDriver(t, ctx)
	g := acquireKind(t, ctx, d, "k", driver.KindElection, "v0")
	hold := make(chan struct{})
	conn.holdGetWs.Store(&hold)

	conn.dropSets.Store(1)
	if err := g.Publish(ctx, []byte("v1")); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Publish with its reply lost: %v, want ErrUnavailable", err)
	}
	if got := nodeData(t, admin, g.path); got != "v1" {
		t.Fatalf("node data %q, want v1 (the write landed)", got)
	}
	if err := g.Publish(ctx, []byte("v1")); err != nil {
		t.Fatalf("retried Publish: %v", err)
	}
	conn.dropSets.Store(1)
	_ = g.Publish(ctx, []byte("v2"))
	if err := g.Publish(ctx, []byte("v3")); err != nil {
		t.Fatalf("Publish after a lost reply of another value: %v", err)
	}
	if got := nodeData(t, admin, g.path); got != "v3" {
		t.Fatalf("node data %q, want v3", got)
	}
	conn.holdGetWs.Store(nil)
	close(hold)
	if err := g.Renew(ctx); err != nil {
		t.Fatalf("Renew after the Publishes: %v", err)
	}
	notLost(t, g)
}

// TestPublish_notOurs_ErrNotHeld: Publish never writes over somebody
// else's write, and fails with ErrNotHeld once the node is gone.
func TestPublish_notOurs_ErrNotHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, _, admin := testDriver(t, ctx)
	g := acquireKind(t, ctx, d, "k", driver.KindElection, "v0")
	if _, err := admin.Set(g.path, []byte("operator"), -1); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(ctx, []byte("v1")); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Publish over somebody else's write: %v, want ErrNotHeld", err)
	}
	if got := nodeData(t, admin, g.path); got != "operator" {
		t.Fatalf("node data %q: Publish wrote over somebody else's write", got)
	}
	if err := admin.Delete(g.path, -1); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(ctx, []byte("v2")); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Publish on a deleted node: %v, want ErrNotHeld", err)
	}
	// A node of the same key made later is not written either.
	h := acquireKind(t, ctx, d, "k", driver.KindElection, "h0")
	if err := g.Publish(ctx, []byte("v3")); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Publish of the old grant: %v, want ErrNotHeld", err)
	}
	if got := nodeData(t, admin, h.path); got != "h0" {
		t.Fatalf("successor's node data %q, want h0", got)
	}
}

// TestPublish_onlyElections: a lock's waiter takes a write of the holder's
// node for a release, so a lock's grant refuses to publish, and writes
// nothing.
func TestPublish_onlyElections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, _, admin := testDriver(t, ctx)
	g := acquireKind(t, ctx, d, "k", driver.KindLock, "m")
	if err := g.Publish(ctx, []byte("x")); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Publish on a lock: %v, want ErrUnsupported", err)
	}
	if got := nodeData(t, admin, g.path); got != "m" {
		t.Fatalf("node data %q, want m", got)
	}
	notLost(t, g)
}

// TestWatch_closesWithCtxAndSession: Watch sends a value at once, one per
// change, and closes its channel when ctx ends and when the connection (so
// the session, and its watches) is closed.
func TestWatch_closesWithCtxAndSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, conn, _ := testDriver(t, ctx)
	wctx, stop := context.WithCancel(ctx)
	ch, err := d.Watch(wctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	recv := func(what string) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("closed before %s", what)
			}
		case <-ctx.Done():
			t.Fatalf("no value for %s (watchdog)", what)
		}
	}
	recv("the first value")
	g := acquireKind(t, ctx, d, "k", driver.KindElection, "v0") // creates the key node and a child
	recv("the grant")
	stop()
	for range ch {
	}
	_ = g.Release(ctx)

	ch, err = d.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	recv("the first value")
	conn.Close()
	for range ch { // closed by go-zookeeper's end of every watch
	}
}

// TestPublish_renewReadBeforeIt_stillOurs pins a renewal whose read of the
// node was answered before a Publish landed and reached the grant after
// it: the version it shows is an earlier one of ours, not somebody else's
// write (taking it for one would give ErrNotHeld, "written by somebody
// else", and lose the term after its own Proclaim).
func TestPublish_renewReadBeforeIt_stillOurs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, conn, _ := testDriver(t, ctx)
	g := acquireKind(t, ctx, d, "k", driver.KindElection, "v0")
	hold := make(chan struct{})
	conn.holdExists.Store(&hold)
	renewed := make(chan error, 1)
	go func() { renewed <- g.Renew(ctx) }()
	select {
	case <-conn.existsRead:
	case <-ctx.Done():
		t.Fatal("Renew never read the node (watchdog)")
	}
	conn.holdExists.Store(nil)
	if err := g.Publish(ctx, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	close(hold)
	if err := <-renewed; err != nil {
		t.Fatalf("Renew whose read came before the Publish: %v", err)
	}
	notLost(t, g)
}
