package zkdlock_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// TestSession_expiry_everyLeaseLostBeforeAnyRegrant cuts a client off until
// the server expires its session. Every lease of that session must have
// ended (by its local deadline) before any other client is granted one of
// its keys; the client's waiting Lock must survive and queue again on the
// new session; and the client must be usable afterwards.
func TestSession_expiry_everyLeaseLostBeforeAnyRegrant(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t)}
	proxy := dlocktest.NewProxy(t, srv.Addr())
	a := newClient(t, ctx, dialZK(t, ctx, proxy.Addr(), connOpts{}), opts)
	b := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{}), opts)
	c := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{}), opts)

	l1, err := a.Lock(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Lock(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	// a also waits for k3, held by c.
	l3c, err := c.Lock(ctx, "k3")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		l, err := a.Lock(ctx, "k3")
		if err == nil {
			err = l.Unlock(ctx)
		}
		waiting <- err
	}()
	waitWaiters(t, ctx, c, "k3", 1)

	proxy.Blackhole()
	// b queues for both keys; it gets them when the server expires a's
	// session and deletes its nodes.
	type res struct {
		key string
		l   *dlock.Lease
		err error
	}
	got := make(chan res, 2)
	for _, k := range []string{"k1", "k2"} {
		go func() {
			l, err := b.Lock(ctx, k)
			got <- res{k, l, err}
		}()
	}
	for range 2 {
		var r res
		select {
		case r = <-got:
		case <-ctx.Done():
			t.Fatal("b never got a's keys (watchdog)")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		// The moment b holds either key, both of a's leases are over.
		for _, l := range []*dlock.Lease{l1, l2} {
			select {
			case <-l.Done():
			default:
				t.Fatalf("b was granted %s while a's lease on %s was still valid locally (deadline %v, now %v)",
					r.key, l.Key(), l.Deadline().Format(time.StampMicro), time.Now().Format(time.StampMicro))
			}
			if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
				t.Fatalf("a's lease on %s: Err = %v, want ErrLeaseLost", l.Key(), l.Err())
			}
		}
		if r.l.Token() <= l1.Token() {
			t.Errorf("b's token on %s is %d, a's was %d: want higher", r.key, r.l.Token(), l1.Token())
		}
		defer r.l.Unlock(ctx)
	}
	proxy.Restore()

	// a's waiting Lock joined the queue again on the new session.
	waitWaiters(t, ctx, c, "k3", 1)
	if err := l3c.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatalf("a's Lock waiting through the expiry: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("a's waiting Lock never got the key (watchdog)")
	}
	for _, l := range []*dlock.Lease{l1, l2} {
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Unlock of a lease lost with the session: err = %v, want ErrNotHeld", err)
		}
	}
	l4, err := a.Lock(ctx, "k4")
	if err != nil {
		t.Fatalf("a after its session expired: %v", err)
	}
	if err := l4.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// sessionSniffer records the session id and password of the last handshake
// of the connections it dials, so that a test can take the session over.
type sessionSniffer struct {
	mu     sync.Mutex
	id     int64
	passwd []byte
	dials  atomic.Int64
}

func (s *sessionSniffer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	s.dials.Add(1)
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffing{Conn: c, s: s}, nil
}

func (s *sessionSniffer) session() (int64, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.passwd
}

// sniffing parses the ConnectResponse, the first packet from the server:
// int32 length, int32 protocolVersion, int32 timeOut, int64 sessionId,
// int32 passwd length, passwd.
type sniffing struct {
	net.Conn
	s    *sessionSniffer
	buf  []byte
	done bool
}

func (c *sniffing) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 && len(c.buf) >= 4+int(binary.BigEndian.Uint32(c.buf)) {
			b := c.buf[4:]
			if id := int64(binary.BigEndian.Uint64(b[8:16])); id != 0 {
				pl := binary.BigEndian.Uint32(b[16:20])
				c.s.mu.Lock()
				c.s.id, c.s.passwd = id, append([]byte(nil), b[20:20+pl]...)
				c.s.mu.Unlock()
			}
			c.done, c.buf = true, nil
		}
	}
	return n, err
}

