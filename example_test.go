package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/memdlock" // registers mem:// for dlock.Open
)

// The examples run on memdlock's in-memory lock space "examples", with
// their output checked. Any backend's URL works the same way once its
// package is imported, as memdlock is here:
//
//	import _ "github.com/dlockdev/dlock/redisdlock" // registers redis:// for dlock.Open
//	client, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
const lockURL = "mem://examples"

// The scheduled job of many instances, run by one at a time.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
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
func ExampleClient_TryLock() {
	ctx := context.Background()
	a, _ := dlock.Open(ctx, lockURL)
	b, _ := dlock.Open(ctx, lockURL)
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
func ExampleClient_Do() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL, dlock.WithTTL(5*time.Second))
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
func ExampleLease_Done() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
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
func ExampleClient_Inspect() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
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

// At most 3 exports run at once across the fleet: each holds one of the
// semaphore's permits, granted in arrival order.
func ExampleClient_Semaphore() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	exports := client.Semaphore("exports", 3)
	lease, err := exports.Acquire(ctx, dlock.WithMetadata(dlock.Metadata{Note: "export of December"}))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// The lease is a lock's: watch Done, pass Token to what you write.
	fmt.Println("exporting under one of", exports.Limit(), "permits:", lease.Mode() == dlock.Shared)
	// Output: exporting under one of 3 permits: true
}

// TryAcquire gives up at once when every permit is in use or others wait
// for one.
func ExampleSemaphore_TryAcquire() {
	ctx := context.Background()
	a, _ := dlock.Open(ctx, lockURL)
	b, _ := dlock.Open(ctx, lockURL)
	defer a.Close()
	defer b.Close()

	lease, err := a.Semaphore("encoders", 1).TryAcquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	_, err = b.Semaphore("encoders", 1).TryAcquire(ctx)
	fmt.Println("no permit left:", errors.Is(err, dlock.ErrLocked))
	// Output: no permit left: true
}

// A key serves one kind at a time: a semaphore of a locked key is refused,
// and the error names what the key is.
func ExampleSemaphore_Acquire_kindMismatch() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
	defer client.Close()

	lease, err := client.Lock(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	_, err = client.Semaphore("reports", 3).Acquire(ctx)
	fmt.Println(errors.Is(err, dlock.ErrKindMismatch), err)
	// Output: true acquire "reports": dlock: key is in use as another kind: it is a lock, not a semaphore of 3 permits
}

// Many readers of the price table, one writer at a time. Writers and
// readers wait in one queue: a reader that arrives after a waiting writer
// waits behind it, so writers never starve.
func ExampleRWMutex() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	prices := client.RWMutex("prices")

	r, err := prices.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reading prices, shared:", r.Mode() == dlock.Shared)
	_ = r.Unlock(ctx)

	w, err := prices.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// A fenced store accepts this write if its token is above the last
	// writer's: db.Exec("UPDATE prices SET … , fence=$1 WHERE fence < $1", w.Token())
	fmt.Println("updating prices, exclusive:", w.Mode() == dlock.Exclusive)
	_ = w.Unlock(ctx)
	// Output:
	// reading prices, shared: true
	// updating prices, exclusive: true
}

// TryRLock joins the readers that hold the key, but not while a writer
// holds it or waits for it.
func ExampleRWMutex_TryRLock() {
	ctx := context.Background()
	a, _ := dlock.Open(ctx, lockURL)
	b, _ := dlock.Open(ctx, lockURL)
	defer a.Close()
	defer b.Close()

	r1, err := a.RWMutex("prices").TryRLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := b.RWMutex("prices").TryRLock(ctx)
	fmt.Println("second reader joins:", err == nil)
	if err == nil {
		_ = r2.Unlock(ctx)
	}
	_, err = b.RWMutex("prices").TryLock(ctx)
	fmt.Println("writer refused while a reader holds:", errors.Is(err, dlock.ErrLocked))
	_ = r1.Unlock(ctx)
	// Output:
	// second reader joins: true
	// writer refused while a reader holds: true
}

// Inspect shows a semaphore's limit and every holder's mode and token.
func ExampleClient_Inspect_semaphore() {
	ctx := context.Background()
	client, _ := dlock.Open(ctx, lockURL)
	defer client.Close()

	lease, _ := client.Semaphore("exports", 3).TryAcquire(ctx, dlock.WithMetadata(dlock.Metadata{Note: "export"}))
	defer lease.Unlock(ctx)
	info, err := client.Inspect(ctx, "exports")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s is a %v of %d: %d held, %d waiting\n", info.Key, info.Kind, info.Limit, len(info.Holders), len(info.Waiters))
	for _, h := range info.Holders {
		fmt.Printf("  %q %v, fenced: %v\n", h.Metadata.Note, h.Mode, h.Token > 0)
	}
	// Output:
	// exports is a semaphore of 3: 1 held, 0 waiting
	//   "export" shared, fenced: true
}
