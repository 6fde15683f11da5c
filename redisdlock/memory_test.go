package redisdlock_test

// What stays on the server once keys are free: no key of its own per lock,
// only its slot's token record and release trace, so at most two keys per
// Redis Cluster slot whatever the number of keys ever locked; and the tokens
// and lost-reply answers those slot-wide keys must keep right.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// lockEach locks and releases each key once, with a TTL of ttl, from
// len(clients) clients at a time.
func lockEach(t *testing.T, ctx context.Context, clients []*dlock.Client, keys []string, ttl time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for w, c := range clients {
		wg.Go(func() {
			for i := w; i < len(keys); i += len(clients) {
				l, err := c.Lock(ctx, keys[i], dlock.WithTTL(ttl))
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", keys[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// slotsOf returns the Cluster slots of keys' locks.
func slotsOf(keys []string) map[int]bool {
	slots := map[int]bool{}
	for _, k := range keys {
		slots[redisdlock.HashSlotForTest(redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, k))] = true
	}
	return slots
}

// checkLeft checks the keys left on a server after keys were locked and
// freed: only slot records (tokens, no expiry) and traces (with an expiry)
// of the slots keys use, nothing named after a key. It returns their number
// (traces that expire meanwhile not counted).
func checkLeft(t *testing.T, ctx context.Context, rdb redis.Cmdable, slots map[int]bool) int {
	t.Helper()
	left := 0
	iter := rdb.Scan(ctx, 0, redisdlock.DefaultPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		slot := redisdlock.HashSlotForTest(k)
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -2*time.Nanosecond {
			continue // a trace that expired since SCAN
		}
		left++
		switch {
		case strings.HasPrefix(k, redisdlock.DefaultPrefix+"tokens:{"):
			v, err := rdb.Get(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if _, perr := strconv.ParseUint(v, 10, 64); perr != nil || ttl != -1 {
				t.Errorf("record %s is %q with expiry %v, want a token and no expiry", k, v, ttl)
			}
		case strings.HasPrefix(k, redisdlock.DefaultPrefix+"released:{"):
			if ttl < 0 {
				t.Errorf("trace %s has no expiry (%v)", k, ttl)
			}
		default:
			t.Fatalf("key %s left behind by free locks", k)
		}
		if !slots[slot] {
			t.Errorf("%s is in slot %d, which no key locked uses", k, slot)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return left
}

// 20,000 distinct keys locked and released once: the server keeps a record
// and a trace per slot used (at most 2 × 16,384 keys whatever the number of
// keys), nothing per key; and once the traces expired, at the released
// holders' deadlines, the records alone. A fence per key would grow DBSIZE
// by 20,000, for good.
func TestMemory_distinctKeysLeaveOnlySlotRecords(t *testing.T) {
	srv, ctx, admin, _ := costRig(t)
	var clients []*dlock.Client
	for range 8 {
		clients = append(clients, newTestClient(t, ctx, srv.Addr(), nil))
	}
	if err := admin.FlushAll(ctx).Err(); err != nil { // the warm-up's
		t.Fatal(err)
	}
	var keys []string
	for i := range 20_000 {
		keys = append(keys, "order-"+strconv.Itoa(i))
	}
	// A short TTL, so that the traces expire soon after.
	lockEach(t, ctx, clients, keys, time.Second)
	slots := slotsOf(keys)
	left := int64(checkLeft(t, ctx, admin, slots))
	after, err := admin.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if after > int64(2*len(slots)) || left > int64(2*len(slots)) {
		t.Errorf("DBSIZE 0 → %d after %d keys locked and released, want at most 2 per slot used (%d slots), records and traces only (%d found)",
			after, len(keys), len(slots), left)
	}
	for after > int64(len(slots)) {
		select {
		case <-ctx.Done():
			t.Fatalf("DBSIZE %d, want at most one record per slot used (%d) once the traces expire (watchdog)", after, len(slots))
		case <-time.After(50 * time.Millisecond):
		}
		after = admin.DBSize(ctx).Val()
	}
	checkLeft(t, ctx, admin, slots)
	t.Logf("DBSIZE 0 → %d after %d distinct keys (%d slots used), used_memory %s", after, len(keys), len(slots),
		infoValue(t, ctx, admin, "memory", "used_memory_human"))
}

// infoValue returns field of INFO section.
func infoValue(t *testing.T, ctx context.Context, rdb *redis.Client, section, field string) string {
	t.Helper()
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// The same on the three-master Cluster the other tests start, with fewer
// keys: each master keeps the records and traces of its slots used, the
// scripts' keys all in the lock's slot.
func TestMemory_clusterLeavesOnlySlotRecords(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	ctx := testCtx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	var clients []*dlock.Client
	for range 4 {
		c, err := redisdlock.New(ctx, cc, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	var keys []string
	for i := range 2_000 {
		keys = append(keys, "order-"+strconv.Itoa(i))
	}
	lockEach(t, ctx, clients, keys, time.Minute)
	slots := slotsOf(keys)
	var mu sync.Mutex
	var total, left int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		total += n
		left += int64(checkLeft(t, ctx, c, slots))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > int64(2*len(slots)) || total != left {
		t.Errorf("the masters hold %d keys after %d keys locked and released, want at most 2 per slot used (%d slots), only records and traces (%d found)",
			total, len(keys), len(slots), left)
	}
}

// sameSlot returns a key other than key whose lock is in the same slot.
func sameSlot(t *testing.T, key string) string {
	t.Helper()
	want := redisdlock.HashSlotForTest(redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key))
	for i := range 1_000_000 {
		k := key + "-" + strconv.Itoa(i)
		if redisdlock.HashSlotForTest(redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, k)) == want {
			return k
		}
	}
	t.Fatalf("no key of the slot of %q", key)
	return ""
}

// A release whose reply is lost, after another key of the same slot was
// granted while ours was held: the slot's record is above our token, so it
// cannot tell that nobody took our key; the trace our first attempt left
// can. Unlock returns nil. With the record alone, it returned ErrNotHeld.
func TestUnlock_lostReplyAfterOtherKeysOfTheSlot(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	other := newTestClient(t, ctx, srv.Addr(), nil)
	c, ld := lossyClient(t, ctx, srv.Addr(), redisdlock.ReleaseScriptHashForTest())
	const key = "lost-release-slot"
	neighbour := sameSlot(t, key)

	l, err := c.Lock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := other.Lock(ctx, neighbour)
	if err != nil {
		t.Fatal(err)
	}
	if ln.Token() <= l.Token() {
		t.Fatalf("the neighbour's token %d is not above ours %d: the record would not move", ln.Token(), l.Token())
	}
	if err := ln.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ld.armed.Store(true)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose first reply was lost, after another key of the slot was granted: %v, want nil", err)
	}
	if n := ld.hits.Load(); n != 1 {
		t.Fatalf("injected %d lost replies, want 1", n)
	}
}

// Two permits of a semaphore; the server's clock steps ahead past one
// holder's deadline, not the other's (which was granted first and releases
// last, freeing the key), and a third client takes a permit. The first
// holder, whose lease is still valid locally, then releases: it must not
// take the last release's trace for its own (its dead record is deleted
// before the hash becomes the trace), and since a permit was granted after
// its record died, it gets ErrNotHeld. Had the trace kept the dead record,
// it would have reported its release in time.
func TestUnlock_deadPermitNotInTrace(t *testing.T) {
	srv, clock := testserver.StartRedisSteppedClock(t)
	ctx := testCtx(t)
	long, short, third := newTestClient(t, ctx, srv.Addr(), nil), newTestClient(t, ctx, srv.Addr(), nil), newTestClient(t, ctx, srv.Addr(), nil)
	const key = "dead-permit"
	ll, err := long.Semaphore(key, 2).TryAcquire(ctx, dlock.WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := short.Semaphore(key, 2).TryAcquire(ctx, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clock.Step(time.Minute)
	if h := inspect(t, ctx, long, key).Holders; len(h) != 1 || h[0].Token != ll.Token() {
		t.Fatalf("holders after the step: %+v, want the long lease's alone", h)
	}
	if err := ll.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := third.Semaphore(key, 2).TryAcquire(ctx, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Err(); err != nil {
		t.Fatalf("the short lease ended locally before its release (%v): the release would not reach the server", err)
	}
	if err := ls.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the permit whose record died, after a permit was granted: %v, want ErrNotHeld", err)
	}
	if err := l3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A server that holds a fence of an earlier version (dlock:{K}:f, one per key
// ever locked) must not hand out a token below it: the next grant of the key
// reads it with the slot's record, takes a token above it, and deletes it,
// so the old fences drain as their keys are locked again. The fence here is
// far above the clock, as after the server's clock stepped back.
func TestToken_oldFenceReadAndDrained(t *testing.T) {
	srv, ctx, admin, _ := costRig(t)
	c := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "upgraded"
	old := redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key)[3]
	tm, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	fence := uint64(tm.UnixMicro()) + 3_600_000_000 // an hour ahead
	if err := admin.Set(ctx, old, fence, 0).Err(); err != nil {
		t.Fatal(err)
	}
	prev := fence
	for i := range 3 {
		l, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= prev {
			t.Fatalf("grant %d after an old fence of %d: token %d, not above %d", i, fence, l.Token(), prev)
		}
		prev = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(ctx, old).Val(); n != 0 {
			t.Fatalf("grant %d: the old fence %s is still there", i, old)
		}
	}
}

// A free key's grant compares the slot's record with the clock's µs as
// digits: a record with more digits than the clock's is the higher (only
// past 2^53, beyond the exact tokens of docs/redis.md: year 2255 of the
// clock), one with fewer the lower (a counter, say). The first gives a token
// from the record, the second the clock's.
func TestToken_slotRecordOfOtherLengths(t *testing.T) {
	srv, ctx, admin, _ := costRig(t)
	c := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "record-lengths"
	record := redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key)[4]
	for _, rec := range []string{"10000000000000006", "42"} {
		if err := admin.Set(ctx, record, rec, 0).Err(); err != nil {
			t.Fatal(err)
		}
		before, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(before.UnixMicro()) // the clock's
		if len(rec) > 16 {
			want = 10000000000000000 // the record's
		}
		if l.Token() < want {
			t.Errorf("slot record %s: token %d, want at least %d", rec, l.Token(), want)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Two keys of one slot. The slot's record must never go down: a hand-off of
// a key whose tokens are behind the record (its holder was granted before
// the other key's grant, and the server's clock then stepped back) writes
// its token, lower than the record's; the record keeps the higher one, and
// the other key's next grant stays above its own previous token. Writing the
// hand-off's token as it was (SET) lowered the record: the other key's next
// token then came from the stepped-back clock, ≈ 5·10⁶ lower.
func TestToken_slotRecordNeverLowered(t *testing.T) {
	srv, clock := testserver.StartRedisSteppedClock(t)
	ctx := testCtx(t)
	c := newTestClient(t, ctx, srv.Addr(), nil)
	waiter := newTestClient(t, ctx, srv.Addr(), nil)
	const key = "record-a"
	behind := sameSlot(t, key)

	lb, err := c.Lock(ctx, behind, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	la, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Step(-5 * time.Second)
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, behind, dlock.WithTTL(time.Minute))
		got <- result{l, err}
	}()
	waitWaiters(t, ctx, c, behind, 1)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() >= la.Token() {
		t.Fatalf("the hand-off's token %d is not below the other key's %d: the test proves nothing", r.l.Token(), la.Token())
	}
	la2, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if la2.Token() <= la.Token() {
		t.Errorf("after a hand-off of another key of the slot with a lower token: token %d, not above the previous %d (by %d)",
			la2.Token(), la.Token(), int64(la2.Token())-int64(la.Token()))
	}
	for _, l := range []*dlock.Lease{la2, r.l} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A held lock's hash keeps Redis's compact encoding (listpack; ziplist
// before Redis 7) with dlock's default metadata (host and pid) and a TTL
// under 1,000 s: granted on a free key, handed off to a waiter, renewed,
// and granted on the general path. A value over hash-max-listpack-value (64
// bytes) would convert it to a hashtable for good: MEMORY USAGE 352 bytes
// against 200 for the same lock.
func TestMemory_heldLockHashIsCompact(t *testing.T) {
	srv, ctx, admin, opts := costRig(t)
	const key = "compact"
	hash := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)
	compact := func(after string) {
		t.Helper()
		enc, err := admin.ObjectEncoding(ctx, hash).Result()
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		if enc != "listpack" && enc != "ziplist" {
			h := admin.HGetAll(ctx, hash).Val()
			t.Errorf("after %s: the holders hash is a %s, want listpack: %q", after, enc, h)
		}
	}
	ttl := dlock.WithTTL(999 * time.Second) // the longest with 6 digits of ms
	a, b := newTestClient(t, ctx, srv.Addr(), opts), newTestClient(t, ctx, srv.Addr(), opts)
	la, err := a.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	compact("a grant on a free key")
	got := make(chan *dlock.Lease, 1)
	go func() {
		lb, err := b.Lock(ctx, key, ttl)
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	waitWaiters(t, ctx, a, key, 1)
	compact("a waiter joined")
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	compact("a hand-off")
	var lb *dlock.Lease
	select {
	case lb = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the key (watchdog)")
	}
	if lb == nil {
		t.FailNow()
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A renewal, and a grant on the general path (the key's queue exists,
	// if only of a dead waiter), through the driver.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	d, err := redisdlock.NewDriverForTest(ctx, rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	meta := []byte(`{"host":"a-host-name-of-twenty-chars","pid":4194304}`)
	g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: key, Owner: ownerID(), TTL: 999 * time.Second, Metadata: meta, Kind: driver.KindLock, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	compact("a renewal")
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := hash + ":q"
	if err := admin.RPush(ctx, q, "gone").Err(); err != nil { // a waiter with no record: dead
		t.Fatal(err)
	}
	g, err = d.Acquire(ctx, &driver.AcquireRequest{Key: key, Owner: ownerID(), TTL: 999 * time.Second, Metadata: meta, Kind: driver.KindLock, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	compact("a grant on the general path")
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
