package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// These examples run against a real redis-server that TestMain starts
// (exampleURL, e.g. "redis://127.0.0.1:6379/0"); their output is checked.

// The scheduled job of many instances, run by one at a time.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, exampleURL) // e.g. "redis://127.0.0.1:6379/0"
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("closing expired orders under fencing token", lease.Token() > 0)
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: closing expired orders under fencing token true
}

// TryLock gives up at once when another instance already runs the job.
func Example_tryLock() {
	ctx := context.Background()
	a, _ := dlock.Open(ctx, exampleURL)
	b, _ := dlock.Open(ctx, exampleURL)
	defer a.Close()
	defer b.Close()

	lease, err := a.TryLock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryLock(ctx, "report")
	fmt.Println("second instance:", errors.Is(err, dlock.ErrLocked))
	_ = lease.Unlock(ctx)
	// Output: second instance: true
}

// Do runs a function under the lock with a context that ends if the lease
// is lost, and passes the fencing token along for the writes it makes.
func Example_do() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, exampleURL, dlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Do(ctx, "orders/42", func(ctx context.Context) error {
		lease, _ := dlock.LeaseFromContext(ctx)
		// db.ExecContext(ctx, "UPDATE orders SET state='closed', fence=$1 WHERE id=42 AND fence < $1", lease.Token())
		fmt.Println("order 42 handled once, fenced:", lease.Token() > 0)
		return nil
	}, dlock.WithMetadata(dlock.Metadata{Note: "order handler"}))
	if err != nil {
		log.Fatal(err)
	}
	// Output: order 42 handled once, fenced: true
}

// A long-held lock watches Done and stops its work when the lease is lost.
func Example_leaseDone() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, exampleURL)
	defer client.Close()

	lease, err := client.Lock(ctx, "leader")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		_ = lease.Unlock(ctx) // stands for the lease ending for any reason
	}()
	<-lease.Done()
	fmt.Println("stopped leading:", lease.Err())
	// Output: stopped leading: dlock: lease released by Unlock
}

// Inspect shows who holds a key and who waits for it.
func Example_inspect() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, exampleURL)
	defer client.Close()

	lease, _ := client.Lock(ctx, "nightly", dlock.WithMetadata(dlock.Metadata{Note: "backup"}))
	defer lease.Unlock(ctx)
	info, err := client.Inspect(ctx, "nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s held by %q, %d waiting\n", info.Key, info.Holders[0].Metadata.Note, len(info.Waiters))
	// Output: nightly held by "backup", 0 waiting
}

// New builds a Client on a go-redis client the program already has, which
// Close leaves open.
func ExampleNew() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()

	client, err := redisdlock.New(ctx, rdb, &redisdlock.Options{Prefix: "myapp:"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lease.Err() == nil)
	_ = lease.Unlock(ctx)
	// Output: held: true
}
