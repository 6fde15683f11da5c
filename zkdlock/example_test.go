package zkdlock_test

import (
	"context"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// Open a Client from a URL: three servers, locks under /myapp/locks, a lease
// (session timeout) of 15 seconds. The examples need a running ZooKeeper, so
// they are compiled but not run.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "zk://zk1:2181,zk2:2181,zk3:2181/myapp/locks?session_timeout=15s")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Do(ctx, "orders/close-expired", func(ctx context.Context) error {
		lease, _ := dlock.LeaseFromContext(ctx)
		log.Printf("closing expired orders with fencing token %d", lease.Token())
		return nil // ctx is cancelled if the lease is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// With digest credentials, lock nodes can be read by anybody but changed or
// deleted only by clients with the same credentials.
func ExampleOpen_digestAuth() {
	ctx := context.Background()
	client, err := zkdlock.Open(ctx, "zk://locker:s3cret@zk1:2181/dlock")
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrAuth) for a wrong password
	}
	defer client.Close()
}

// New builds a Client on a connection the program already has. It must be
// told the session timeout that connection uses.
func ExampleNew() {
	ctx := context.Background()
	const sessionTimeout = 10 * time.Second
	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181"}, sessionTimeout)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	client, err := zkdlock.New(ctx, conn, &zkdlock.Options{SessionTimeout: sessionTimeout, Root: "/myapp/locks"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "leader")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	select {
	case <-lease.Done():
		log.Printf("lost the lock: %v", lease.Err())
	case <-ctx.Done():
	}
}
