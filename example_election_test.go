package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
)

// One scheduler in the fleet: every instance campaigns, the one elected
// runs the scheduler until its term ends, and publishes its address so
// that the others know where it is.
func ExampleElection_Campaign() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	election := client.Election("scheduler")
	term, err := election.Campaign(ctx, "10.0.0.7:8080") // waits until elected
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading with token", term.Token() > 0)

	// Schedule until the term is lost (Done), passing the token to every
	// system written to, so that a stale leader's writes can be refused.
	moving := make(chan struct{})
	close(moving) // stands for the operator moving this instance
	select {
	case <-term.Done():
		log.Print("leadership lost: ", term.Err())
	case <-moving:
		// Tell the followers first, then hand over to the next candidate
		// at once.
		if err := term.Proclaim(ctx, "10.0.0.8:8080"); err != nil {
			log.Print(err) // ErrNotHeld: lost meanwhile
		}
		if err := term.Resign(ctx); err != nil {
			log.Print(err)
		}
		fmt.Println("handed over")
	}
	// Output:
	// leading with token true
	// handed over
}

// Followers find the leader, and follow its changes, without campaigning.
func ExampleElection_Observe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// The current state first, then every change, "no leader" included; a
	// slow reader gets the latest state. Closed when ctx ends.
	for info := range client.Election("dispatcher").Observe(ctx) {
		if !info.HasLeader() {
			fmt.Println("no dispatcher: waiting for an election")
			campaign(ctx, "dispatcher", "10.0.0.7:8080") // another instance, here
			continue
		}
		fmt.Println("dispatcher at", info.Value, "term", info.Token > 0)
		break
	}
	// Output:
	// no dispatcher: waiting for an election
	// dispatcher at 10.0.0.7:8080 term true
}

// campaign stands for another instance of the program, which wins the
// election key with value and leads until its context ends.
func campaign(ctx context.Context, key, value string) {
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Election(key).Campaign(ctx, value); err != nil {
		log.Fatal(err)
	}
	context.AfterFunc(ctx, func() { _ = client.Close() })
}

// A singleton worker: Lead runs the function whenever this instance
// leads, cancels its context when leadership is lost, and campaigns again
// after it returns, until ctx ends (here, at SIGTERM in a real program).
func ExampleElection_Lead() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Election("orders/consumer").Lead(ctx, "worker-3", func(ctx context.Context, term *dlock.Leadership) error {
		fmt.Println("consuming with token", term.Token() > 0)
		cancel()     // stands for SIGTERM
		<-ctx.Done() // consume until the term or the program ends
		return nil
	})
	fmt.Println("stopped:", err)
	// Output:
	// consuming with token true
	// stopped: context canceled
}

// Who leads now, if anybody.
func ExampleElection_Leader() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	info, err := client.Election("scheduler").Leader(ctx)
	switch {
	case errors.Is(err, dlock.ErrNoLeader):
		fmt.Println("nobody leads")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("scheduler at", info.Value, "since", info.Since)
	}
	// Output: nobody leads
}
