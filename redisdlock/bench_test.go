package redisdlock_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLockUnlock is the uncontended cycle on one key, the common path:
// Lock and Unlock of a free key on one Client, against the server TestMain
// started. It reports the server's time in the scripts per cycle
// (server-ns/op, from INFO commandstats) besides the client's. Profile it
// with
//
//	go test -run '^$' -bench LockUnlock -benchmem -cpuprofile cpu.out -memprofile mem.out
func BenchmarkLockUnlock(b *testing.B) {
	ctx := context.Background()
	rdb, c := cycleClient(ctx, b)
	b.ReportAllocs()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		l, err := c.Lock(ctx, "bench-cycle")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(scriptMicros(b, ctx, rdb))*1000/float64(b.N), "server-ns/op")
}

// scriptMicros returns the server's time in EVALSHA and EVAL since the last
// CONFIG RESETSTAT, in µs.
func scriptMicros(b *testing.B, ctx context.Context, rdb *redis.Client) int64 {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						total += n
					}
				}
			}
		}
	}
	return total
}

// An uncontended Lock and Unlock allocates no more than it did when
// measured (BenchmarkLockUnlock: 13; 42 before issue 22, where
// bsm/redislock's Obtain and Release take 34 on the same go-redis client in
// bench's cost section). redisdlock's share is the grant alone, its script
// arguments pointing to its fields, and no waiter for a free key; the rest
// is go-redis's requests and replies (a grant's reply is the token alone,
// not an array: 15 when it was) and dlock's lease.
func TestLockUnlock_allocations(t *testing.T) {
	const most = 13
	ctx := testCtx(t)
	_, c := cycleClient(ctx, t)
	// As BenchmarkLockUnlock: a ctx that is never cancelled, which dlock
	// derives nothing from.
	bg := context.Background()
	cycle := func() {
		l, err := c.Lock(bg, "allocs-cycle")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // the scripts loaded, the key's names cached
	if got := testing.AllocsPerRun(200, cycle); got > most+raceAllocs {
		t.Errorf("%.2f allocations per uncontended Lock and Unlock, want at most %d", got, most+raceAllocs)
	}
}

// BenchmarkLockUnlock_distinctKeys is the uncontended cycle on a new key
// each time, as a service locking one key per order or user does.
func BenchmarkLockUnlock_distinctKeys(b *testing.B) {
	ctx := context.Background()
	_, c := cycleClient(ctx, b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		l, err := c.Lock(ctx, "order-"+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// cycleClient is a Client of the example server on a connection of its
// own, as the uncontended cycle's benchmarks and allocation test use it;
// both are closed at the end of tb.
func cycleClient(ctx context.Context, tb testing.TB) (*redis.Client, *dlock.Client) {
	return cycleClientPool(ctx, tb, 0)
}

// cycleClientPool is cycleClient with a pool of size connections (0:
// go-redis's default), as bench's clients have 32.
func cycleClientPool(ctx context.Context, tb testing.TB, size int) (*redis.Client, *dlock.Client) {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true, PoolSize: size})
	tb.Cleanup(func() { _ = rdb.Close() })
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return rdb, c
}

// BenchmarkLockUnlock_distinctKeysParallel is bench's keys section in
// small: 16 goroutines on one Client, each locking and releasing a new key
// every cycle. Profile it for serialization with -cpuprofile, -mutexprofile
// and -blockprofile.
func BenchmarkLockUnlock_distinctKeysParallel(b *testing.B) {
	ctx := context.Background()
	_, c := cycleClientPool(ctx, b, 32)
	b.ReportAllocs()
	b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Lock(ctx, "kp"+strconv.FormatInt(next.Add(1), 10))
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLockUnlock_contended32 is 32 goroutines on one Client taking
// turns on one key: every grant is a hand-off (release_lock.lua) and a join
// (acquire_join.lua). server-ns/op is the scripts' time per grant.
func BenchmarkLockUnlock_contended32(b *testing.B) {
	ctx := context.Background()
	rdb, c := cycleClientPool(ctx, b, 64)
	b.ReportAllocs()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism((32 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Lock(ctx, "bench-contended")
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(scriptMicros(b, ctx, rdb))*1000/float64(b.N), "server-ns/op")
}
