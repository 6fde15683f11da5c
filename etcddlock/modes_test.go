package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/etcddlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// holderCount tracks how many valid leases of each mode are held at once.
type holderCount struct {
	mu                sync.Mutex
	shared, exclusive int
	errs              []string
}

func (h *holderCount) enter(m dlock.Mode, limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m == dlock.Shared {
		h.shared++
	} else {
		h.exclusive++
	}
	switch {
	case h.exclusive > 1 || (h.exclusive == 1 && h.shared > 0):
		h.errs = append(h.errs, fmt.Sprintf("%d exclusive and %d shared leases at once", h.exclusive, h.shared))
	case limit > 0 && h.shared > limit:
		h.errs = append(h.errs, fmt.Sprintf("%d permits held at once, limit %d", h.shared, limit))
	}
}

func (h *holderCount) leave(m dlock.Mode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m == dlock.Shared {
		h.shared--
	} else {
		h.exclusive--
	}
}

// acquirer is one contender's way to take the key: a permit, a read or a
// write lease.
type acquirer func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)

func permit(key string, limit int) acquirer {
	return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
		return c.Semaphore(key, limit).Acquire(ctx)
	}
}

func reader(key string) acquirer {
	return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex(key).RLock(ctx) }
}

func writer(key string) acquirer {
	return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex(key).Lock(ctx) }
}

