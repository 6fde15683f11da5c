package etcddlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
)

// The Txn that creates a Shared entry, its reply lost, is retried, and the
// retry finds the entry instead of creating a second one: on a free key,
// for each shared call, waiting or not.
func TestShared_lostCreateReply(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, tc := range []struct {
		name string
		call func(c *dlock.Client, key string) (*dlock.Lease, error)
	}{
		{"Acquire", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.Semaphore(key, 2).Acquire(ctx) }},
		{"TryAcquire", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.Semaphore(key, 2).TryAcquire(ctx) }},
		{"RLock", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.RWMutex(key).RLock(ctx) }},
		{"TryRLock", func(c *dlock.Client, key string) (*dlock.Lease, error) { return c.RWMutex(key).TryRLock(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shared-lost-reply/" + t.Name()
			c := newCounter()
			client := c.client(t, ctx, srv.Addr(), longTTL)
			c.dropNextReply(putApplied)
			l, err := tc.call(client, key)
			if err != nil {
				t.Fatal(err)
			}
			// The small Txn of a free key says nothing when it fails: the
			// full one after it finds the entry.
			if sent, _ := c.take(); sent[txnMethod] != 3 {
				t.Errorf("sent %v, want 3 Txn: the one whose reply was lost, its retry, and the full one", sent)
			}
			lease := checkTokenIsOnlyEntry(t, ctx, admin, key, l)
			if l.Mode() != dlock.Shared {
				t.Errorf("mode %v, want shared", l.Mode())
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if !leaseAlive(t, ctx, admin, lease) {
				t.Error("shared lease revoked at Unlock: want it kept for the client's other calls")
			}
			c.replayDropped(t, ctx, admin)
			checkNothingStored(t, ctx, admin, key)
		})
	}
}

// The same when the call must wait: it queues once, in its place, and is
// granted at the release ahead of it. A permit behind a semaphore's
// holder; a reader behind a writer; a reader behind a reader and a
// waiting writer.
func TestShared_lostCreateReplyWhileQueued(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		ahead  []func(key string) acquirer // taken or queued before, in order
		holds  int                         // how many of them hold
		waiter func(key string) acquirer
	}{
		{"permit", []func(string) acquirer{sem1}, 1, sem1},
		{"reader behind writer", []func(string) acquirer{writer}, 1, reader},
		{"reader behind waiting writer", []func(string) acquirer{reader, writer}, 1, reader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shared-lost-reply-queued/" + t.Name()
			holder := newCounter().client(t, ctx, srv.Addr(), longTTL)
			var held []*dlock.Lease
			var queued []<-chan lockResult
			for i, acq := range tc.ahead {
				if i < tc.holds {
					l, err := acq(key)(ctx, holder)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, l)
					continue
				}
				queued = append(queued, goAcquire(ctx, newCounter().client(t, ctx, srv.Addr(), longTTL), acq(key)))
				waitWaiters(t, ctx, holder, key, len(queued))
			}
			c := newCounter()
			waiter := c.client(t, ctx, srv.Addr(), longTTL)
			c.dropNextReply(putApplied)
			got := goAcquire(ctx, waiter, tc.waiter(key))
			waitWaiters(t, ctx, holder, key, len(queued)+1)
			c.waitSent(t, ctx, "dropped", 1)
			c.waitCreated(t, ctx, 2)
			if info := inspect(t, ctx, holder, key); len(info.Waiters) != len(queued)+1 {
				t.Fatalf("Inspect: %d waiters, want %d", len(info.Waiters), len(queued)+1)
			}
			for _, l := range held {
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range queued {
				if err := awaitLock(t, ctx, q).Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := awaitLock(t, ctx, got).Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
		})
	}
}

func sem1(key string) acquirer { return permit(key, 1) }

