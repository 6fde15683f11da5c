package redisdlock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// These examples run against a real redis-server that TestMain starts
// (exampleURL, e.g. "redis://127.0.0.1:6379/0"); their output is checked.
// The examples of the API itself are package dlock's, which run on
// memdlock.

// Open connects by URL: importing redisdlock registers its schemes.
func Example_open() {
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
