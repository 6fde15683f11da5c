package etcddlock_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// locker is one contender of a benchmark.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

type dlockLocker struct {
	c   *dlock.Client
	key string
	l   *dlock.Lease
}

func (d *dlockLocker) lock(ctx context.Context) (err error) {
	d.l, err = d.c.Lock(ctx, d.key)
	return err
}
func (d *dlockLocker) unlock(ctx context.Context) error { return d.l.Unlock(ctx) }

// BenchmarkContended has n contenders, each with its own connection, take
// one key in turn with an empty critical section, on etcddlock and on etcd's
// concurrency.Mutex, against the same etcd process (no fsync). It reports
// the hand-off latency from a holder starting Unlock to the next holder's
// Lock returning, and for etcddlock the messages sent to etcd per grant.
//
//	go -C etcddlock test -run '^$' -bench Contended .
func BenchmarkContended(b *testing.B) {
	srv := testserver.SharedEtcd(b)
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprintf("etcddlock/%d", n), func(b *testing.B) {
			ctx := context.Background()
			key := fmt.Sprintf("bench/%s/%d", b.Name(), time.Now().UnixNano())
			counters := make([]*counter, n)
			ls := make([]locker, n)
			for i := range n {
				counters[i] = newCounter()
				ls[i] = &dlockLocker{c: counters[i].clientB(b, ctx, srv.Addr(), dlock.WithTTL(10*time.Second)), key: key}
				counters[i].take()
			}
			contend(b, ls)
			sent, by := takeAll(counters)
			b.ReportMetric(float64(sent)/float64(b.N), "msgs/grant")
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(by)) {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(by[k])/float64(b.N)))
			}
			b.Logf("per grant: %s", strings.Join(parts, ", "))
		})
		b.Run(fmt.Sprintf("concurrency.Mutex/%d", n), func(b *testing.B) {
			key := fmt.Sprintf("/bench-mutex/%s/%d", b.Name(), time.Now().UnixNano())
			ls := make([]locker, n)
			for i := range n {
				cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
				if err != nil {
					b.Fatal(err)
				}
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close(); _ = cli.Close() })
				ls[i] = &mutexLocker{concurrency.NewMutex(s, key)}
			}
			contend(b, ls)
		})
	}
}

type mutexLocker struct{ m *concurrency.Mutex }

func (m *mutexLocker) lock(ctx context.Context) error   { return m.m.Lock(ctx) }
func (m *mutexLocker) unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

