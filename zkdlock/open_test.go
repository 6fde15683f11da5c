package zkdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
)

// New retries a request of its set-up whose answer was lost to a broken
// connection, as every lock call does: an ensemble electing a leader, or a
// server going away, breaks connections for a moment. Giving up at once
// with "create root …: zk: connection closed" would fail a holder that
// opens its client just after a restart (faultinject's ensemble scenario).
func TestNew_rootCreateReplyLost_retried(t *testing.T) {
	srv := testserver.SharedZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hook := &hookConn{Conn: dialZK(t, ctx, srv.Addr(), connOpts{})}
	hook.dropCreateReplies.Store(2) // the root's parent and the root
	c, err := zkdlock.New(ctx, hook, &zkdlock.Options{Root: testRoot(t), SessionTimeout: testTTL})
	if err != nil {
		t.Fatalf("New with the replies of its creates lost: %v", err)
	}
	defer c.Close()
	lease, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
