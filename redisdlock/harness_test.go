package redisdlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// harness gives the conformance suite clients of one real redis-server.
type harness struct {
	srv  *testserver.Redis
	opts redisdlock.Options
	ttl  time.Duration
	// admin is a plain client for fault injection and inspection.
	admin *redis.Client
}

func newHarness(t *testing.T, srv *testserver.Redis) *harness {
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	return &harness{
		srv:   srv,
		ttl:   time.Second,
		admin: admin,
		// Short queue timeouts so that the dead-waiter scenario is quick.
		opts: redisdlock.Options{WaiterTimeout: time.Second},
	}
}

func (h *harness) TTL() time.Duration { return h.ttl }

func (h *harness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	return h.clientVia(ctx, t, h.srv.Addr())
}

func (h *harness) NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
	p := dlocktest.NewProxy(t, h.srv.Addr())
	c, err := h.clientVia(ctx, t, p.Addr())
	return c, p, err
}

func (h *harness) clientVia(ctx context.Context, t *testing.T, addr string) (*dlock.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisdlock.New(ctx, rdb, &h.opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

func (h *harness) redisKeys(ctx context.Context, key string) ([]string, error) {
	var all []string
	for _, suffix := range []string{"", ":q", ":w", ":f"} {
		k := redisdlock.RedisKeyForTest(redisdlock.DefaultPrefix, key) + suffix
		n, err := h.admin.Exists(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if n > 0 {
			all = append(all, k)
		}
	}
	return all, nil
}

// DeleteKey removes the lock's hash (and queue) behind the holder's back.
func (h *harness) DeleteKey(ctx context.Context, key string) error {
	keys, err := h.redisKeys(ctx, key)
	if err != nil || len(keys) == 0 {
		return err
	}
	return h.admin.Del(ctx, keys...).Err()
}

// Leftovers lists the Redis keys still stored for key, but for the fence
// (":f"), which keeps the last token of every key ever locked for good, by
// design (docs/redis.md); withoutFence checks it is nothing more.
func (h *harness) Leftovers(ctx context.Context, key string) ([]string, error) {
	keys, err := h.redisKeys(ctx, key)
	if err != nil {
		return nil, err
	}
	return withoutFence(ctx, h.admin, keys)
}

// withoutFence drops the fence key from keys, after checking that it is
// what the fence must be: a token, with no expiry.
func withoutFence(ctx context.Context, rdb redis.Cmdable, keys []string) ([]string, error) {
	var out []string
	for _, k := range keys {
		if !strings.HasSuffix(k, "}:f") {
			out = append(out, k)
			continue
		}
		v, err := rdb.Get(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if _, perr := strconv.ParseUint(v, 10, 64); perr != nil || ttl != -1 {
			return nil, fmt.Errorf("fence %s is %q with expiry %v, want a token and no expiry", k, v, ttl)
		}
	}
	return out, nil
}

// RestartServer kills redis-server (which keeps nothing on disk) and starts
// an empty one on the same port.
func (h *harness) RestartServer(ctx context.Context, t *testing.T) error {
	h.srv.Restart()
	return nil
}

func TestConformance(t *testing.T) {
	srv := testserver.StartRedis(t)
	dlocktest.Run(t, func(ctx context.Context, t *testing.T) (dlocktest.Harness, error) {
		return newHarness(t, srv), nil
	})
}
