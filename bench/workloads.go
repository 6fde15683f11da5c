package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
)

// ---- round-trip floor ----

type rttResult struct {
	Backend  string
	Op       string
	N        int
	P50, P99 time.Duration
	Err      string
}

// rttWarmup is the least warm-up of a round-trip measurement: a server
// just started (ZooKeeper's JIT) answers its first requests slower.
const rttWarmup = 500 * time.Millisecond

// measureRTT times n sequential calls of op after a warm-up (n/10 calls,
// and at least rttWarmup), bounded by limit.
func measureRTT(backend, name string, n int, limit time.Duration, op func(context.Context) error) rttResult {
	r := rttResult{Backend: backend, Op: name}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	warm := time.Now().Add(rttWarmup)
	for i := 0; i < n/10 || time.Now().Before(warm); i++ {
		if err := op(ctx); err != nil {
			r.Err = err.Error()
			return r
		}
	}
	ds := make([]time.Duration, 0, n)
	for range n {
		if ctx.Err() != nil {
			break
		}
		t := time.Now()
		if err := op(ctx); err != nil {
			r.Err = err.Error()
			return r
		}
		ds = append(ds, time.Since(t))
	}
	r.N, r.P50, r.P99 = len(ds), percentile(ds, 50), percentile(ds, 99)
	return r
}

// rttKeys are the requests of the round-trip floor, in the order of its
// table: per server the smallest request, a write, and a notification.
var rttKeys = []string{"redis", "redis-write", "redis-notify", "zookeeper", "zookeeper-write", "zookeeper-notify", "etcd", "etcd-write", "etcd-notify"}

func runRTT(s *servers, n int) (map[string]rttResult, error) {
	out := map[string]rttResult{}
	rdb := redis.NewClient(&redis.Options{Addr: s.redis.addr})
	defer rdb.Close()
	out["redis"] = measureRTT("redis", "PING (go-redis)", n, 20*time.Second, func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	})
	conn, err := zkConnect(s.env, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	out["zookeeper"] = measureRTT("zookeeper", "exists / (go-zookeeper)", n, 20*time.Second, func(context.Context) error {
		_, _, err := conn.Exists("/")
		return err
	})
	cli, err := etcdClient(s.env)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	out["etcd"] = measureRTT("etcd", "Get (clientv3, linearizable)", n, 20*time.Second, func(ctx context.Context) error {
		_, err := cli.Get(ctx, "bench-rtt")
		return err
	})
	// Writes, which a durable server makes durable before it replies:
	// the floor of a lock's requests, which all write.
	nw := max(n/5, 20)
	out["redis-write"] = measureRTT("redis", "SET (go-redis)", nw, 20*time.Second, func(ctx context.Context) error {
		return rdb.Set(ctx, "bench-rtt", "x", 0).Err()
	})
	if _, err := conn.Create("/bench-rtt", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		return nil, err
	}
	out["zookeeper-write"] = measureRTT("zookeeper", "setData (go-zookeeper)", nw, 20*time.Second, func(context.Context) error {
		_, err := conn.Set("/bench-rtt", []byte("x"), -1)
		return err
	})
	out["etcd-write"] = measureRTT("etcd", "Put (clientv3)", nw, 20*time.Second, func(ctx context.Context) error {
		_, err := cli.Put(ctx, "bench-rtt", "x")
		return err
	})
	notify, err := runNotifyFloor(s, n/3)
	if err != nil {
		return nil, err
	}
	for k, v := range notify {
		out[k] = v
	}
	return out, nil
}

