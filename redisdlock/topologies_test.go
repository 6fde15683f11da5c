package redisdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// urlHarness opens every client from one URL, as an application would.
type urlHarness struct {
	url   string
	admin redis.UniversalClient
}

func (h *urlHarness) TTL() time.Duration { return time.Second }

func (h *urlHarness) Observes(kind dlock.Kind) (holders, waiters bool) {
	return (&harness{}).Observes(kind)
}

func (h *urlHarness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	c, err := dlock.Open(ctx, h.url)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

func (h *urlHarness) Leftovers(ctx context.Context, key string) ([]string, error) {
	var left []string
	for _, k := range redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key)[:4] {
		n, err := h.admin.Exists(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if n > 0 {
			left = append(left, k)
		}
	}
	return left, nil
}

// The same suite passes on a three-master Redis Cluster: every key of a lock
// shares a hash slot, so every script runs on one node.
func TestConformance_cluster(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer admin.Close()
	h := &urlHarness{url: "redis+cluster://" + strings.Join(addrs, ","), admin: admin}
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) { return h, nil })
}

// On a Cluster, New and Open ask every master for its maxmemory-policy: one
// that may evict is enough to refuse.
func TestOpen_refusesEvictingClusterMaster(t *testing.T) {
	addrs := testserver.StartRedisCluster(t, 3)
	ctx := testCtx(t)
	bad := redis.NewClient(&redis.Options{Addr: addrs[2]})
	defer bad.Close()
	if err := bad.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := dlock.Open(ctx, "redis+cluster://"+strings.Join(addrs, ","))
	if err == nil {
		_ = c.Close()
	}
	if !errors.Is(err, redisdlock.ErrUnsafeServer) || !strings.Contains(err.Error(), addrs[2]) {
		t.Fatalf("Open of a cluster with one volatile-lru master: err = %v, want ErrUnsafeServer naming %s", err, addrs[2])
	}
	c, err = dlock.Open(ctx, "redis+cluster://"+strings.Join(addrs, ",")+"?allow_eviction=true")
	if err != nil {
		t.Fatalf("Open with allow_eviction=true: %v", err)
	}
	_ = c.Close()
}

// And through Sentinel, which tells the client where the master is.
func TestConformance_sentinel(t *testing.T) {
	master, sentinel := testserver.StartRedisSentinel(t)
	admin := redis.NewClient(&redis.Options{Addr: master})
	defer admin.Close()
	h := &urlHarness{url: "redis+sentinel://" + sentinel + "/mymaster/0", admin: admin}
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) { return h, nil })
}
