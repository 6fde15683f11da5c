package redisdlock_test

// Tests of the modes on the Redis backend: semaphores and read-write locks
// served by the one holders hash and queue of the scripts.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// note tags an attempt, so that Inspect shows whose entry is whose.
func note(s string) dlock.LockOption { return dlock.WithMetadata(dlock.Metadata{Note: s}) }

// notes returns the notes of entries, in order.
func notes(es []dlock.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Metadata.Note)
	}
	return out
}

// held is a lease obtained in a goroutine, and the way to release it.
type held struct {
	name string
	l    *dlock.Lease
	err  error
}

// background runs acquire in a goroutine and delivers its lease on the
// returned channel.
func background(name string, acquire func() (*dlock.Lease, error)) <-chan held {
	ch := make(chan held, 1)
	go func() {
		l, err := acquire()
		ch <- held{name, l, err}
	}()
	return ch
}

func receive(t *testing.T, ctx context.Context, ch <-chan held) *dlock.Lease {
	t.Helper()
	select {
	case h := <-ch:
		if h.err != nil {
			t.Fatalf("%s: %v", h.name, h.err)
		}
		return h.l
	case <-ctx.Done():
		t.Fatal("an acquire never returned (watchdog)")
	}
	return nil
}

// notYet fails if an acquire has returned already. It proves nothing about
// the future; the Inspect checks around it do.
func notYet(t *testing.T, ch <-chan held) {
	t.Helper()
	select {
	case h := <-ch:
		t.Fatalf("%s was granted out of turn (err %v)", h.name, h.err)
	default:
	}
}

