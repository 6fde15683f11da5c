// Command singleton-job is the seeds' scheduled "close expired orders" job,
// run under a dlock lock so that any number of instances started at once do
// the job one at a time. Run two at once with ./examples/singleton-job/run.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/dlockdev/dlock"
	_ "github.com/dlockdev/dlock/redisdlock"
)

func main() {
	backend := flag.String("backend", envOr("DLOCK_BACKEND", "redis://127.0.0.1:6379/0"), "lock service URL")
	rounds := flag.Int("rounds", 3, "how many times to run the job")
	work := flag.Duration("work", 300*time.Millisecond, "how long one run of the job takes")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *backend, *rounds, *work); err != nil {
		fmt.Fprintln(os.Stderr, "singleton-job:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, backend string, rounds int, work time.Duration) error {
	client, err := dlock.Open(ctx, backend, dlock.WithMetadata(dlock.Metadata{Note: "close expired orders"}))
	if err != nil {
		return err
	}
	defer client.Close()
	me := fmt.Sprintf("pid %d", os.Getpid())
	for i := range rounds {
		err := client.Do(ctx, "orders/close-expired", func(ctx context.Context) error {
			lease, _ := dlock.LeaseFromContext(ctx)
			fmt.Printf("%s  %s: run %d START (fencing token %d)\n", time.Now().Format("15:04:05.000"), me, i+1, lease.Token())
			select {
			case <-time.After(work): // closing orders...
			case <-ctx.Done():
				return context.Cause(ctx) // lease lost: stop at once
			}
			fmt.Printf("%s  %s: run %d END\n", time.Now().Format("15:04:05.000"), me, i+1)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
