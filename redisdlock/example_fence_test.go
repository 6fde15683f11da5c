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

// A Fence keeps a holder that lost its lock from writing after its
// successor: here the first holder's lease ends (Unlock stands for a lease
// lost while its holder was paused), the second holder closes the order,
// and the first one's late write is refused.
func ExampleFence() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	client, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	defer rdb.Del(ctx, "{orders}:42", "dlock:fence:{orders}") // the example's own data

	// One fence for the data the lock "orders/close-expired" protects; its
	// hash tag puts the fence's record beside the orders on a Cluster.
	orders := redisdlock.NewFence(rdb, "{orders}")

	first, err := client.Lock(ctx, "orders/close-expired", dlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	_ = first.Unlock(ctx)

	second, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	err = orders.Set(ctx, second.Token(), "{orders}:42", "closed", 0)
	fmt.Println("second holder:", err)

	err = orders.Set(ctx, first.Token(), "{orders}:42", "open", 0)
	fmt.Println("first holder, late:", errors.Is(err, dlock.ErrStaleToken))
	fmt.Println("order 42:", rdb.Get(ctx, "{orders}:42").Val())
	// Output:
	// second holder: <nil>
	// first holder, late: true
	// order 42: closed
}

// Do fences other single-key writes, here a counter.
func ExampleFence_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	defer rdb.Del(ctx, "{stats}:closed", "dlock:fence:{stats}")

	stats := redisdlock.NewFence(rdb, "{stats}")
	const token = 7 // a lease's Token()
	n, err := stats.Do(ctx, token, "INCRBY", "{stats}:closed", 3)
	fmt.Println(n, err)
	// Output: 3 <nil>
}
