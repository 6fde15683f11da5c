package redisdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// The fence's slot check computes what the server computes, hash tags
// included (the first '{' and the first '}' after it; an empty tag counts
// for nothing).
func TestHashSlot_matchesServer(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 1)
	ctx := testCtx(t)
	rdb := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer rdb.Close()
	for _, k := range []string{"", "a", "orders:42", "{orders}:42", "dlock:fence:{orders}", "x{orders}y",
		"{}", "{}orders", "a{}b{c}", "{a}{b}", "{{a}}", "a{b", "a}b{c}", "é{ü}", "\x00\xff"} {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisdlock.HashSlotForTest(k); int64(got) != want {
			t.Errorf("slot of %q = %d, server says %d", k, got, want)
		}
	}
}

// clusterKeys counts the keys on every master.
func clusterKeys(t *testing.T, ctx context.Context, cc *redis.ClusterClient) int64 {
	t.Helper()
	var n atomic.Int64 // ForEachMaster asks the masters concurrently
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k, err := c.DBSize(ctx).Result()
		n.Add(k)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n.Load()
}

// scripterOnly hides a ClusterClient's type, as a user's wrapper would: the
// fence cannot check slots before sending, and the server's CROSSSLOT is
// explained instead.
type scripterOnly struct{ redis.Scripter }

// On a three-master Cluster: keys in the record's slot are fenced as on one
// server; a key in another slot is refused with ErrCrossSlot naming the key,
// the slots and the hash tag to use, and nothing is written — checked by
// the client, or by the server for a client the fence cannot see through.
func TestFence_cluster(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	ctx := testCtx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()

	orders := redisdlock.NewFence(cc, "{orders}")
	if err := orders.Set(ctx, 5, "{orders}:42", "closed", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Del(ctx, 5, "{orders}:41", "{orders}:40"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, orders.Set(ctx, 4, "{orders}:42", "open", 0), "{orders}", 4, 5)
	if got := get(t, ctx, cc, "{orders}:42"); got != "closed" {
		t.Fatalf("data %q, want closed", got)
	}
	before := clusterKeys(t, ctx, cc) // the record and {orders}:42
	rec := get(t, ctx, cc, orders.Key())

	for _, c := range []struct {
		name string
		f    *redisdlock.Fence
		keys []string
		hint string
	}{
		{"other slot", orders, []string{"orders:43"}, `put the fence's hash tag {orders} first in the key, e.g. "{orders}:43"`},
		{"second key", orders, []string{"{orders}:44", "orders:43"}, `"orders:43"`},
		{"untagged fence", redisdlock.NewFence(cc, "jobs"), []string{"jobs:1"}, `NewFence(rdb, "{jobs}") with keys such as "{jobs}:1"`},
		{"hidden cluster", redisdlock.NewFence(scripterOnly{cc}, "{orders}"), []string{"orders:43"}, `{orders}`},
	} {
		_, err := c.f.Del(ctx, 6, c.keys...)
		t.Logf("%s: %v", c.name, err)
		if !errors.Is(err, redisdlock.ErrCrossSlot) || !strings.Contains(err.Error(), c.hint) ||
			!strings.Contains(err.Error(), "hash slot") {
			t.Errorf("%s: err = %v, want ErrCrossSlot with %s", c.name, err, c.hint)
		}
		if n := clusterKeys(t, ctx, cc); n != before {
			t.Errorf("%s: %d keys after the refusal, want %d", c.name, n, before)
		}
		if got := get(t, ctx, cc, orders.Key()); got != rec || recordToken(t, ctx, cc, orders) != "5" {
			t.Errorf("%s: record %s, want %s (token 5)", c.name, got, rec)
		}
	}

	// The hidden cluster in its slot works too.
	if err := redisdlock.NewFence(scripterOnly{cc}, "{orders}").Set(ctx, 6, "{orders}:42", "archived", 0); err != nil {
		t.Fatal(err)
	}
}
