package redisdlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/testing/leasewait"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

func ownerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// acquireN takes n locks through d (keys prefix-0 …), and two permits of
// one semaphore (the same Redis key twice in a batch), all with ttl.
func acquireN(t *testing.T, ctx context.Context, d driver.Driver, prefix string, n int, ttl time.Duration) ([]driver.Grant, []string) {
	t.Helper()
	var grants []driver.Grant
	var keys []string
	take := func(key string, kind driver.Kind, limit int, mode driver.Mode) {
		g, err := d.Acquire(ctx, &driver.AcquireRequest{Key: key, Owner: ownerID(), TTL: ttl, Metadata: []byte("{}"), Kind: kind, Limit: limit, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		grants, keys = append(grants, g), append(keys, key)
	}
	for i := range n {
		take(fmt.Sprintf("%s-%d", prefix, i), driver.KindLock, 1, driver.Exclusive)
	}
	take(prefix+"-sem", driver.KindSemaphore, 3, driver.Shared)
	take(prefix+"-sem", driver.KindSemaphore, 3, driver.Shared)
	return grants, keys
}

// RenewBatch renews a client's leases with one script run per
// renewBatchMax (256) of them, all in one pipeline, and judges each on its
// own: the leases whose keys are gone fail with ErrNotHeld, every other one
// is extended.
func TestRenewBatch_oneRequestEachResultOnItsOwn(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	d, err := redisdlock.NewDriverForTest(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	const ttl = time.Minute
	grants, keys := acquireN(t, ctx, d, "batch", 300, ttl)
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err) // the first batch loads the script
	}
	if errs := d.RenewBatch(ctx, grants[290:]); errs != nil {
		t.Fatalf("every lease held: %v", errs)
	}
	gone := map[int]bool{5: true, 299: true}
	for i, key := range keys {
		k := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)
		if gone[i] {
			if err := admin.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		} else if err := admin.PExpire(ctx, k, time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}

	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	errs := d.RenewBatch(ctx, grants)
	stats := commandStats(t, ctx, admin)
	if got := stats["evalsha"] + stats["eval"]; got != 2 {
		t.Errorf("%d script runs for %d leases, want 2 (256 a run)", got, len(grants))
	}
	if len(errs) != len(grants) {
		t.Fatalf("%d results for %d grants (two keys gone)", len(errs), len(grants))
	}
	for i, err := range errs {
		switch {
		case gone[i] && !errors.Is(err, driver.ErrNotHeld):
			t.Errorf("grant %d, key deleted: %v, want ErrNotHeld", i, err)
		case !gone[i] && err != nil:
			t.Errorf("grant %d: %v, want renewed", i, err)
		case !gone[i]:
			k := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, keys[i])
			if pttl := admin.PTTL(ctx, k).Val(); pttl < ttl/2 {
				t.Errorf("grant %d: the key expires in %v after the renewal, want about %v", i, pttl, ttl)
			}
		}
	}

	// All held: nil, as the interface says.
	live := append(grants[:5:5], grants[6:299]...)
	live = append(live, grants[300:]...)
	if errs := d.RenewBatch(ctx, live); errs != nil {
		t.Errorf("every lease held: %v, want nil", errs)
	}
}

// On a Cluster a script touches one slot: RenewBatch sends one run per slot
// held (go-redis pipelines them per node), and each lease's result is its
// own there too.
func TestRenewBatch_cluster(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	ctx := testCtx(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	d, err := redisdlock.NewDriverForTest(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	grants, keys := acquireN(t, ctx, d, "cbatch", 40, time.Minute)
	slots := map[int64]bool{}
	for _, key := range keys {
		slots[rdb.ClusterKeySlot(ctx, redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)).Val()] = true
	}
	reset := func() {
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ConfigResetStat(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
	}
	runs := func() int {
		n := 0
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			s := commandStats(t, ctx, c)
			n += s["evalsha"] + s["eval"]
			_ = c.Close()
		}
		return n
	}
	// The first batch loads the script on every node (a NOSCRIPT refusal,
	// then EVAL); the second is counted.
	for range 2 {
		reset()
		if errs := d.RenewBatch(ctx, grants); errs != nil {
			t.Fatalf("every lease held: %v", errs)
		}
	}
	if got := runs(); got != len(slots) {
		t.Errorf("%d script runs for %d leases in %d slots, want one per slot", got, len(grants), len(slots))
	}
	if err := rdb.Del(ctx, redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, keys[3])).Err(); err != nil {
		t.Fatal(err)
	}
	errs := d.RenewBatch(ctx, grants)
	for i, err := range errs {
		if (i == 3) != errors.Is(err, driver.ErrNotHeld) || (i != 3 && err != nil) {
			t.Errorf("grant %d: %v (only grant 3's key is gone)", i, err)
		}
	}
	if len(errs) != len(grants) {
		t.Errorf("%d results for %d grants, one gone", len(errs), len(grants))
	}
}

// renewCounter counts the runs of renew.lua a go-redis client sends.
type renewCounter struct{ runs atomic.Int64 }

func (h *renewCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *renewCounter) count(cmd redis.Cmder) {
	if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == redisdlock.RenewScriptHashForTest() {
		h.runs.Add(1)
	}
}

func (h *renewCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *renewCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// A Client holding 1,000 locks renews them together: while every lease is
// renewed twice, its client sends a few runs of renew.lua (4 per tick of
// its leases' group), not 2,000 requests (as it did before RenewBatch).
func TestClient_heldLocksRenewedInBatches(t *testing.T) {
	const n, ttl = 1000, 1500 * time.Millisecond
	srv := testserver.StartRedis(t)
	ctx := testCtx(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &renewCounter{}
	rdb.AddHook(h)
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		if leases[i], err = c.Lock(ctx, fmt.Sprintf("held-%d", i), dlock.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	before := h.runs.Load()
	for round := range 2 {
		deadlines := make([]time.Time, n)
		for i, l := range leases {
			deadlines[i] = l.Deadline()
		}
		for i, l := range leases {
			if err := leasewait.RenewedPast(ctx, l, deadlines[i]); err != nil {
				t.Fatalf("round %d: lease %d: %v", round, i, err)
			}
		}
	}
	// Two renewals of every lease take two ticks of the group or three (a
	// batch may be in flight when a round starts), of 4 runs each.
	runs := h.runs.Load() - before
	t.Logf("%d runs of renew.lua for two renewals of %d leases", runs, n)
	if runs > 12 {
		t.Errorf("%d runs of renew.lua while %d leases were each renewed twice, want at most 12", runs, n)
	}
	for _, l := range leases {
		_ = l.Unlock(ctx)
	}
}
