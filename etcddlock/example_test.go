package etcddlock_test

import (
	"context"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Open a client from a URL: the members of the cluster, comma-separated.
// These examples need an etcd server, so they are compiled, not run.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/myapp/locks")
	if err != nil {
		log.Fatal(err) // dlock.ErrUnavailable, dlock.ErrAuth or dlock.ErrInvalidURL
	}
	defer client.Close()

	err = client.Do(ctx, "orders/close-expired", func(ctx context.Context) error {
		lease, _ := dlock.LeaseFromContext(ctx)
		return closeExpiredOrders(ctx, lease.Token()) // ctx ends if the lease is lost
	}, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Print(err)
	}
}

// TLS, with a private CA and a client certificate, and etcd's own
// authentication.
func Example_tls() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "etcds://locker:s3cret@etcd.internal:2379"+
		"?cacert=/etc/etcd/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}

// Build a Client on an etcd client the program already has.
func ExampleNew() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close() // after client.Close, which leaves cli open

	client, err := etcddlock.New(ctx, cli, &etcddlock.Options{
		Prefix:        "myapp/locks/",
		ClientOptions: []dlock.Option{dlock.WithTTL(5 * time.Second)},
	})
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
		log.Print(lease.Err()) // lost: stop acting as the leader
	case <-ctx.Done():
	}
}

func closeExpiredOrders(ctx context.Context, token uint64) error { return nil }
