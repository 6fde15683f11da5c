package zkdlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// Write to ZooKeeper only while the lock is held: the setData commits in
// one transaction with the check of the lease's node, so a holder that was
// paused past its session timeout cannot overwrite the next holder's
// state. (Compiled, not run: it needs a ZooKeeper.)
func ExampleMultiHeld() {
	ctx := context.Background()
	const sessionTimeout = 10 * time.Second
	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, sessionTimeout)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client, err := zkdlock.New(ctx, conn, &zkdlock.Options{SessionTimeout: sessionTimeout, Root: "/myapp/locks"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	// … the work: a GC pause or a frozen VM here may outlast the lease …

	_, err = zkdlock.MultiHeld(conn, lease,
		&zk.SetDataRequest{Path: "/myapp/orders/closed-until", Data: []byte("2024-06-01T00:00:00Z"), Version: -1},
	)
	switch {
	case errors.Is(err, dlock.ErrStaleToken):
		log.Printf("lost the lock before the write; nothing was written: %v", err)
	case err != nil:
		log.Fatal(err)
	}
}

// The check as an op of your own Multi, for code that builds its ops
// itself: it goes first, and rs[0] is its result.
func ExampleCheckHeld() {
	var conn *zk.Conn      // the application's connection
	var lease *dlock.Lease // from a zkdlock Client
	check, err := zkdlock.CheckHeld(lease)
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrInvalidFence)
	}
	rs, err := conn.Multi(check,
		&zk.CreateRequest{Path: "/myapp/orders/batch-", Data: []byte("…"), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagSequence},
		&zk.SetDataRequest{Path: "/myapp/orders/last-batch", Data: []byte("…"), Version: -1},
	)
	if len(rs) > 0 && (errors.Is(rs[0].Error, zk.ErrNoNode) || errors.Is(rs[0].Error, zk.ErrBadVersion)) {
		log.Printf("the lease no longer holds its key; nothing was written")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("created %s", rs[1].String)
}