// runNotifyFloor measures the floor of any notification-driven hand-off on
// each server (newNotifier): from one client starting the write that frees
// a key to another client's goroutine receiving the server's notice of it.
// Both clients are in this process, so one monotonic clock times both ends.
func runNotifyFloor(s *servers, n int) (map[string]rttResult, error) {
	out := map[string]rttResult{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, b := range backends {
		nt, err := newNotifier(ctx, s, b, false)
		if err != nil {
			return nil, err
		}
		out[b+"-notify"] = measureNotify(ctx, b, nt, n/10, 0, n, 20*time.Second)
		nt.close()
	}
	return out, nil
}

// ---- uncontended ----

type uncontendedResult struct {
	Lib             string
	Round           int // 1, 2, …; 0 in runs older than rounds
	N               int
	P50, P99        time.Duration
	RequestsPerGrnt float64 // requests per acquire+release cycle
	Err             string
}

func runUncontended(s *servers, lib *library, n int, limit time.Duration) uncontendedResult {
	r := uncontendedResult{Lib: lib.Name}
	cy := newCycler(s, lib, n, limit+30*time.Second)
	defer cy.close()
	cy.measure(n, limit)
	r.N, r.P50, r.P99, r.RequestsPerGrnt, r.Err = cy.result()
	return r
}

// cycler times one contender's uncontended cycles (Lock, then Unlock) in
// one or more stretches, and counts the server's requests during them.
type cycler struct {
	s        *servers
	backend  string
	c        contender
	ctx      context.Context
	cancel   context.CancelFunc
	ds       []time.Duration
	requests float64
	err      error
}

// newCycler opens lib's contender for at most life and warms it up with
// n/10 cycles (at least 5).
func newCycler(s *servers, lib *library, n int, life time.Duration) *cycler {
	cy := &cycler{s: s, backend: lib.Backend, ds: make([]time.Duration, 0, n)}
	cy.ctx, cy.cancel = context.WithTimeout(context.Background(), life)
	if cy.c, cy.err = lib.newContender(cy.ctx, s.env, "uncontended"); cy.err != nil {
		return cy
	}
	for range max(n/10, 5) {
		if cy.err = cy.cycle(); cy.err != nil {
			return cy
		}
	}
	return cy
}

func (cy *cycler) cycle() error {
	if err := cy.c.Lock(cy.ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := cy.c.Unlock(cy.ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// measure times up to n more cycles within limit, unless a cycle failed.
func (cy *cycler) measure(n int, limit time.Duration) {
	if cy.err != nil {
		return
	}
	before, err := cy.s.counters(cy.backend)
	if err != nil {
		cy.err = err
		return
	}
	done := len(cy.ds)
	end := time.Now().Add(limit)
	for range n {
		if time.Now().After(end) {
			break
		}
		t := time.Now()
		if cy.err = cy.cycle(); cy.err != nil {
			return
		}
		cy.ds = append(cy.ds, time.Since(t))
	}
	after, err := cy.s.counters(cy.backend)
	if err != nil {
		cy.err = err
		return
	}
	if len(cy.ds) > done {
		cy.requests += after.sub(before).Requests
	}
}

// result is what the stretches measured: cycles, p50, p99, the server's
// requests per cycle, and the error that ended them ("" if none).
func (cy *cycler) result() (n int, p50, p99 time.Duration, perCycle float64, errText string) {
	if cy.err != nil {
		return 0, 0, 0, 0, cy.err.Error()
	}
	n = len(cy.ds)
	if n > 0 {
		perCycle = cy.requests / float64(n)
	}
	return n, percentile(cy.ds, 50), percentile(cy.ds, 99), perCycle, ""
}

func (cy *cycler) close() {
	if cy.c != nil {
		cy.c.Close()
	}
	cy.cancel()
}

// ---- contended ----

type contendedResult struct {
	Lib        string
	Round      int // 1, 2, …; 0 in runs older than rounds
	N          int
	Think      bool
	Window     time.Duration
	Grants     int
	GrantsPerS float64
	// Hand-offs to another contender: from the holder starting Unlock to
	// the next holder's Lock returning.
	Handoffs   int
	HandoffP50 time.Duration
	HandoffP99 time.Duration
	// SelfRetakes counts grants to the contender that released last while
	// others had been waiting for queuedAfter when its release began
	// (barging).
	SelfRetakes          int
	MinGrants, MaxGrants int
	Overlaps             int64
	Delta                counters // server work during the window
	Errors               int
	FirstErr             string
	Stuck                int // contenders that had not finished 20 s after the end
	Setup                time.Duration
}

func (r contendedResult) Fairness() float64 {
	if r.MaxGrants == 0 {
		return 0
	}
	return float64(r.MinGrants) / float64(r.MaxGrants)
}

// newContenders creates n contenders concurrently.
func newContenders(s *servers, lib *library, n int, key string) ([]contender, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := make([]contender, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cs[i], errs[i] = lib.newContender(ctx, s.env, key)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
			return nil, fmt.Errorf("contender %d: %w", i, err)
		}
	}
	return cs, nil
}

// queuedAfter is how long a contender must have been in Lock when a
// release begins for the releaser taking the lock back to count as barging.
const queuedAfter = time.Millisecond

// waitedThrough counts the contenders other than i that entered Lock
// before since.
func waitedThrough(waitingSince []atomic.Int64, i int, since int64) int64 {
	var n int64
	for j := range waitingSince {
		if t := waitingSince[j].Load(); j != i && t != 0 && t < since {
			n++
		}
	}
	return n
}

// runContended runs the contenders against one key for warm-up+window.
// Each loops Lock, a tiny critical section, Unlock, and with think time
// sleeps 1 ms before the next Lock.
func runContended(s *servers, lib *library, cs []contender, think bool, warmup, window time.Duration) contendedResult {
	n := len(cs)
	r := contendedResult{Lib: lib.Name, N: n, Think: think, Window: window}
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) } // monotonic
	ws := int64(warmup)
	end := int64(warmup + window)
	runCtx, cancel := context.WithDeadline(context.Background(), base.Add(warmup+window))
	defer cancel()

	var (
		inSection   atomic.Int32
		overlaps    atomic.Int64
		lastHolder  atomic.Int64
		unlockStart atomic.Int64
		// waitingSince[i] is when contender i entered Lock (0: it is not
		// in Lock); waitersAtUnlock counts, when the last release began,
		// the other contenders that had then been in Lock for at least
		// queuedAfter. Their requests have long reached the server, so a
		// FIFO lock must serve them before the releaser's next Lock. (One
		// that called Lock just before the release may still have its
		// request in flight, delayed by the scheduler of a busy machine:
		// the releaser winning that race is not barging.)
		waitingSince    = make([]atomic.Int64, n)
		waitersAtUnlock atomic.Int64
		protected       int64 // written only under the lock: the race detector would see overlaps
		rec             runRecorder
	)
	lastHolder.Store(-1)
	grants := make([]atomic.Int64, n)
	handoffs := make([][]time.Duration, n)
	selfRetakes := make([]int, n)

	var before, after counters
	var snapErr error
	snapDone := make(chan struct{})
	go func() {
		defer close(snapDone)
		time.Sleep(time.Duration(ws - now()))
		if before, snapErr = s.counters(lib.Backend); snapErr != nil {
			return
		}
		time.Sleep(time.Duration(end - now()))
		after, snapErr = s.counters(lib.Backend)
	}()

	var wg sync.WaitGroup
	finished := make(chan struct{})
	for i, c := range cs {
		wg.Go(func() {
			for now() < end {
				t0 := now()
				waitingSince[i].Store(max(t0, 1))
				err := c.Lock(runCtx)
				waitingSince[i].Store(0)
				t1 := now()
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					rec.fail(err)
					time.Sleep(time.Millisecond)
					continue
				}
				if inSection.Add(1) != 1 {
					overlaps.Add(1)
				}
				prev, us, others := lastHolder.Load(), unlockStart.Load(), waitersAtUnlock.Load()
				if t1 >= ws && t1 < end {
					grants[i].Add(1)
					switch {
					case prev == int64(i) && others > 0:
						// The releaser took the lock back although
						// others were waiting: barging.
						selfRetakes[i]++
					case prev >= 0 && prev != int64(i) && t0 <= us:
						// A waiter that was already waiting when the
						// release began: a hand-off. (A contender that
						// came to a free lock is not one.)
						handoffs[i] = append(handoffs[i], time.Duration(t1-us))
					}
				}
				protected++ // the critical section
				lastHolder.Store(int64(i))
				inSection.Add(-1)
				released := now()
				waitersAtUnlock.Store(waitedThrough(waitingSince, i, released-int64(queuedAfter)))
				unlockStart.Store(released)
				uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := c.Unlock(uctx); err != nil {
					rec.fail(fmt.Errorf("unlock: %w", err))
				}
				ucancel()
				if think {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Duration(end-now()) + 5*time.Second):
		// Waiters that cannot be cancelled (go-zookeeper) and are stuck:
		// closing their connections ends them.
		for _, c := range cs {
			c.Close()
		}
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
		}
		r.Stuck = -1
	}
	<-snapDone
	if snapErr == nil {
		r.Delta = after.sub(before)
	} else if r.FirstErr == "" {
		r.FirstErr = "server counters: " + snapErr.Error()
	}
	var all []time.Duration
	r.MinGrants = -1
	for i := range n {
		g := int(grants[i].Load())
		r.Grants += g
		all = append(all, handoffs[i]...)
		r.SelfRetakes += selfRetakes[i]
		if r.MinGrants < 0 || g < r.MinGrants {
			r.MinGrants = g
		}
		r.MaxGrants = max(r.MaxGrants, g)
	}
	r.Handoffs = len(all)
	r.HandoffP50, r.HandoffP99 = percentile(all, 50), percentile(all, 99)
	r.GrantsPerS = float64(r.Grants) / window.Seconds()
	r.Overlaps = overlaps.Load()
	rec.report(&r.Errors, &r.FirstErr)
	_ = protected
	return r
}

// ---- scale: many waiters on one key ----

type queueResult struct {
	Lib     string
	Waiters int
	Clients int
	Enqueue time.Duration // until every waiter was queued (or trying)
	Drain   time.Duration // from the holder's release until every waiter had the lock once
	Drained int
	// LastGrant is when the last waiter got the lock, from the holder's
	// release: with waiters left, how long the queue had stalled by the
	// end of the run.
	LastGrant  time.Duration
	Load       loadInfo // the machine load the run ran at
	MemPerWait float64  // server memory per queued waiter, bytes
	MemWhat    string
	Overlaps   int64
	Note       string
	Err        string
}

// queueLen reports how many waiters the server has queued on key, for the
// libraries that queue on the server; ok is false for the others.
func queueLen(ctx context.Context, lib *library, m multi, key string) (n int, ok bool, err error) {
	switch mm := m.(type) {
	case *dlockMulti:
		if mm.queueLen != nil {
			n, err := mm.queueLen(ctx, key)
			return n, true, err
		}
		info, err := mm.c.Inspect(ctx, key)
		if err != nil {
			return 0, true, err
		}
		return len(info.Waiters), true, nil
	case *zkMulti:
		ch, _, err := mm.conn.Children("/zk-bench/" + key)
		if err != nil && err != zk.ErrNoNode {
			return 0, true, err
		}
		return max(len(ch)-1, 0), true, nil
	case *etcdMulti:
		resp, err := mm.cli.Get(ctx, "/etcd-bench/"+key+"/", clientv3WithPrefixCount()...)
		if err != nil {
			return 0, true, err
		}
		return max(int(resp.Count)-1, 0), true, nil
	}
	return 0, false, nil
}

// openMultis opens n clients of lib for the scale tests, or none if one
// fails.
func openMultis(ctx context.Context, s *servers, lib *library, n int, ttl time.Duration, perLock bool) ([]multi, error) {
	ms := make([]multi, 0, n)
	for range n {
		m, err := lib.newMulti(ctx, s.env, ttl, perLock)
		if err != nil {
			closeMultis(ms)
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func closeMultis(ms []multi) {
	for _, m := range ms {
		m.Close()
	}
}

// GrantsPerS is the waiters that got the lock per second of the drain.
func (r queueResult) GrantsPerS() float64 {
	if r.Drain <= 0 {
		return 0
	}
	return float64(r.Drained) / r.Drain.Seconds()
}

// runQueueAtLoad is runQueue at a machine load of load (see atLoad).
func runQueueAtLoad(s *servers, lib *library, waiters, clients int, limit time.Duration, load float64) queueResult {
	var r queueResult
	li := atLoad(load, func() { r = runQueue(s, lib, waiters, clients, limit) })
	r.Load = li
	return r
}

func runQueue(s *servers, lib *library, waiters, clients int, limit time.Duration) queueResult {
	r := queueResult{Lib: lib.Name, Waiters: waiters, Clients: clients}
	key := "queue"
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	ms, err := openMultis(ctx, s, lib, clients, 10*time.Second, true)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer closeMultis(ms)
	release, err := ms[0].Lock(ctx, key)
	if err != nil {
		r.Err = "holder: " + err.Error()
		return r
	}
	mem0, what := s.memory(lib.Backend)
	r.MemWhat = what

	var inSection, overlaps atomic.Int64
	var drained, lastGrant atomic.Int64
	var released atomic.Int64 // the holder's release, in ns since t0 (set once)
	allDone := make(chan struct{})
	var wg sync.WaitGroup
	var errOnce sync.Once
	t0 := time.Now()
	for i := range waiters {
		wg.Go(func() {
			rel, err := ms[i%clients].Lock(ctx, key)
			if err != nil {
				errOnce.Do(func() { r.Err = err.Error() })
				return
			}
			if inSection.Add(1) != 1 {
				overlaps.Add(1)
			}
			inSection.Add(-1)
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = rel(rctx)
			rcancel()
			drained.Add(1)
			lastGrant.Store(int64(time.Since(t0)))
		})
	}
	go func() { wg.Wait(); close(allDone) }()
	// Wait until every waiter is queued on the server, or give the
	// libraries without a server-side queue a second to start trying. A
	// client of its own counts them, so as not to queue behind the waiters'
	// requests.
	inspector, err := lib.newMulti(ctx, s.env, 10*time.Second, true)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer inspector.Close()
	for {
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		n, ok, err := queueLen(qctx, lib, inspector, key)
		qcancel()
		if !ok {
			time.Sleep(time.Second)
			r.Note = "no server-side queue: waiters given 1 s to start trying"
			break
		}
		if err != nil {
			r.Err = "queue length: " + err.Error()
			break
		}
		if n >= waiters {
			break
		}
		if os.Getenv("BENCH_DEBUG_QUEUE") != "" {
			log.Printf("queued %d after %v", n, time.Since(t0))
		}
		if ctx.Err() != nil {
			r.Err = fmt.Sprintf("only %d of %d waiters queued before the time limit", n, waiters)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Enqueue = time.Since(t0)
	memQ, _ := s.memory(lib.Backend)
	r.MemPerWait = float64(memQ-mem0) / float64(waiters)
	t1 := time.Now()
	released.Store(int64(t1.Sub(t0)))
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = release(rctx)
	rcancel()
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	r.Drain = time.Since(t1)
	r.Drained = int(drained.Load())
	if lg := lastGrant.Load(); lg > 0 {
		r.LastGrant = time.Duration(lg - released.Load())
	}
	r.Overlaps = overlaps.Load()
	if r.Drained < waiters && r.Err == "" {
		r.Err = fmt.Sprintf("stalled: only %d of %d waiters got the lock within %v (the last %v after the release, the run ended %v after it)",
			r.Drained, waiters, limit, r.LastGrant.Round(time.Millisecond), r.Drain.Round(time.Millisecond))
	}
	cancel()
	// Waiters that ignore ctx (go-zookeeper) end when their connections close.
	for _, m := range ms {
		m.Close()
	}
	ms = nil
	waitTimeout(allDone, 30*time.Second)
	return r
}

func waitTimeout(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// lockKeys takes the keys k0 … k(keys-1), each once, with workers
// goroutines spread over the clients ms, until all are held or ctx ends.
// It returns the release of each key (nil for a key not taken), how many
// were taken, and the first error.
func lockKeys(ctx context.Context, ms []multi, keys, workers int) ([]func(context.Context) error, int, error) {
	releases := make([]func(context.Context) error, keys)
	var next, held atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= keys {
					return
				}
				// Lock, not TryLock: every key is free, so it is granted
				// at once; the same call for every library.
				rel, err := ms[w%len(ms)].Lock(ctx, fmt.Sprintf("k%d", i))
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				releases[i] = rel
				held.Add(1)
			}
		})
	}
	wg.Wait()
	return releases, int(held.Load()), firstErr
}

// releaseKeys calls every release of lockKeys, with workers goroutines,
// within limit.
func releaseKeys(releases []func(context.Context) error, workers int, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(releases) {
					return
				}
				if rel := releases[i]; rel != nil {
					_ = rel(ctx)
				}
			}
		})
	}
	wg.Wait()
}
