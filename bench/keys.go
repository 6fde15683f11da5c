package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ---- many distinct keys, one client ----

// The keys section: the common path at scale. One client, keysWorkers
// goroutines, each locking a distinct free key and releasing it at once,
// until every key was locked and released once.
const (
	keysWorkers = 16
	// keysLimit bounds each library's run; a library that has not done
	// every key by then is shown with the rate of those it did.
	keysLimit = 120 * time.Second
)

// keysSize is the number of distinct keys of the keys section.
func keysSize(quick bool) int {
	if quick {
		return 2000
	}
	return 100000
}

type keysResult struct {
	Lib     string
	Round   int           // 1, 2, …; 0 in runs older than rounds
	Keys    int           // keys the run set out to lock and release
	Workers int           // goroutines sharing the one client
	Done    int           // keys locked and released
	Elapsed time.Duration // from the first Lock to the last release returning
	Err     string
}

// LocksPerS is the keys locked and released per second.
func (r keysResult) LocksPerS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Done) / r.Elapsed.Seconds()
}

// runKeys locks and releases the keys kc<round>-0 … kc<round>-(keys-1)
// through one client of lib with workers goroutines, each key once, within
// limit: new keys each round, as a service's new ids are.
func runKeys(s *servers, lib *library, round, keys, workers int, limit time.Duration) keysResult {
	r := keysResult{Lib: lib.Name, Round: round, Keys: keys, Workers: workers}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	ms, err := openMultis(ctx, s, lib, 1, 10*time.Minute, false)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer closeMultis(ms)
	m := ms[0]
	var next, done atomic.Int64
	var errOnce sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= keys {
					return
				}
				// Lock, not TryLock: every key is free, so it is granted
				// at once; the same call for every library.
				rel, err := m.Lock(ctx, fmt.Sprintf("kc%d-%d", round, i))
				if err == nil {
					err = rel(ctx)
				}
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { r.Err = err.Error() })
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	r.Elapsed = time.Since(t0)
	r.Done = int(done.Load())
	if r.Done < keys && r.Err == "" {
		r.Err = fmt.Sprintf("only %d of %d keys locked and released within %v", r.Done, keys, limit)
	}
	return r
}