// runModes has client i take the key rounds times with how(i), all at
// once, checking the modes' exclusion with h, and holding each lease until
// the next contender's grant or for a bounded number of scheduler yields
// (so that permits overlap).
func runModes(t *testing.T, ctx context.Context, clients []*dlock.Client, rounds, limit int, how func(i int) acquirer) {
	t.Helper()
	h := &holderCount{}
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for i, c := range clients {
		acq := how(i)
		wg.Go(func() {
			for range rounds {
				l, err := acq(ctx, c)
				if err != nil {
					errs <- err
					return
				}
				if err := h.hold(ctx, l, limit, 50); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	waitContenders(t, &wg, errs)
	h.report(t)
}

// yield lets other goroutines run: a hold that is no synchronization.
func yield() { runtime.Gosched() }

// Saturation, step by step: limit holders hold all permits; TryAcquire
// then fails; waiters queue; each release grants exactly the first waiter.
func TestSemaphore_saturation(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "sem-saturation/" + t.Name()
	const limit = 3
	c := newCounter().client(t, ctx, srv.Addr(), longTTL)
	sem := c.Semaphore(key, limit)
	var held []*dlock.Lease
	for range limit {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) > 0 && l.Token() <= held[len(held)-1].Token() {
			t.Errorf("token %d not above the previous grant's %d", l.Token(), held[len(held)-1].Token())
		}
		held = append(held, l)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryAcquire with every permit held: %v, want ErrLocked", err)
	}
	const waiters = 4
	got := make([]<-chan lockResult, waiters)
	for i := range waiters {
		got[i] = goAcquire(ctx, newCounter().client(t, ctx, srv.Addr(), longTTL), permit(key, limit))
		waitWaiters(t, ctx, c, key, i+1)
	}
	info := inspect(t, ctx, c, key)
	if info.Kind != dlock.KindSemaphore || info.Limit != limit || len(info.Holders) != limit || len(info.Waiters) != waiters {
		t.Fatalf("Inspect = %v/%d, %d holders, %d waiters; want semaphore/%d, %d, %d", info.Kind, info.Limit, len(info.Holders), len(info.Waiters), limit, limit, waiters)
	}
	for i, h := range info.Holders {
		if h.Token != held[i].Token() || h.Mode != dlock.Shared || h.TTL <= 0 {
			t.Errorf("holder %d: token %d, mode %v, TTL %v; want %d, shared, positive", i, h.Token, h.Mode, h.TTL, held[i].Token())
		}
	}
	for i, w := range info.Waiters {
		if w.Token != 0 || w.Mode != dlock.Shared {
			t.Errorf("waiter %d: token %d, mode %v; want 0, shared", i, w.Token, w.Mode)
		}
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryAcquire with waiters: %v, want ErrLocked", err)
	}
	// Each release grants the first waiter, and only it.
	for i := range waiters {
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
		l := awaitLock(t, ctx, got[i])
		for _, h := range held {
			if l.Token() <= h.Token() {
				t.Errorf("waiter %d's token %d not above an earlier grant's %d", i, l.Token(), h.Token())
			}
		}
		held = append(held, l)
		waitWaiters(t, ctx, c, key, waiters-1-i)
		if info := inspect(t, ctx, c, key); len(info.Holders) != limit {
			t.Fatalf("after release %d: %d holders, want %d", i, len(info.Holders), limit)
		}
		for j := i + 1; j < waiters; j++ {
			select {
			case r := <-got[j]:
				t.Fatalf("waiter %d granted (%v) out of turn", j, r.err)
			default:
			}
		}
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// goAcquire runs acq in a goroutine.
func goAcquire(ctx context.Context, c *dlock.Client, acq acquirer) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := acq(ctx, c)
		got <- lockResult{l, err}
	}()
	return got
}

func inspect(t *testing.T, ctx context.Context, c *dlock.Client, key string) *dlock.LockInfo {
	t.Helper()
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// modes returns the modes of entries.
func modes(es []dlock.Entry) []dlock.Mode {
	var out []dlock.Mode
	for _, e := range es {
		out = append(out, e.Mode)
	}
	return out
}

// FIFO on a read-write lock: readers that arrive while a writer holds wait;
// a reader behind a waiting writer waits behind it; the consecutive readers
// at the head are granted together, at one release; tokens grow in grant
// order.
func TestRWMutex_fifo(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "rw-fifo/" + t.Name()
	c := newCounter().client(t, ctx, srv.Addr(), longTTL)
	w0, err := c.RWMutex(key).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex(key).TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryRLock while a writer holds: %v, want ErrLocked", err)
	}
	// Queue: r1, r2, w1, r3.
	order := []acquirer{reader(key), reader(key), writer(key), reader(key)}
	got := make([]<-chan lockResult, len(order))
	counters := make([]*counter, len(order))
	for i, acq := range order {
		counters[i] = newCounter()
		got[i] = goAcquire(ctx, counters[i].client(t, ctx, srv.Addr(), longTTL), acq)
		waitWaiters(t, ctx, c, key, i+1)
	}
	info := inspect(t, ctx, c, key)
	if want := []dlock.Mode{dlock.Shared, dlock.Shared, dlock.Exclusive, dlock.Shared}; info.Kind != dlock.KindRWMutex ||
		!slices.Equal(modes(info.Holders), []dlock.Mode{dlock.Exclusive}) || !slices.Equal(modes(info.Waiters), want) {
		t.Fatalf("Inspect: %v, holders %v, waiters %v; want rwmutex, [exclusive], %v", info.Kind, modes(info.Holders), modes(info.Waiters), want)
	}
	if err := w0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// r1 and r2 together, while both hold.
	r1, r2 := awaitLock(t, ctx, got[0]), awaitLock(t, ctx, got[1])
	if r1.Token() <= w0.Token() || r2.Token() <= r1.Token() {
		t.Errorf("tokens w0 %d, r1 %d, r2 %d: want increasing", w0.Token(), r1.Token(), r2.Token())
	}
	waitWaiters(t, ctx, c, key, 2)
	if _, err := c.RWMutex(key).TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryRLock with a writer waiting: %v, want ErrLocked", err)
	}
	for _, i := range []int{2, 3} {
		select {
		case r := <-got[i]:
			t.Fatalf("entry %d granted (%v) while readers hold and a writer waits ahead", i, r.err)
		default:
		}
	}
	// r2, just ahead of w1, releases first: w1 must see that r1 still
	// holds (a Shared holder's release is no hand-off) and wait for it,
	// with a new watch. Were the release taken for a hand-off, w1 would
	// be granted beside r1.
	counters[2].waitCreated(t, ctx, 2)
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rewatched := make(chan struct{})
	go func() {
		defer close(rewatched)
		counters[2].mu.Lock()
		defer counters[2].mu.Unlock()
		counters[2].waitLocked(ctx, func() bool { return counters[2].created >= 3 })
	}()
	select {
	case r := <-got[2]:
		t.Fatalf("w1 granted (%v) while r1 holds", r.err)
	case <-rewatched:
	}
	select {
	case r := <-got[2]:
		t.Fatalf("w1 granted (%v) while r1 holds", r.err)
	default:
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w1 := awaitLock(t, ctx, got[2])
	select {
	case r := <-got[3]:
		t.Fatalf("r3 granted (%v) with the writer", r.err)
	default:
	}
	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r3 := awaitLock(t, ctx, got[3])
	if w1.Token() <= r2.Token() || r3.Token() <= w1.Token() {
		t.Errorf("tokens r2 %d, w1 %d, r3 %d: want increasing", r2.Token(), w1.Token(), r3.Token())
	}
	if err := r3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}

// snapshot returns every etcd key stored for key (entries, markers, the
// tail) with its mod revision and lease.
func snapshot(t *testing.T, ctx context.Context, admin *clientv3.Client, key string) []string {
	t.Helper()
	dir := etcddlock.QueueDirForTest(etcddlock.DefaultPrefix, key)
	resp, err := admin.Get(ctx, strings.TrimSuffix(dir, "/"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%q mod %d lease %x", kv.Key, kv.ModRevision, kv.Lease))
	}
	return out
}

// A request of another kind or limit fails with ErrKindMismatch, naming
// what the key is, and writes nothing: held alone (one entry, no tail), and
// held and waited for, with a tail and (the newest waiter gone) without.
func TestKindMismatch_writesNothing(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	c := newCounter().client(t, ctx, srv.Addr(), longTTL)
	type call func(key string) (*dlock.Lease, error)
	all := map[string]call{
		"lock":     func(key string) (*dlock.Lease, error) { return c.Lock(ctx, key) },
		"trylock":  func(key string) (*dlock.Lease, error) { return c.TryLock(ctx, key) },
		"sem3":     func(key string) (*dlock.Lease, error) { return c.Semaphore(key, 3).Acquire(ctx) },
		"trysem3":  func(key string) (*dlock.Lease, error) { return c.Semaphore(key, 3).TryAcquire(ctx) },
		"sem2":     func(key string) (*dlock.Lease, error) { return c.Semaphore(key, 2).Acquire(ctx) },
		"trysem2":  func(key string) (*dlock.Lease, error) { return c.Semaphore(key, 2).TryAcquire(ctx) },
		"rlock":    func(key string) (*dlock.Lease, error) { return c.RWMutex(key).RLock(ctx) },
		"tryrlock": func(key string) (*dlock.Lease, error) { return c.RWMutex(key).TryRLock(ctx) },
		"wlock":    func(key string) (*dlock.Lease, error) { return c.RWMutex(key).Lock(ctx) },
		"trywlock": func(key string) (*dlock.Lease, error) { return c.RWMutex(key).TryLock(ctx) },
	}
	kinds := []struct {
		name string
		what string   // how the error names it
		same []string // requests of the same kind and limit
		acq  func(key string) acquirer
	}{
		{"lock", "it is a lock", []string{"lock", "trylock"}, func(key string) acquirer {
			return func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Lock(ctx, key) }
		}},
		{"semaphore", "it is a semaphore of 3 permits", []string{"sem3", "trysem3"}, func(key string) acquirer { return permit(key, 3) }},
		{"rwmutex", "it is a read-write lock", []string{"rlock", "tryrlock", "wlock", "trywlock"}, writer},
	}
	for _, k := range kinds {
		for _, state := range []string{"alone", "tail", "no tail"} {
			t.Run(k.name+"/"+state, func(t *testing.T) {
				key := "kind-mismatch/" + t.Name()
				acq := k.acq(key)
				holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
				// A semaphore of 3: three holders, so that waiters wait.
				var held []*dlock.Lease
				holders := 1
				if k.name == "semaphore" && state != "alone" {
					holders = 3
				}
				for range holders {
					l, err := acq(ctx, holder)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, l)
				}
				var w1 <-chan lockResult
				if state != "alone" {
					w1 = goAcquire(ctx, newCounter().client(t, ctx, srv.Addr(), longTTL), acq)
					waitWaiters(t, ctx, holder, key, 1)
				}
				if state == "no tail" {
					// A second waiter that gives up takes the tail with it.
					ctx2, cancel2 := context.WithCancel(ctx)
					w2 := goAcquire(ctx2, newCounter().client(t, ctx, srv.Addr(), longTTL), acq)
					waitWaiters(t, ctx, holder, key, 2)
					cancel2()
					if r := <-w2; !errors.Is(r.err, context.Canceled) {
						t.Fatalf("second waiter: %v, want context.Canceled", r.err)
					}
					waitWaiters(t, ctx, holder, key, 1)
				}
				before := snapshot(t, ctx, admin, key)
				for name, req := range all {
					if slices.Contains(k.same, name) {
						continue
					}
					l, err := req(key)
					if err == nil {
						_ = l.Unlock(ctx)
					}
					if !errors.Is(err, dlock.ErrKindMismatch) || !strings.Contains(err.Error(), k.what) {
						t.Errorf("%s on a %s: %v; want ErrKindMismatch saying %q", name, k.name, err, k.what)
					}
				}
				if after := snapshot(t, ctx, admin, key); !slices.Equal(before, after) {
					t.Errorf("refused requests changed the key's state:\nbefore %q\nafter  %q", before, after)
				}
				for _, l := range held {
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if w1 != nil {
					if err := awaitLock(t, ctx, w1).Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				// A free key serves any kind.
				for _, name := range []string{"trylock", "trysem2", "tryrlock", "trywlock"} {
					l, err := all[name](key)
					if err != nil {
						t.Fatalf("%s on the free key: %v", name, err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				checkNothingStored(t, ctx, admin, key)
			})
		}
	}
}

// waitContenders waits for the contenders of wg, then fails the test with
// the first error they sent on errs.
func waitContenders(t *testing.T, wg *sync.WaitGroup, errs chan error) {
	t.Helper()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// report fails the test (not fatally) with every problem h recorded.
func (h *holderCount) report(t *testing.T) {
	t.Helper()
	for _, e := range h.errs {
		t.Error(e)
	}
}

// hold runs the critical section of l through h (entered with limit, left
// after yields scheduler yields), then unlocks l.
func (h *holderCount) hold(ctx context.Context, l *dlock.Lease, limit, yields int) error {
	h.enter(l.Mode(), limit)
	for range yields {
		yield()
	}
	h.leave(l.Mode())
	return l.Unlock(ctx)
}