func inspect(t *testing.T, ctx context.Context, c *dlock.Client, key string) *dlock.LockInfo {
	t.Helper()
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A semaphore of 3 under 12 contenders, each taking it 6 times: never more
// than 3 leases valid at once (counted here, between Acquire's return and
// Unlock's call, which is inside the leases' validity), every token unique.
func TestSemaphore_neverAboveLimitUnderContention(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	const limit, contenders, rounds = 3, 12, 6
	var inside, most atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	for range contenders {
		c := newTestClient(t, ctx, srv.Addr(), nil)
		s := c.Semaphore("sem-contention", limit)
		wg.Go(func() {
			for range rounds {
				l, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if tokens[l.Token()] {
					t.Errorf("token %d granted twice", l.Token())
				}
				tokens[l.Token()] = true
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Fatalf("%d leases of a semaphore of %d valid at once", m, limit)
	}
	if len(tokens) != contenders*rounds {
		t.Fatalf("%d grants, want %d", len(tokens), contenders*rounds)
	}
}

// Saturation: when the holders of a semaphore of 3 release, the first three
// waiters hold all three permits, in arrival order, and the others wait.
// Each release wakes exactly the one waiter it grants: one PUBLISH per
// grant, one script call (the release) per grant, no polls (polls are
// hourly here, so only notices can have woken them).
func TestSemaphore_allPermitsUsedInOrder(t *testing.T) {
	srv, ctx, admin, opts := costRig(t)
	const key, limit = "sem-saturated", 3
	c := newTestClient(t, ctx, srv.Addr(), opts)
	s := c.Semaphore(key, limit)
	var first []*dlock.Lease
	for i := range limit {
		l, err := s.TryAcquire(ctx, dlock.WithTTL(time.Minute), note(fmt.Sprint("h", i)))
		if err != nil {
			t.Fatalf("permit %d of %d: %v", i+1, limit, err)
		}
		first = append(first, l)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryAcquire of a fourth permit: %v, want ErrLocked", err)
	}
	var waiting []<-chan held
	for i := range 5 {
		w := newTestClient(t, ctx, srv.Addr(), opts).Semaphore(key, limit)
		name := fmt.Sprint("w", i)
		waiting = append(waiting, background(name, func() (*dlock.Lease, error) {
			return w.Acquire(ctx, dlock.WithTTL(time.Minute), note(name))
		}))
		waitWaiters(t, ctx, c, key, i+1)
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var granted []*dlock.Lease
	for i, l := range first {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		granted = append(granted, receive(t, ctx, waiting[i]))
	}
	stats := commandStats(t, ctx, admin)
	if scripts := stats["evalsha"] + stats["eval"]; scripts != limit || stats["publish"] != limit {
		t.Errorf("%d releases: %d script calls and %d PUBLISH, want %d and %d (each release wakes the one waiter it grants)",
			limit, scripts, stats["publish"], limit, limit)
	}
	info := inspect(t, ctx, c, key)
	if info.Kind != dlock.KindSemaphore || info.Limit != limit {
		t.Errorf("kind %v limit %d, want semaphore of %d", info.Kind, info.Limit, limit)
	}
	if got := notes(info.Holders); !slices.Equal(got, []string{"w0", "w1", "w2"}) {
		t.Errorf("holders %v, want w0 w1 w2: all permits in use, in arrival order", got)
	}
	if got := notes(info.Waiters); !slices.Equal(got, []string{"w3", "w4"}) {
		t.Errorf("waiters %v, want w3 w4", got)
	}
	for i, h := range info.Holders {
		if h.Mode != dlock.Shared || h.Token != granted[i].Token() || h.TTL <= 0 {
			t.Errorf("holder %d: %+v, want shared with token %d and time left", i, h, granted[i].Token())
		}
		if i > 0 && h.Token <= info.Holders[i-1].Token {
			t.Errorf("tokens %d then %d: not increasing in grant order", info.Holders[i-1].Token, h.Token)
		}
	}
	for _, w := range info.Waiters {
		if w.Mode != dlock.Shared || w.Token != 0 {
			t.Errorf("waiter %+v, want shared without token", w)
		}
	}
	for _, l := range granted {
		_ = l.Unlock(ctx)
	}
	for _, ch := range waiting[limit:] {
		_ = receive(t, ctx, ch).Unlock(ctx)
	}
}

// FIFO on a read-write lock: a reader behind a waiting writer waits behind
// it, and consecutive readers at the head are granted together by one
// release, which publishes once to each of them and to nobody else.
// Tokens increase in grant order, readers' included.
func TestRWMutex_fifoReadersTogether(t *testing.T) {
	srv, ctx, admin, opts := costRig(t)
	const key = "rw-fifo"
	c := newTestClient(t, ctx, srv.Addr(), opts)
	rw := func() *dlock.RWMutex { return newTestClient(t, ctx, srv.Addr(), opts).RWMutex(key) }
	ttl := dlock.WithTTL(time.Minute)

	w1, err := c.RWMutex(key).Lock(ctx, ttl, note("w1"))
	if err != nil {
		t.Fatal(err)
	}
	queue := []struct {
		name   string
		shared bool
	}{{"r1", true}, {"w2", false}, {"r2", true}, {"r3", true}, {"w3", false}}
	chans := map[string]<-chan held{}
	for i, e := range queue {
		m := rw()
		chans[e.name] = background(e.name, func() (*dlock.Lease, error) {
			if e.shared {
				return m.RLock(ctx, ttl, note(e.name))
			}
			return m.Lock(ctx, ttl, note(e.name))
		})
		waitWaiters(t, ctx, c, key, i+1)
	}
	info := inspect(t, ctx, c, key)
	if info.Kind != dlock.KindRWMutex || info.Limit != 0 {
		t.Errorf("kind %v limit %d, want rwmutex, 0", info.Kind, info.Limit)
	}
	wantModes := []dlock.Mode{dlock.Shared, dlock.Exclusive, dlock.Shared, dlock.Shared, dlock.Exclusive}
	for i, w := range info.Waiters {
		if w.Mode != wantModes[i] || w.Metadata.Note != queue[i].name {
			t.Errorf("waiter %d: %s %v, want %s %v", i, w.Metadata.Note, w.Mode, queue[i].name, wantModes[i])
		}
	}
	// w1 → r1 alone: w2 waits, and r2, r3 behind it.
	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1 := receive(t, ctx, chans["r1"])
	if _, err := c.RWMutex(key).TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryRLock with a writer waiting: %v, want ErrLocked (a reader must not pass a waiting writer)", err)
	}
	info = inspect(t, ctx, c, key)
	if got := notes(info.Holders); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("after w1: holders %v, want r1 alone (w2 waits ahead of r2, r3)", got)
	}
	notYet(t, chans["r2"])
	// r1 → w2.
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := receive(t, ctx, chans["w2"])
	// w2 → r2 and r3 together, by one release publishing to both only.
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r2, r3 := receive(t, ctx, chans["r2"]), receive(t, ctx, chans["r3"])
	stats := commandStats(t, ctx, admin)
	if scripts := stats["evalsha"] + stats["eval"]; scripts != 1 || stats["publish"] != 2 {
		t.Errorf("the writer's release: %d script calls and %d PUBLISH, want 1 and 2 (both readers granted and woken by it, nobody else)",
			scripts, stats["publish"])
	}
	info = inspect(t, ctx, c, key)
	if got := notes(info.Holders); !slices.Equal(got, []string{"r2", "r3"}) {
		t.Fatalf("after w2: holders %v, want r2 r3", got)
	}
	if got := notes(info.Waiters); !slices.Equal(got, []string{"w3"}) {
		t.Fatalf("after w2: waiters %v, want w3", got)
	}
	tokens := []uint64{w1.Token(), r1.Token(), w2.Token(), r2.Token(), r3.Token()}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens in grant order %v: not increasing", tokens)
		}
	}
	// w3 waits for both readers.
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	notYet(t, chans["w3"])
	if got := notes(inspect(t, ctx, c, key).Holders); !slices.Equal(got, []string{"r3"}) {
		t.Fatalf("after r2: holders %v, want r3 (w3 waits for every reader)", got)
	}
	if err := r3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w3 := receive(t, ctx, chans["w3"])
	if w3.Token() <= r3.Token() {
		t.Errorf("w3's token %d not above r3's %d", w3.Token(), r3.Token())
	}
	_ = w3.Unlock(ctx)
}

// A permit holder that dies (cut off: it neither renews nor releases) gives
// its permit back within its TTL: the first waiter polls at the earliest
// deadline among the holders and is granted then, long before its own
// polls (every 20 minutes here) would come. By then the dead holder's lease
// has ended on its side too (Err checks the clock).
func TestSemaphore_crashedHolderPermitReturns(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	const key = "sem-crash"
	live := newTestClient(t, ctx, srv.Addr(), nil)
	link := dlocktest.NewProxy(t, srv.Addr())
	doomed := newTestClient(t, ctx, link.Addr(), nil)
	slowPolls := &redisdlock.Options{WaiterTimeout: 2 * time.Hour, PollInterval: time.Hour}
	waiter := newTestClient(t, ctx, srv.Addr(), slowPolls)

	kept, err := live.Semaphore(key, 2).Acquire(ctx, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := doomed.Semaphore(key, 2).Acquire(ctx, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := background("waiter", func() (*dlock.Lease, error) {
		return waiter.Semaphore(key, 2).Acquire(ctx, dlock.WithTTL(time.Hour))
	})
	waitWaiters(t, ctx, live, key, 1)
	link.Blackhole()
	defer link.Restore()
	l := receive(t, ctx, got)
	if gone.Err() == nil {
		t.Errorf("the waiter was granted the dead holder's permit while the dead holder's lease was still valid")
	}
	if l.Token() <= gone.Token() || l.Token() <= kept.Token() {
		t.Errorf("token %d not above the earlier grants' %d, %d", l.Token(), kept.Token(), gone.Token())
	}
	info := inspect(t, ctx, live, key)
	if len(info.Holders) != 2 || info.Holders[0].Token != kept.Token() || info.Holders[1].Token != l.Token() {
		t.Errorf("holders %+v, want the live holder's and the waiter's", info.Holders)
	}
	_ = l.Unlock(ctx)
	_ = kept.Unlock(ctx)
}

// dumpKeys returns DUMP of each of the Redis keys the scripts take for key,
// its slot's record and trace included ("" when absent).
func dumpKeys(t *testing.T, ctx context.Context, admin *redis.Client, key string) []string {
	t.Helper()
	var out []string
	for _, k := range redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key) {
		// A hash's fields as a sorted list, not its DUMP: a hashtable's
		// DUMP follows its dict's order, which reads change (an
		// incremental rehash step) with no write.
		if typ, err := admin.Type(ctx, k).Result(); err != nil {
			t.Fatal(err)
		} else if typ == "hash" {
			fields, err := admin.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			var kv []string
			for f, v := range fields {
				kv = append(kv, f+"="+v)
			}
			slices.Sort(kv)
			out = append(out, k+"="+strings.Join(kv, "\x00"))
			continue
		}
		v, err := admin.Dump(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out = append(out, k+"="+v)
	}
	return out
}

// A request of another kind, or another limit, is refused with
// ErrKindMismatch naming what the key is, and leaves every key of it byte
// for byte as it was (no queue entry, nothing refreshed): while it is
// held, and while its holders have died and only waiters are left.
func TestKindMismatch_changesNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	c := newTestClient(t, ctx, srv.Addr(), nil)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	ttl := dlock.WithTTL(time.Minute)
	attempts := func(key string) map[string]func() error {
		try := func(l *dlock.Lease, err error) error {
			if err == nil {
				_ = l.Unlock(ctx)
			}
			return err
		}
		return map[string]func() error{
			"Lock":                 func() error { return try(other.Lock(ctx, key, ttl)) },
			"TryLock":              func() error { return try(other.TryLock(ctx, key, ttl)) },
			"Semaphore(2).Acquire": func() error { return try(other.Semaphore(key, 2).Acquire(ctx, ttl)) },
			"Semaphore(3).Acquire": func() error { return try(other.Semaphore(key, 3).Acquire(ctx, ttl)) },
			"Semaphore(3).TryAcquire": func() error {
				return try(other.Semaphore(key, 3).TryAcquire(ctx, ttl))
			},
			"RWMutex.RLock":    func() error { return try(other.RWMutex(key).RLock(ctx, ttl)) },
			"RWMutex.TryLock":  func() error { return try(other.RWMutex(key).TryLock(ctx, ttl)) },
			"RWMutex.Lock":     func() error { return try(other.RWMutex(key).Lock(ctx, ttl)) },
			"RWMutex.TryRLock": func() error { return try(other.RWMutex(key).TryRLock(ctx, ttl)) },
		}
	}
	check := func(key, is string, same ...string) {
		t.Helper()
		before := dumpKeys(t, ctx, admin, key)
		for name, f := range attempts(key) {
			if slices.Contains(same, name) {
				continue
			}
			err := f()
			if !errors.Is(err, dlock.ErrKindMismatch) {
				t.Errorf("%s on %s: %v, want ErrKindMismatch", name, is, err)
			}
			if after := dumpKeys(t, ctx, admin, key); !slices.Equal(before, after) {
				t.Errorf("%s on %s changed the server:\nbefore %q\nafter  %q", name, is, before, after)
			}
		}
	}

	// A held lock, with a waiter.
	l, err := c.Lock(ctx, "km-lock", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Waiters that do not poll while the key is compared: a poll refreshes
	// the waiter's place, which is a change of the server's state. The
	// release's notice grants them.
	still := &redisdlock.Options{WaiterTimeout: time.Hour, PollInterval: 30 * time.Minute}
	w := background("lock waiter", func() (*dlock.Lease, error) {
		return newTestClient(t, ctx, srv.Addr(), still).Lock(ctx, "km-lock", ttl)
	})
	waitWaiters(t, ctx, c, "km-lock", 1)
	check("km-lock", "a lock", "Lock", "TryLock")
	_ = l.Unlock(ctx)
	_ = receive(t, ctx, w).Unlock(ctx)

	// A semaphore of 2, full, with a waiter.
	s := c.Semaphore("km-sem", 2)
	p1, _ := s.Acquire(ctx, ttl)
	p2, err := s.Acquire(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	sw := background("semaphore waiter", func() (*dlock.Lease, error) {
		return newTestClient(t, ctx, srv.Addr(), still).Semaphore("km-sem", 2).Acquire(ctx, ttl)
	})
	waitWaiters(t, ctx, c, "km-sem", 1)
	check("km-sem", "a semaphore of 2", "Semaphore(2).Acquire")
	_, err = other.Semaphore("km-sem", 3).TryAcquire(ctx)
	if want := "it is a semaphore of 2 permits, not a semaphore of 3 permits"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to say %q", err, want)
	}
	_ = p1.Unlock(ctx)
	_ = p2.Unlock(ctx)
	_ = receive(t, ctx, sw).Unlock(ctx)

	// A read-write lock whose reader died, with a writer waiting that
	// cannot poll (cut off too): only the writer's queue entry is left to
	// say what the key is.
	holderLink, waiterLink := dlocktest.NewProxy(t, srv.Addr()), dlocktest.NewProxy(t, srv.Addr())
	doomed := newTestClient(t, ctx, holderLink.Addr(), nil)
	if _, err := doomed.RWMutex("km-rw").RLock(ctx, dlock.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	writer := newTestClient(t, ctx, waiterLink.Addr(), &redisdlock.Options{WaiterTimeout: time.Hour, PollInterval: 30 * time.Minute})
	ww := background("writer", func() (*dlock.Lease, error) {
		return writer.RWMutex("km-rw").Lock(ctx, ttl)
	})
	waitWaiters(t, ctx, c, "km-rw", 1)
	holderLink.Blackhole()
	waiterLink.Blackhole()
	lockKey := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, "km-rw")
	for admin.Exists(ctx, lockKey).Val() != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the dead reader's grant never expired (watchdog)")
		case <-time.After(5 * time.Millisecond):
		}
	}
	check("km-rw", "a read-write lock with only a writer waiting", "RWMutex.Lock", "RWMutex.TryLock", "RWMutex.RLock", "RWMutex.TryRLock")
	waiterLink.Restore()
	holderLink.Restore()
	// The writer's next poll is granted. (A TryRLock, being the same kind,
	// would have served the writer at once.)
	_ = receive(t, ctx, ww).Unlock(ctx)
	// Nobody holds or waits: the key may serve another kind.
	l2, err := other.Semaphore("km-rw", 5).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a key nobody holds or waits for, used as another kind: %v", err)
	}
	_ = l2.Unlock(ctx)
}