// closeSession takes a session over with its id and password, on a raw
// connection of its own, and closes it: the server deletes the session's
// ephemeral nodes at once, as it does when a session expires.
func closeSession(t *testing.T, addr string, id int64, passwd []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	be32 := func(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd.
	var req []byte
	req = be32(req, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = be32(req, 10000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = be32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	readPacket := func() []byte {
		var n [4]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			t.Fatalf("closeSession: %v", err)
		}
		b := make([]byte, binary.BigEndian.Uint32(n[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("closeSession: %v", err)
		}
		return b
	}
	if _, err := c.Write(append(be32(nil, uint32(len(req))), req...)); err != nil {
		t.Fatal(err)
	}
	if resp := readPacket(); int64(binary.BigEndian.Uint64(resp[8:16])) != id {
		t.Fatalf("closeSession: the server did not give us session 0x%x", id)
	}
	// RequestHeader{xid: 1, type: closeSession (-11)}.
	closeReq := be32(be32(nil, 1), uint32(0xfffffff5))
	if _, err := c.Write(append(be32(nil, uint32(len(closeReq))), closeReq...)); err != nil {
		t.Fatal(err)
	}
	// ReplyHeader: xid, zxid, err.
	if reply := readPacket(); binary.BigEndian.Uint32(reply[12:16]) != 0 {
		t.Fatalf("closeSession: error %d", int32(binary.BigEndian.Uint32(reply[12:16])))
	}
}

// TestSession_endedByServer_LostFiresForEveryLease ends a client's session
// behind its back while it is cut off, then lets it reconnect: the server
// answers that the session expired, and every lease of the session must end
// at once with an error that says so, long before the local deadline would
// have ended it.
func TestSession_endedByServer_LostFiresForEveryLease(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: 20 * time.Second}
	proxy := dlocktest.NewProxy(t, srv.Addr())
	sniff := &sessionSniffer{}
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: opts.SessionTimeout, dialer: sniff.dial})
	a := newClient(t, ctx, conn, opts)
	var leases []*dlock.Lease
	for _, k := range []string{"k1", "k2", "k3"} {
		l, err := a.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	id, passwd := sniff.session()
	if id != conn.SessionID() {
		t.Fatalf("sniffed session 0x%x, conn has 0x%x", id, conn.SessionID())
	}
	proxy.Blackhole()
	closeSession(t, srv.Addr(), id, passwd)
	proxy.Restore()
	for _, l := range leases {
		waitDone(t, ctx, l, "its session was closed by the server")
		err := l.Err()
		if !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, zk.ErrSessionExpired) {
			t.Errorf("lease on %s: Err = %v, want ErrLeaseLost because the session expired", l.Key(), err)
		}
	}
	l, err := a.Lock(ctx, "k1")
	if err != nil {
		t.Fatalf("Lock on the new session: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSession_connectionLost_leaseSurvivesReconnect: the connection breaks
// (the server restarts, a middlebox resets it) but the client reconnects and
// renews within the session timeout. The session, its nodes and the lease
// survive: losing a connection is not losing the lock.
func TestSession_connectionLost_leaseSurvivesReconnect(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	// A longer session than the other tests', so that a reconnect on a
	// loaded machine fits in it comfortably.
	opts := zkdlock.Options{Root: testRoot(t), SessionTimeout: 3 * time.Second}
	proxy := dlocktest.NewProxy(t, srv.Addr())
	sniff := &sessionSniffer{}
	conn := dialZK(t, ctx, proxy.Addr(), connOpts{timeout: opts.SessionTimeout, dialer: sniff.dial})
	a := newClient(t, ctx, conn, opts)
	b := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{}), zkdlock.Options{Root: opts.Root})
	l, err := a.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sid := conn.SessionID()

	for round := range 2 {
		dials := sniff.dials.Load()
		cut := time.Now()
		proxy.Reset()
		// Wait for a renewal that started after the cut: the lease engine
		// puts the deadline at its start + validity - 1% - 2 ms.
		safe := opts.SessionTimeout - opts.SessionTimeout/100 - 2*time.Millisecond
		if err := leasewait.RenewedPast(ctx, l, cut.Add(safe)); err != nil {
			t.Fatalf("round %d: %v, after a connection reset", round, err)
		}
		if sniff.dials.Load() == dials {
			t.Fatalf("round %d: the client did not reconnect", round)
		}
		if conn.SessionID() != sid {
			t.Fatalf("round %d: session changed from 0x%x to 0x%x", round, sid, conn.SessionID())
		}
		if err := l.Err(); err != nil {
			t.Fatalf("round %d: Err = %v after reconnecting", round, err)
		}
		if _, err := b.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrLocked) {
			t.Fatalf("round %d: TryLock by another client: err = %v, want ErrLocked", round, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSession_oneSessionPerClient: every lease and waiter of a Client lives
// on the Client's one session (the seed opened a session per lock call).
func TestSession_oneSessionPerClient(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	root := testRoot(t)
	c, err := zkdlock.Open(ctx, "zk://"+srv.Addr()+root+"?session_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})
	owners := map[int64]bool{}
	for _, k := range []string{"a", "b", "c", "d"} {
		l, err := c.Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		path := zkdlock.KeyPathForTest(root, k)
		for _, n := range children(t, admin, path) {
			_, stat, err := admin.Get(path + "/" + n)
			if err != nil {
				t.Fatal(err)
			}
			owners[stat.EphemeralOwner] = true
		}
	}
	if len(owners) != 1 {
		t.Fatalf("lock nodes owned by %d sessions, want 1", len(owners))
	}
}
