package zkdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// Close of a Client built by New on the caller's connection deletes the
// node of a lease in its minimum hold (HoldAtLeast): the caller's session
// lives on, and ZooKeeper would keep the node, and the key held, for as
// long as it does. The old Close left the node to a session expiry that
// never came; this test failed at its first check of the node.
func TestNew_closeInMinimumHold_deletesNode(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	ctx := testCtx(t)
	root := testRoot(t)
	conn := dialZK(t, ctx, srv.Addr(), connOpts{})
	sid := conn.SessionID()
	c1, err := zkdlock.New(ctx, conn, &zkdlock.Options{Root: root, SessionTimeout: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c1.Close() })
	c2 := plainClient(t, ctx, srv.Addr(), zkdlock.Options{Root: root})
	admin := dialZK(t, ctx, srv.Addr(), connOpts{})

	const key = "job"
	var lease *dlock.Lease
	err = c1.Do(ctx, key, func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		return nil
	}, dlock.NoWait(), dlock.HoldAtLeast(time.Hour))
	if err != nil {
		t.Fatalf("Do(HoldAtLeast) = %v", err)
	}
	if _, err := c2.TryLock(ctx, key); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock in the first lease's minimum hold = %v, want ErrLocked", err)
	}

	if err := c1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("lease Err after Close = %v, want ErrClosed", err)
	}
	if conn.State() != zk.StateHasSession || conn.SessionID() != sid {
		t.Fatalf("the caller's connection: state %v, session %#x; want its session %#x alive (Close must leave it open)", conn.State(), conn.SessionID(), sid)
	}
	// Close has returned: the node is gone, not left for the session.
	path := zkdlock.KeyPathForTest(root, key)
	if names := children(t, admin, path); len(names) != 0 {
		t.Fatalf("after Close, lock nodes %v are left under %s while the caller's session lives", names, path)
	}
	l2, err := c2.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the first Client's Close = %v, want the key", err)
	}
	mustUnlock(t, ctx, l2)
}