// lossyClient returns a client whose first call of the script with hash,
// once armed, has its reply lost after the server ran it; go-redis resends
// it on a new connection.
func lossyClient(t *testing.T, ctx context.Context, addr, hash string) (*dlock.Client, *lossyDialer) {
	t.Helper()
	ld := &lossyDialer{hash: []byte(hash)}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Dialer: ld.dial, MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Load the scripts: the reply lost must be the script's, not a
	// NOSCRIPT error's (which the EVAL after it would mend).
	if l, err := c.Lock(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return c, ld
}

// Lost replies on the new paths: an acquire of a permit and of a read lock
// beside another holder, whose retry must find its own grant (one holder
// record, not two); the release of a permit while another holder stays,
// whose retry must report success (the latest release is ours), not a
// false ErrNotHeld; a renewal of a read lock, whose retry extends it again.
func TestModes_lostRepliesRetried(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	ttl := dlock.WithTTL(time.Minute)

	for _, kind := range []string{"semaphore", "rwmutex"} {
		t.Run("acquire "+kind, func(t *testing.T) {
			key := "lost-acquire-" + kind
			acquire := func(c *dlock.Client, wait bool) (*dlock.Lease, error) {
				switch {
				case kind == "semaphore" && wait:
					return c.Semaphore(key, 3).Acquire(ctx, ttl)
				case kind == "semaphore":
					return c.Semaphore(key, 3).TryAcquire(ctx, ttl)
				case wait:
					return c.RWMutex(key).RLock(ctx, ttl)
				}
				return c.RWMutex(key).TryRLock(ctx, ttl)
			}
			first, err := acquire(other, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, wait := range []bool{false, true} {
				c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.AcquireScriptHashForTest())
				ld.armed.Store(true)
				l, err := acquire(c, wait)
				if err != nil {
					t.Fatalf("wait=%v: acquire after a lost reply: %v", wait, err)
				}
				if ld.hits.Load() != 1 {
					t.Fatalf("wait=%v: injected %d lost replies, want 1", wait, ld.hits.Load())
				}
				info := inspect(t, ctx, other, key)
				if len(info.Holders) != 2 || info.Holders[0].Token != first.Token() || info.Holders[1].Token != l.Token() || len(info.Waiters) != 0 {
					t.Fatalf("wait=%v: holders %+v waiters %d, want the first holder's and ours (token %d), nobody waiting", wait, info.Holders, len(info.Waiters), l.Token())
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			_ = first.Unlock(ctx)
		})
	}

	t.Run("release beside another holder", func(t *testing.T) {
		const key = "lost-release-sem"
		c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.ReleaseScriptHashForTest())
		stays, err := other.Semaphore(key, 2).Acquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Semaphore(key, 2).Acquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		ld.armed.Store(true)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of a permit whose first reply was lost: %v, want nil: nobody took its place", err)
		}
		if ld.hits.Load() != 1 {
			t.Fatalf("injected %d lost replies, want 1", ld.hits.Load())
		}
		info := inspect(t, ctx, other, key)
		if len(info.Holders) != 1 || info.Holders[0].Token != stays.Token() {
			t.Fatalf("holders %+v, want only the other one", info.Holders)
		}
		_ = stays.Unlock(ctx)
	})

	t.Run("renew of a read lock", func(t *testing.T) {
		const key = "lost-renew-rw"
		c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.RenewScriptHashForTest())
		stays, err := other.RWMutex(key).RLock(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		ld.armed.Store(true)
		l, err := c.RWMutex(key).RLock(ctx, dlock.WithTTL(900*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		before := l.Deadline()
		// The first renewal's reply is lost and resent; a later one
		// moves the deadline.
		for ld.hits.Load() == 0 || !l.Deadline().After(before) {
			select {
			case <-l.Done():
				t.Fatalf("the lease ended after a renewal's reply was lost: %v", l.Err())
			case <-ctx.Done():
				t.Fatal("no renewal after the lost reply (watchdog)")
			case <-time.After(10 * time.Millisecond):
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		_ = stays.Unlock(ctx)
	})
}
