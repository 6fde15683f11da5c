package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
)

// The examples use Redis; any backend's URL works the same way once its
// package is imported, here with
//
//	import _ "github.com/dlockdev/dlock/redisdlock" // registers redis:// for dlock.Open
//
// They need a running server, so they are compiled but not run here: the
// same examples run, with their output checked, in package redisdlock.
const redisURL = "redis://127.0.0.1:6379/0"

// The scheduled job of many instances, run by one at a time.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, redisURL)
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
}

// TryLock gives up at once when another instance already runs the job.
func ExampleClient_TryLock() {
	ctx := context.Background()
	a, _ := dlock.Open(ctx, redisURL)
	b, _ := dlock.Open(ctx, redisURL)
	defer a.Close()
	defer b.Close()

	lease, err := a.TryLock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryLock(ctx, "report")
	fmt.Println("second instance:", errors.Is(err, dlock.ErrLocked))
	_ = lease.Unlock(ctx)
}

// Do runs a function under the lock with a context that ends if the lease
// is lost, and passes the fencing token along for the writes it makes.
func ExampleClient_Do() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, redisURL, dlock.WithTTL(5*time.Second))
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
}

// A long-held lock watches Done and stops its work when the lease is lost.
func ExampleLease_Done() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, redisURL)
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
}

// Inspect shows who holds a key and who waits for it.
func ExampleClient_Inspect() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, redisURL)
	defer client.Close()

	lease, _ := client.Lock(ctx, "nightly", dlock.WithMetadata(dlock.Metadata{Note: "backup"}))
	defer lease.Unlock(ctx)
	info, err := client.Inspect(ctx, "nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s held by %q, %d waiting\n", info.Key, info.Holders[0].Metadata.Note, len(info.Waiters))
}
