package redisdlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// urlHarness opens every client from one URL, as an application would.
type urlHarness struct {
	url   string
	admin redis.UniversalClient
}

func (h *urlHarness) TTL() time.Duration { return time.Second }

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
	base := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key)
	for _, k := range []string{base, base + ":q", base + ":w", base + ":f"} {
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

// And through Sentinel, which tells the client where the master is.
func TestConformance_sentinel(t *testing.T) {
	master, sentinel := testserver.StartRedisSentinel(t)
	admin := redis.NewClient(&redis.Options{Addr: master})
	defer admin.Close()
	h := &urlHarness{url: "redis+sentinel://" + sentinel + "/mymaster/0", admin: admin}
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) { return h, nil })
}
