package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// An operator removes a holder stuck in a live process: the next waiter
// is granted with a higher fencing token, and the stuck holder's lease
// ends.
func ExampleClient_Revoke() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	stuck, err := client.Lock(ctx, "imports/daily")
	if err != nil {
		log.Fatal(err)
	}
	next := make(chan *dlock.Lease)
	go func() {
		l, err := client.Lock(ctx, "imports/daily")
		if err != nil {
			log.Fatal(err)
		}
		next <- l
	}()

	revoked, err := client.Revoke(ctx, "imports/daily", dlock.RevokeToken(stuck.Token()))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("revoked the holder with the token:", revoked[0].Token == stuck.Token())
	l := <-next
	fmt.Println("next token is higher:", l.Token() > stuck.Token())
	<-stuck.Done()
	fmt.Println("stuck lease lost:", errors.Is(stuck.Err(), dlock.ErrLeaseLost))
	fmt.Println("its unlock:", errors.Is(stuck.Unlock(ctx), dlock.ErrNotHeld))
	_ = l.Unlock(ctx)
	// Output:
	// revoked the holder with the token: true
	// next token is higher: true
	// stuck lease lost: true
	// its unlock: true
}

// A lock-delay keeps a revoked (or expired) holder's key from everyone
// for a while, so that a holder that lost its lease without knowing it
// has time to notice before the next one starts. memdlock counts it on
// its fake clock here, so the example is exact.
func ExampleWithLockDelay() {
	ctx := context.Background()
	clock := memdlock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client, _, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	held, err := client.Lock(ctx, "payments/settle", dlock.WithLockDelay(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Revoke(ctx, "payments/settle"); err != nil {
		log.Fatal(err)
	}
	<-held.Done()
	info, err := client.Inspect(ctx, "payments/settle")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delayed for", info.DelayedUntil.Sub(clock.Now()), "by a holder with lock-delay", info.Holders[0].LockDelay)
	_, err = client.TryLock(ctx, "payments/settle")
	fmt.Println("during the delay:", errors.Is(err, dlock.ErrLocked))

	clock.Advance(15 * time.Second)
	l, err := client.TryLock(ctx, "payments/settle")
	fmt.Println("after it:", err)
	_ = l.Unlock(ctx)
	// Output:
	// delayed for 15s by a holder with lock-delay 15s
	// during the delay: true
	// after it: <nil>
}