// Waiters that give up, at random points of their wait (some just as they
// are granted), leave nothing behind, in every mode: a semaphore's first
// and later waiters, readers and writers.
func TestShared_cancelLeavesNothing(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	admin := adminClient(t, srv.Addr())
	for _, tc := range []struct {
		name  string
		limit int
		how   func(key string, i int) acquirer
	}{
		{"semaphore", 2, func(key string, _ int) acquirer { return permit(key, 2) }},
		{"rwmutex", 0, func(key string, i int) acquirer {
			if i%3 == 0 {
				return writer(key)
			}
			return reader(key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shared-cancel/" + t.Name()
			const n, rounds = 6, 20
			h := &holderCount{}
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				c := newCounter().client(t, ctx, srv.Addr(), longTTL)
				acq := tc.how(key, i)
				wg.Go(func() {
					for r := range rounds {
						lctx, cancel := context.WithCancel(ctx)
						if i%2 == 1 && r%3 == 0 {
							// Give up at some point of the wait: the
							// deadline is the fault injected, not a
							// synchronization.
							lctx, cancel = context.WithTimeout(ctx, time.Duration(r%5)*time.Millisecond)
						}
						l, err := acq(lctx, c)
						cancel()
						if lctx.Err() != nil && errors.Is(err, lctx.Err()) {
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						if err := h.hold(ctx, l, tc.limit, 1); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			waitContenders(t, &wg, errs)
			h.report(t)
			checkNothingStored(t, ctx, admin, key)
		})
	}
}

// A permit holder that dies (cut off: etcd expires its lease) gives its
// permit back within its TTL: the first waiter is granted then, beside the
// other holder; the dead holder's lease ends. The same for a writer that
// dies with readers waiting behind it: its entry goes without a release
// marker, and the readers read the queue and are granted together.
func TestShared_crashedHolderFreesItsPlace(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name    string
		other   func(key string) acquirer // holds beside the one that dies, or nil
		dies    func(key string) acquirer
		waiters []func(key string) acquirer
	}{
		{"permit", func(key string) acquirer { return permit(key, 2) }, func(key string) acquirer { return permit(key, 2) },
			[]func(string) acquirer{func(key string) acquirer { return permit(key, 2) }}},
		{"writer", nil, writer, []func(string) acquirer{reader, reader}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shared-crash/" + t.Name()
			watcher := newCounter().client(t, ctx, srv.Addr(), longTTL)
			var other *dlock.Lease
			if tc.other != nil {
				var err error
				if other, err = tc.other(key)(ctx, watcher); err != nil {
					t.Fatal(err)
				}
			}
			p := dlocktest.NewProxy(t, srv.Addr())
			cut, err := dlock.Open(ctx, "etcd://"+p.Addr(), dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer cut.Close()
			dying, err := tc.dies(key)(ctx, cut)
			if err != nil {
				t.Fatal(err)
			}
			var got []<-chan lockResult
			for i, w := range tc.waiters {
				got = append(got, goAcquire(ctx, newCounter().client(t, ctx, srv.Addr(), longTTL), w(key)))
				waitWaiters(t, ctx, watcher, key, i+1)
			}
			p.Blackhole()
			var granted []*dlock.Lease
			for _, g := range got {
				granted = append(granted, awaitLock(t, ctx, g))
			}
			select {
			case <-dying.Done():
			case <-ctx.Done():
				t.Fatal("the cut-off holder's lease did not end (watchdog)")
			}
			info := inspect(t, ctx, watcher, key)
			if want := len(granted) + map[bool]int{true: 1}[other != nil]; len(info.Holders) != want || len(info.Waiters) != 0 {
				t.Fatalf("Inspect: %d holders, %d waiters; want %d, 0", len(info.Holders), len(info.Waiters), want)
			}
			for _, l := range append(granted, other) {
				if l == nil {
					continue
				}
				if l.Token() <= dying.Token() && l != other {
					t.Errorf("token %d not above the dead holder's %d", l.Token(), dying.Token())
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			p.Restore()
			checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
		})
	}
}

// Calls of different kinds racing for a free key: each is granted or
// refused with ErrKindMismatch, and the leases valid at once are all of one
// kind, and by its rule. Were two kinds let into one queue (each seeing the
// key free, or each other's entry as its own kind), a lock would be held
// beside a permit or a reader.
func TestKindMismatch_race(t *testing.T) {
	srv := testserver.SharedEtcd(t)
	ctx := testCtx(t)
	key := "kind-race/" + t.Name()
	kinds := []struct {
		kind dlock.Kind
		acq  acquirer
	}{
		{dlock.KindLock, func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Lock(ctx, key) }},
		{dlock.KindSemaphore, permit(key, 2)},
		{dlock.KindSemaphore, permit(key, 3)},
		{dlock.KindRWMutex, reader(key)},
		{dlock.KindRWMutex, writer(key)},
	}
	const rounds = 15
	var mu sync.Mutex
	held := map[string]int{} // valid leases by kind label
	var failures []string
	mismatches := 0
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(kinds))
	for i := range 2 * len(kinds) {
		k := kinds[i%len(kinds)]
		label := fmt.Sprint(i % len(kinds))
		if k.kind == dlock.KindRWMutex {
			label = "rw"
		}
		c := newCounter().client(t, ctx, srv.Addr(), longTTL)
		wg.Go(func() {
			for range rounds {
				l, err := k.acq(ctx, c)
				if errors.Is(err, dlock.ErrKindMismatch) {
					mu.Lock()
					mismatches++
					mu.Unlock()
					yield()
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				held[label]++
				if len(held) > 1 {
					failures = append(failures, fmt.Sprintf("leases of two kinds at once: %v", held))
				}
				mu.Unlock()
				yield()
				mu.Lock()
				if held[label]--; held[label] == 0 {
					delete(held, label)
				}
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	waitContenders(t, &wg, errs)
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d kind mismatches", mismatches)
	checkNothingStored(t, ctx, adminClient(t, srv.Addr()), key)
}
