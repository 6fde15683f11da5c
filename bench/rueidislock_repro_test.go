package main

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// TestRueidislock_strandedWaiters reproduces why the benchmark sets
// rueidislock's TryNextAfter to 1 s instead of its default of 20 ms: when
// an acquire attempt gets no reply within TryNextAfter (which happens on a
// loaded machine), the waiter goes back to waiting for an invalidation of a
// key it may not be tracking; once every contender is in that state with the
// key free, nobody ever wakes. A TryNextAfter of 50 µs makes every attempt
// time out, so the stall shows at once on any machine.
//
//	BENCH_REPRO=1 go test -run TestRueidislock_strandedWaiters -v
func TestRueidislock_strandedWaiters(t *testing.T) {
	if os.Getenv("BENCH_REPRO") == "" {
		t.Skip("a reproduction of a peer's problem, not a test of the benchmark: set BENCH_REPRO=1")
	}
	r, err := startRedis(durable)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	const n = 8
	var lockers [n]rueidislock.Locker
	for i := range lockers {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption:   rueidis.ClientOption{InitAddress: []string{r.addr}},
			KeyMajority:    1,
			NoLoopTracking: true,
			TryNextAfter:   50 * time.Microsecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lockers[i] = l
	}
	end := time.Now().Add(time.Second)
	var done, grants atomic.Int64
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			for time.Now().Before(end) {
				_, cancel, err := l.WithContext(context.Background(), "k")
				if err != nil {
					return // the locker was closed
				}
				grants.Add(1)
				cancel()
			}
			done.Add(1)
		})
	}
	time.Sleep(3 * time.Second)
	t.Logf("after 3 s: %d of %d contenders finished their 1 s loop, %d grants in all", done.Load(), n, grants.Load())
	if done.Load() < n {
		t.Logf("reproduced: %d contenders wait for ever on a key that nobody holds", n-done.Load())
	}
	for _, l := range lockers {
		l.Close()
	}
	wg.Wait()
}
