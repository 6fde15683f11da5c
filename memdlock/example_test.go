package memdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// nightlyReport is code under test: a job that every instance of a service
// fires, and that only one may run while the others skip it.
func nightlyReport(ctx context.Context, client *dlock.Client, write func()) (ran bool, err error) {
	err = client.Do(ctx, "reports/nightly", func(ctx context.Context) error {
		write()
		return nil
	}, dlock.NoWait())
	if errors.Is(err, dlock.ErrLocked) {
		return false, nil // another instance runs it
	}
	return err == nil, err
}

// A scheduled job must skip while another instance holds its lock.
func Example_skipWhileHeld() {
	ctx := context.Background()
	other, h, err := memdlock.New(nil) // another instance
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	client, _, err := h.NewClient() // ours, in the same lock space
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := other.Lock(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	ran, err := nightlyReport(ctx, client, func() { fmt.Println("report written") })
	fmt.Println("while held elsewhere: ran", ran, err)

	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	ran, err = nightlyReport(ctx, client, func() { fmt.Println("report written") })
	fmt.Println("once free: ran", ran, err)
	// Output:
	// while held elsewhere: ran false <nil>
	// report written
	// once free: ran true <nil>
}

// processShard is code under test: it works on a shard while it holds the
// shard's lock, and must stop as soon as the lease is lost.
func processShard(ctx context.Context, client *dlock.Client, shard string, started chan<- struct{}) error {
	return client.Do(ctx, "shards/"+shard, func(ctx context.Context) error {
		close(started)
		for {
			select {
			case <-ctx.Done(): // the lease is lost: stop writing
				return nil
			case <-time.After(10 * time.Millisecond):
				// one step of the work, fenced with the lease's token
			}
		}
	})
}

// A handler must stop when its lease is lost.
func Example_stopOnLeaseLoss() {
	ctx := context.Background()
	client, h, err := memdlock.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	started, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- processShard(ctx, client, "7", started) }()
	<-started
	h.LoseLease("shards/7") // as if the server had expired it
	err = <-done
	fmt.Println("stopped, lease lost:", errors.Is(err, dlock.ErrLeaseLost))
	// Output: stopped, lease lost: true
}

// schedule is code under test: the elected scheduler of a fleet, which
// must stop scheduling when its term ends.
func schedule(ctx context.Context, term *dlock.Leadership) string {
	for {
		select {
		case <-term.Done():
			return fmt.Sprint("stepped down, term lost: ", errors.Is(term.Err(), dlock.ErrLeaseLost))
		case <-ctx.Done():
			return "stopped"
		case <-time.After(10 * time.Millisecond):
			// schedule the next jobs, fenced with term.Token()
		}
	}
}

// A leader must step down when its process pauses past its TTL: Freeze
// stops its renewals, and the fake clock's Advance lets the TTL run out
// at once.
func Example_leaderStepsDown() {
	ctx := context.Background()
	clock := memdlock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, ha, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, _, err := ha.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	term, err := a.Election("scheduler").Campaign(ctx, "node-a")
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan string)
	go func() { stopped <- schedule(ctx, term) }()

	ha.Freeze()                     // node-a pauses: its renewals stop
	clock.Advance(dlock.DefaultTTL) // and its TTL runs out
	fmt.Println(<-stopped)

	next, err := b.Election("scheduler").Campaign(ctx, "node-b")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Resign(ctx)
	info, err := b.Election("scheduler").Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("now leading:", info.Value)
	// Output:
	// stepped down, term lost: true
	// now leading: node-b
}

// Clients opened by URL with the same name share one lock space.
func Example_open() {
	ctx := context.Background()
	a, err := dlock.Open(ctx, "mem://jobs")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "mem://jobs")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	lease, err := a.Lock(ctx, "import")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	_, err = b.TryLock(ctx, "import")
	fmt.Println("held by the other client:", errors.Is(err, dlock.ErrLocked))
	// Output: held by the other client: true
}

// A client cut off from the lock space, as by a network partition, loses
// its lease once its TTL runs out unrenewed, and another client takes the
// key over; back, the cut-off client cannot release the new holder's lock.
func ExampleHandle_Disconnect() {
	ctx := context.Background()
	clock := memdlock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, ha, err := memdlock.New(&memdlock.Options{Clock: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, _, err := ha.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	lease, err := a.Lock(ctx, "shards/7")
	if err != nil {
		log.Fatal(err)
	}
	ha.Disconnect()                 // a's network goes down
	clock.Advance(dlock.DefaultTTL) // and its lease runs out unrenewed
	<-lease.Done()
	fmt.Println("a's lease lost:", errors.Is(lease.Err(), dlock.ErrLeaseLost))

	next, err := b.TryLock(ctx, "shards/7")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("b holds it, with a greater token:", next.Token() > lease.Token())

	ha.Reconnect()
	fmt.Println("a's late Unlock refused:", errors.Is(lease.Unlock(ctx), dlock.ErrNotHeld))
	// Output:
	// a's lease lost: true
	// b holds it, with a greater token: true
	// a's late Unlock refused: true
}

// A restart of the lock space without persistence ends every lease, and
// the tokens granted afterwards are still greater than those before.
func ExampleHandle_Restart() {
	ctx := context.Background()
	client, h, err := memdlock.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	before, err := client.Lock(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	h.Restart()
	<-before.Done()
	fmt.Println("lease lost at the restart:", errors.Is(before.Err(), dlock.ErrLeaseLost))

	after, err := client.Lock(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer after.Unlock(ctx)
	fmt.Println("token still increasing:", after.Token() > before.Token())
	// Output:
	// lease lost at the restart: true
	// token still increasing: true
}
