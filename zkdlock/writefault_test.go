package zkdlock_test

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/zkdlock"
)

// ZooKeeper's request opcodes, read from the packets go-zookeeper writes.
const (
	opDelete = 2
	opMulti  = 14
)

// writeFault dials real connections whose next write of a request with one
// of the armed opcodes fails as a write to a peer that has gone does: with
// a *net.OpError (broken pipe), and nothing sent. go-zookeeper hands that
// error to the request as it is, closes the connection and reconnects,
// keeping the session.
type writeFault struct {
	mu     sync.Mutex
	armed  []int32 // the opcodes whose next write fails, once
	failed atomic.Int32
}

// arm makes the next write of a request with one of ops fail, once.
func (f *writeFault) arm(ops ...int32) {
	f.mu.Lock()
	f.armed = ops
	f.mu.Unlock()
}

func (f *writeFault) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c, f: f}, nil
}

type faultyConn struct {
	net.Conn
	f      *writeFault
	writes int
}

// Write sees one whole packet a call (go-zookeeper writes each so): length,
// then xid and opcode, except for the first, the handshake, which has no
// header.
func (c *faultyConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes > 1 && len(p) >= 12 {
		op := int32(binary.BigEndian.Uint32(p[8:12]))
		c.f.mu.Lock()
		hit := slices.Contains(c.f.armed, op)
		if hit {
			c.f.armed = nil
		}
		c.f.mu.Unlock()
		if hit {
			c.f.failed.Add(1)
			c.Conn.Close()
			return 0, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: syscall.EPIPE}
		}
	}
	return c.Conn.Write(p)
}

// TestLock_createWriteFails_retried: the create's write fails (broken
// pipe) and the connection breaks; the Lock carries on once go-zookeeper
// has reconnected, as after any other broken connection, and leaves one
// node.
func TestLock_createWriteFails_retried(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	fault := &writeFault{}
	a := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second, dialer: fault.dial}), opts)
	fault.arm(opMulti)
	l, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatalf("Lock through a failed write: %v", err)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d writes failed, want 1: the test did not exercise the fault", n)
	}
	if got := children(t, admin, zkdlock.KeyPathForTest(opts.Root, "k")); len(got) != 1 {
		t.Fatalf("lock nodes %v, want the one of the grant", got)
	}
	mustUnlock(t, ctx, l)
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, "k"))
}

// TestUnlock_releaseWriteFails_confirmed: the release's write fails
// (broken pipe) and the connection breaks; Unlock confirms the release on
// the same session once go-zookeeper has reconnected, and reports success.
func TestUnlock_releaseWriteFails_confirmed(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	fault := &writeFault{}
	conn := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second, dialer: fault.dial})
	a := newClient(t, ctx, conn, opts)
	l := mustLock(t, ctx, a, "k")
	sid := conn.SessionID()
	fault.arm(opMulti, opDelete)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock through a failed write: %v", err)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d writes failed, want 1: the test did not exercise the fault", n)
	}
	if now := conn.SessionID(); now != sid {
		t.Fatalf("the session changed from 0x%x to 0x%x: the test needs it kept", sid, now)
	}
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, "k"))
}

// TestLease_lostLocally_deleteWriteFails_nodeRemoved: the node of a lease
// lost locally (see forfeit.go) is deleted once the connection is back,
// even when the first delete sent after the reconnect fails to be written
// (broken pipe) and the connection breaks once more.
func TestLease_lostLocally_deleteWriteFails_nodeRemoved(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	proxy := dlocktest.NewProxy(t, srv.Addr())
	fault := &writeFault{}
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: 10 * time.Second, dialer: fault.dial})
	hook := &hookConn{Conn: conn}
	a := newClient(t, ctx, hook, opts)
	b := plainClient(t, ctx, srv.Addr(), opts)
	l := mustLock(t, ctx, a, "k")
	keyPath := zkdlock.KeyPathForTest(opts.Root, "k")
	node := keyPath + "/" + children(t, admin, keyPath)[0]

	// The first delete is sent into the blackhole; the fault is armed
	// then, for the next, which follows the reconnect.
	tried := releaseSent(hook, node)

	sid := conn.SessionID()
	proxy.Blackhole()
	waitDone(t, ctx, l, "its connection was cut off")
	if err := l.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	select {
	case <-tried:
	case <-ctx.Done():
		t.Fatal("the Client never tried to delete the node of its lost lease (watchdog)")
	}
	fault.arm(opMulti, opDelete)
	proxy.Reset()
	proxy.Restore()

	l2, err := b.Lock(ctx, "k")
	if err != nil {
		t.Fatalf("another Client, behind the node of the lost lease: %v", err)
	}
	if n := fault.failed.Load(); n != 1 {
		t.Fatalf("%d writes failed, want 1: the test did not exercise the fault", n)
	}
	if now := conn.SessionID(); now != sid {
		t.Fatalf("a's session changed from 0x%x to 0x%x: the test needs it saved by the reconnect", sid, now)
	}
	mustUnlock(t, ctx, l2)
	checkNothingLeft(t, admin, keyPath)
}
