package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/dlockdev/dlock"
)

// A transfer locks both accounts. Another transfer that locks them in the
// other order cannot deadlock with it: LockAll takes keys in one order.
func ExampleClient_LockAll() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	both, err := client.LockAll(ctx, []string{"accounts/42", "accounts/7"})
	if err != nil {
		log.Fatal(err)
	}
	from, to := both.Leases()[0], both.Leases()[1] // in the order asked for
	// db.Exec("UPDATE accounts SET balance=balance-10, fence=$2 WHERE id=42 AND fence<$2", from.Token())
	// db.Exec("UPDATE accounts SET balance=balance+10, fence=$2 WHERE id=7 AND fence<$2", to.Token())
	fmt.Println("moved 10 from", from.Key(), "to", to.Key())
	if err := both.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: moved 10 from accounts/42 to accounts/7
}

// TryLockAll takes every key or none: when one is busy it gives back the
// ones it took and says which key was in the way.
func ExampleClient_TryLockAll() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
	defer client.Close()

	all, err := client.TryLockAll(ctx, []string{"reports/eu", "reports/us"})
	if errors.Is(err, dlock.ErrLocked) {
		fmt.Println("skipped this run:", err) // names the busy key
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer all.Unlock(ctx)
	fmt.Println("building both reports")
	// Output: building both reports
}

// Work that needs every key stops as soon as any lease is lost.
func ExampleMultiLease_Done() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
	defer client.Close()

	all, err := client.LockAll(ctx, []string{"shard/1", "shard/2", "shard/3"})
	if err != nil {
		log.Fatal(err)
	}
	defer all.Unlock(ctx) // releases the leases still held, too
	for step := range 100 {
		select {
		case <-all.Done():
			fmt.Println("stopped at step", step, "because", all.Err()) // names the key
			return
		default:
		}
		// one step of the rebalancing, fenced with each shard's Token
	}
	// Output:
}
