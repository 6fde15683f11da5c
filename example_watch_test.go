package dlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlockdev/dlock"
)

// A live view of a key: who holds it and who waits, redrawn on each change
// (what `dlock status --watch` shows).
func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := dlock.Open(ctx, lockURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	others, err := dlock.Open(ctx, lockURL) // stands for other processes
	if err != nil {
		log.Fatal(err)
	}
	defer others.Close()

	as := func(name string) dlock.LockOption { return dlock.WithMetadata(dlock.Metadata{Note: name}) }
	var builder *dlock.Lease
	deployer := make(chan *dlock.Lease, 1)
	// What the others do after each state this watcher sees.
	steps := []func(){
		func() { builder, err = others.Lock(ctx, "deploy/prod", as("builder")) },
		func() {
			go func() {
				l, _ := others.Lock(ctx, "deploy/prod", as("deployer")) // waits for builder
				deployer <- l
			}()
		},
		func() { err = builder.Unlock(ctx) },
	}
	for info := range client.Watch(ctx, "deploy/prod") {
		var holders, waiters []string
		for _, h := range info.Holders {
			holders = append(holders, h.Metadata.Note)
		}
		for _, w := range info.Waiters {
			waiters = append(waiters, w.Metadata.Note)
		}
		fmt.Println("held by", holders, "waiting", waiters)
		if len(steps) == 0 {
			break
		}
		steps[0]()
		steps = steps[1:]
		if err != nil {
			log.Fatal(err)
		}
	}
	(<-deployer).Unlock(ctx)
	// Output:
	// held by [] waiting []
	// held by [builder] waiting []
	// held by [builder] waiting [deployer]
	// held by [deployer] waiting []
}
