package zkdlock_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/zkdlock"
	"github.com/go-zookeeper/zk"
)

// BenchmarkUncontended is one client taking and releasing a free key, on
// zkdlock and on go-zookeeper's Lock, each on a connection of its own to
// the same server: three requests a cycle on both, so the difference in
// time and allocations is the client's.
//
//	go -C zkdlock test -run '^$' -bench Uncontended -benchmem .
func BenchmarkUncontended(b *testing.B) {
	ctx := testCtx(b)
	srv := testserver.SharedZooKeeper(b)
	b.Run("zkdlock", func(b *testing.B) {
		c := newClient(b, ctx, dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession}),
			zkdlock.Options{Root: testRoot(b), SessionTimeout: longSession})
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.Lock(ctx, "k")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		conn := dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession})
		root := testRoot(b)
		if _, err := conn.Create("/test", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
		l := zk.NewLock(conn, root, zk.WorldACL(zk.PermAll))
		b.ReportAllocs()
		for b.Loop() {
			if err := l.LockWithData(nil); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// maxCycleAllocs bounds the allocations of an uncontended Lock+Unlock on
// zkdlock, everything in the process counted (go-zookeeper's reader
// included): 87 measured, of which about 63 are go-zookeeper's for the
// cycle's requests and the child watch's notification (its Multi codec,
// which the create needs for the fencing token, is reflective), 7 the
// root package's and the lease engine's, and 14 zkdlock's (the attempt,
// the grant with its lost-lease watch, three request closures, two paths).
const maxCycleAllocs = 90

// TestLock_uncontendedCycle_allocations pins the client's allocations per
// uncontended cycle (BenchmarkUncontended measures them beside
// go-zookeeper's Lock).
func TestLock_uncontendedCycle_allocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	ctx := testCtx(t)
	srv := testserver.SharedZooKeeper(t)
	c := newClient(t, ctx, dialZK(t, ctx, srv.Addr(), connOpts{timeout: longSession}),
		zkdlock.Options{Root: testRoot(t), SessionTimeout: longSession})
	cycle := func() {
		l, err := c.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // the first cycle on a key sets an exists watch: one request more
	n := testing.AllocsPerRun(200, cycle)
	t.Logf("%.0f allocations per cycle", n)
	if n > maxCycleAllocs {
		t.Errorf("%.0f allocations per uncontended Lock+Unlock, want at most %d", n, maxCycleAllocs)
	}
}

// BenchmarkDistinctKeys is the bench module's keys section in small: one
// Client, 16 goroutines, each locking and releasing keys nobody locked
// before (so each has no key node yet), the common case of a lock per
// order id or per user. Besides time and allocations it reports the
// server's count of requests and of transactions (the zxids used: every
// write, a failed one included, and the reaps of empty key nodes that
// happened within the run) per key, and the process's CPU time per key
// (cpu-ns/op: the client's only, the server is another process).
//
//	go -C zkdlock test -run '^$' -bench DistinctKeys -benchmem .
func BenchmarkDistinctKeys(b *testing.B) {
	ctx := testCtx(b)
	srv := testserver.SharedZooKeeper(b)
	c := newClient(b, ctx, dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession}),
		zkdlock.Options{Root: testRoot(b), SessionTimeout: longSession})
	var next atomic.Int64
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.ReportAllocs()
	packets0, zxid0 := serverCounts(b, ctx, srv)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Lock(ctx, "k"+strconv.FormatInt(next.Add(1), 10))
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	packets, zxid := serverCounts(b, ctx, srv)
	b.ReportMetric(float64(packets-packets0)/float64(b.N), "requests/op")
	b.ReportMetric(float64(zxid-zxid0)/float64(b.N), "txns/op")
}

// serverCounts returns the packets the server received (its pings
// included) and its last zxid, from the four-letter word srvr.
func serverCounts(b *testing.B, ctx context.Context, srv *testserver.ZooKeeper) (packets, zxid int64) {
	b.Helper()
	out, err := srv.FourLetterWord(ctx, "srvr")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "Received":
			packets, err = strconv.ParseInt(v, 10, 64)
		case "Zxid":
			zxid, err = strconv.ParseInt(v, 0, 64)
		}
		if err != nil {
			b.Fatalf("srvr: %q: %v", line, err)
		}
	}
	return packets, zxid
}

// BenchmarkContended is eight contenders on one key, each on a Client and
// connection of its own, taking the lock again as soon as they release it
// (the bench module's contended section in small), on zkdlock and on
// go-zookeeper's Lock. An op is one grant: ns/op is the time per grant and
// allocs/op everything the process allocates for it, the other
// contenders' waiting and re-queueing included; cpu-ns/op the process's
// CPU time per grant (the clients' only: the server is another process);
// handoff-p50-ns the time from a holder starting its release to the next
// holder's Lock returning.
//
//	go -C zkdlock test -run '^$' -bench Contended -benchmem .
func BenchmarkContended(b *testing.B) {
	ctx := testCtx(b)
	srv := testserver.SharedZooKeeper(b)
	const n = 8
	b.Run("zkdlock", func(b *testing.B) {
		opts := zkdlock.Options{Root: testRoot(b), SessionTimeout: longSession}
		cs := make([]func() (func() error, error), n)
		for i := range cs {
			c := newClient(b, ctx, dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession}), opts)
			cs[i] = func() (func() error, error) {
				l, err := c.Lock(ctx, "k")
				if err != nil {
					return nil, err
				}
				return func() error { return l.Unlock(ctx) }, nil
			}
		}
		runContended(b, cs)
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		root := testRoot(b)
		cs := make([]func() (func() error, error), n)
		for i := range cs {
			l := zk.NewLock(dialZK(b, ctx, srv.Addr(), connOpts{timeout: longSession}), root, zk.WorldACL(zk.PermAll))
			cs[i] = func() (func() error, error) {
				if err := l.LockWithData(nil); err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		}
		runContended(b, cs)
	})
}

// runContended runs b.N grants among the contenders of cs (each a lock
// call returning its unlock) and reports the hand-offs' p50.
func runContended(b *testing.B, cs []func() (func() error, error)) {
	var (
		mu        sync.Mutex
		left      = b.N
		last      = -1
		releasing time.Time // when the last holder began its release
		handoffs  []time.Duration
	)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	var wg sync.WaitGroup
	for i, lock := range cs {
		wg.Go(func() {
			for {
				asked := time.Now()
				unlock, err := lock()
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if last >= 0 && last != i && asked.Before(releasing) {
					handoffs = append(handoffs, time.Since(releasing))
				}
				left--
				done := left < 0
				last, releasing = i, time.Now()
				mu.Unlock()
				if err := unlock(); err != nil {
					b.Error(err)
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		b.ReportMetric(float64(handoffs[len(handoffs)/2]), "handoff-p50-ns")
	}
}

// cpuTime returns the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