// contend runs the contenders until b.N grants, and reports the hand-off
// latency percentiles.
func contend(b *testing.B, ls []locker) {
	ctx := context.Background()
	var grants atomic.Int64
	var releasedAt atomic.Int64 // UnixNano when the last holder started Unlock
	var lastHolder atomic.Int64
	lastHolder.Store(-1)
	var mu sync.Mutex
	var handoffs []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	for i, l := range ls {
		wg.Go(func() {
			for grants.Load() < int64(b.N) {
				if err := l.lock(ctx); err != nil {
					b.Error(err)
					return
				}
				now := time.Now().UnixNano()
				if prev := lastHolder.Load(); prev >= 0 && prev != int64(i) {
					mu.Lock()
					handoffs = append(handoffs, time.Duration(now-releasedAt.Load()))
					mu.Unlock()
				}
				grants.Add(1)
				lastHolder.Store(int64(i))
				releasedAt.Store(time.Now().UnixNano())
				if err := l.unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(handoffs) > 0 {
		slices.Sort(handoffs)
		b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "handoff-p50-µs")
		b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "handoff-p99-µs")
	}
}

// BenchmarkRoundTrip is the floor the others compare with, on the same
// etcd process: a serializable read (no Raft), a linearizable read, and a
// write (one Raft round; fsync is off on the test server).
func BenchmarkRoundTrip(b *testing.B) {
	srv := testserver.SharedEtcd(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for name, op := range map[string]func() error{
		"get-serializable": func() error { _, err := cli.Get(ctx, "rtt", clientv3.WithSerializable()); return err },
		"get":              func() error { _, err := cli.Get(ctx, "rtt"); return err },
		"put":              func() error { _, err := cli.Put(ctx, "rtt", "x"); return err },
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUncontended is one client taking and releasing a free key: two
// requests, a Txn each.
func BenchmarkUncontended(b *testing.B) {
	srv := testserver.SharedEtcd(b)
	ctx := context.Background()
	c := newCounter().clientB(b, ctx, srv.Addr(), dlock.WithTTL(10*time.Second))
	key := fmt.Sprintf("bench-uncontended/%d", time.Now().UnixNano())
	for b.Loop() {
		l, err := c.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOffIdle is one hand-off at a time with nothing else running:
// a waiter is queued and idle (its watch created) when the holder starts
// Unlock; the time runs until the waiter's Lock returns. It is the latency
// the algorithm adds to the round trips: the release's write, the notice,
// and the woken waiter's read.
func BenchmarkHandOffIdle(b *testing.B) {
	srv := testserver.SharedEtcd(b)
	ctx := context.Background()
	key := fmt.Sprintf("bench-handoff-idle/%d", time.Now().UnixNano())
	hc, wc := newCounter(), newCounter()
	holder := hc.clientB(b, ctx, srv.Addr(), dlock.WithTTL(10*time.Second))
	waiter := wc.clientB(b, ctx, srv.Addr(), dlock.WithTTL(10*time.Second))
	var total time.Duration
	var lat []time.Duration
	for b.Loop() {
		lh, err := holder.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		created := wc.createdCount()
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx, key)
			if err != nil {
				b.Error(err)
			}
			got <- l
		}()
		wc.waitCreated(b, ctx, created+1)
		start := time.Now()
		if err := lh.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		lw := <-got
		d := time.Since(start)
		total += d
		lat = append(lat, d)
		if lw == nil {
			b.FailNow()
		}
		if err := lw.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "handoff-p99-µs")
}

// BenchmarkDistinctKeys is the bench module's keys section in small: 16
// goroutines share one Client, each locking a key nobody used before and
// releasing it at once (issue 22: distinct keys per second; what a Client
// spends per cycle beside the server's two writes), on etcddlock and on
// etcd's concurrency.Mutex (one Session for all keys) against the same etcd.
//
//	go -C etcddlock test -run '^$' -bench DistinctKeys -benchmem -cpuprofile cpu.out .
func BenchmarkDistinctKeys(b *testing.B) {
	srv := testserver.SharedEtcd(b)
	ctx := context.Background()
	b.Run("etcddlock", func(b *testing.B) {
		c, err := dlock.Open(ctx, "etcd://"+srv.Addr(), dlock.WithTTL(10*time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		distinctKeys(b, srv.Addr(), func(key string) error {
			l, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		})
	})
	b.Run("Mutex", func(b *testing.B) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cli.Close() })
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(600))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		distinctKeys(b, srv.Addr(), func(key string) error {
			m := concurrency.NewMutex(s, key)
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		})
	})
}

// distinctKeys runs cycle b.N times over 16 goroutines, each time on a key
// not used before, and reports the CPU time etcd (at addr) spent per cycle.
func distinctKeys(b *testing.B, addr string, cycle func(key string) error) {
	base := fmt.Sprintf("bench-keys/%d/", time.Now().UnixNano())
	var next atomic.Int64
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	cpu0 := etcdCPU(b, addr)
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64((etcdCPU(b, addr)-cpu0).Microseconds())/float64(b.N), "server-µs/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := cycle(base + strconv.FormatInt(next.Add(1), 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// etcdCPU returns the CPU time the etcd process at addr has used, from its
// metrics (process_cpu_seconds_total, in steps of 10 ms).
func etcdCPU(b *testing.B, addr string) time.Duration {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			s, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatal(err)
			}
			return time.Duration(s * float64(time.Second))
		}
	}
	b.Fatal("etcd reports no process_cpu_seconds_total")
	return 0
}
