package etcddlock_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
