package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testproc"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// childRoles are the package's testproc roles (TestMain runs them).
var childRoles = map[string]testproc.Role{"zk-holder": zkHolder}

// dataSessionTimeout is the session timeout of the holder's data
// connection (CONN=own): long enough to outlive the freeze, as an
// application's connection for its data does while only the lock's lease
// runs out.
const dataSessionTimeout = 30 * time.Second

// zkHolder is holder A of the proof: it locks KEY under ROOT on the
// ZooKeeper at ADDR with a session of testTTL, says its token, waits for
// "write" and then writes "A" to the node DATA at once, without looking
// at its lease (it plays the holder that did not notice its pause):
// through MultiHeld when GUARD is "on", with a plain setData otherwise. It
// writes through a connection of its own (CONN=own), or through the
// lock's (CONN=lock), whose session expired during the freeze: that
// connection then fails the requests it had queued and takes a new
// session, and the write is retried on it a bounded number of times, as
// an application would after a lost connection (for a Multi under the
// check, that is safe: a try that landed, landed while the lease held). It says "result stale",
// "result ok" or "result err …".
func zkHolder(ctx context.Context, p *testproc.Peer) error {
	addr, path := p.Env("ADDR"), p.Env("DATA")
	lockConn, err := connect(ctx, addr, testTTL)
	if err != nil {
		return err
	}
	defer lockConn.Close()
	client, err := zkdlock.New(ctx, lockConn, &zkdlock.Options{Root: p.Env("ROOT"), SessionTimeout: testTTL})
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.Lock(ctx, p.Env("KEY"))
	if err != nil {
		return err
	}
	dataConn := lockConn
	if p.Env("CONN") == "own" {
		if dataConn, err = connect(ctx, addr, dataSessionTimeout); err != nil {
			return err
		}
		defer dataConn.Close()
	}
	p.Say("token %d", lease.Token())
	if err := p.Await("write"); err != nil {
		return err
	}
	write := func() error {
		_, err := dataConn.Set(path, []byte("A"), -1)
		return err
	}
	if p.Env("GUARD") == "on" {
		write = func() error {
			_, err := zkdlock.MultiHeld(dataConn, lease, set(path, "A"))
			return err
		}
	}
	for range 100 {
		if err = write(); !connectionLost(err) {
			break
		}
	}
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		p.Say("result stale")
	case err == nil:
		p.Say("result ok")
	default:
		p.Say("result err %v", err)
	}
	return nil
}

// connectionLost reports whether err is go-zookeeper's for a request that
// the connection lost: the send failed on the socket the server closed
// (net.Error), the connection broke or the session had expired before the
// answer, or it went round its one server once while reconnecting
// (ErrNoServer). The next request waits for the new connection.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrNoServer) || errors.As(err, &ne)
}

// connect dials addr and waits for a session.
func connect(ctx context.Context, addr string, timeout time.Duration) (*zk.Conn, error) {
	session := make(chan struct{}, 1)
	conn, _, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(quietLogger{}), zk.WithEventCallback(func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
			select {
			case session <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		return nil, err
	}
	select {
	case <-session:
		return conn, nil
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("no session with %s: %w", addr, ctx.Err())
	}
}

// frozenHolderRun is one run of the proof: holder A (a child process)
// locks, is frozen until the server has expired its session, B locks and
// writes "B" under the check, A thaws and writes "A" (guard on or off, on
// its own connection or the lock's). It returns A's result line and the
// data node's value at the end.
func frozenHolderRun(t *testing.T, guard, conn string) (result, data string) {
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	admin := dialZK(t, ctx, srv.Addr(), connOpts{timeout: 10 * time.Second})
	root := testRoot(t)
	path := dataNode(t, admin, root)
	const key = "close-orders"

	a := testproc.Start(t, "zk-holder", "ADDR="+srv.Addr(), "ROOT="+root, "KEY="+key, "DATA="+path, "GUARD="+guard, "CONN="+conn)
	tokenA, err := strconv.ParseUint(a.Expect(t, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.Freeze(t)
	// Lock returns once the server has expired A's session (A sends no
	// pings while frozen) and deleted its node.
	b := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	lb := mustLock(t, ctx, b, key)
	if lb.Token() <= tokenA {
		t.Fatalf("B's token %d is not above A's %d", lb.Token(), tokenA)
	}
	mustHold(t, admin, lb, path, "B")
	a.Thaw(t)
	a.Tell(t, "write")
	result = a.Expect(t, "result")
	a.Wait(t)
	data = dataOf(t, admin, path)
	mustUnlock(t, ctx, lb)
	return result, data
}

// TestFence_frozenHolderRejected is the frozen-holder proof for the
// ZooKeeper guard: a holder frozen past its session timeout wakes and
// writes under MultiHeld after the next holder wrote; its write is refused
// with dlock.ErrStaleToken and the data holds the next holder's "B".
// Through a connection of the holder's own (its session outlived the
// freeze) and through the lock's own (its session expired, it took a new
// one): the check is on a path, so the session does not matter.
func TestFence_frozenHolderRejected(t *testing.T) {
	for _, conn := range []string{"own", "lock"} {
		t.Run("conn="+conn, func(t *testing.T) {
			result, data := frozenHolderRun(t, "on", conn)
			if result != "stale" {
				t.Errorf("A's write under MultiHeld: result %q, want stale (refused with ErrStaleToken)", result)
			}
			if data != "B" {
				t.Errorf("data = %q, want B: the frozen holder's write landed", data)
			}
		})
	}
}

// TestFence_noGuard_staleWriteLands is the negative control: the same run
// with A's write a plain setData. It lands over B's, which shows that the
// proof above would catch a guard that let it through.
func TestFence_noGuard_staleWriteLands(t *testing.T) {
	for _, conn := range []string{"own", "lock"} {
		t.Run("conn="+conn, func(t *testing.T) {
			result, data := frozenHolderRun(t, "off", conn)
			if result != "ok" {
				t.Errorf("A's plain write: result %q, want ok", result)
			}
			if data != "A" {
				t.Errorf("data = %q, want A: the unguarded stale write should have landed over B's", data)
			}
		})
	}
}
