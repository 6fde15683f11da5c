package redisdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
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

// Observes: the scripts publish notices for election keys only, and none
// when a waiter joins or leaves without a grant (see Watch).
func (h *harness) Observes(kind dlock.Kind) (holders, waiters bool) {
	return kind == dlock.KindElection, false
}

func (h *harness) NewClient(ctx context.Context, t *testing.T) (*dlock.Client, error) {
	return h.clientVia(ctx, t, h.srv.Addr())
}

func (h *harness) NewFaultyClient(ctx context.Context, t *testing.T) (*dlock.Client, dlocktest.Link, error) {
	p := dlocktest.NewProxy(t, h.srv.Addr())
	c, err := h.clientVia(ctx, t, p.Addr())
	return c, p, err
}

func (h *harness) clientVia(ctx context.Context, t *testing.T, addr string) (*dlock.Client, error) {
	c, _, err := h.clientOn(ctx, t, addr)
	return c, err
}

// clientOn returns a Client built by New on a go-redis client of its own,
// and that client; both are closed when the test ends.
func (h *harness) clientOn(ctx context.Context, t *testing.T, addr string) (*dlock.Client, *redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisdlock.New(ctx, rdb, &h.opts)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb, nil
}

// NewOwnedClient returns a Client of New and a Ping of the go-redis client
// it was built on.
func (h *harness) NewOwnedClient(ctx context.Context, t *testing.T) (*dlock.Client, func(context.Context) error, error) {
	c, rdb, err := h.clientOn(ctx, t, h.srv.Addr())
	if err != nil {
		return nil, nil, err
	}
	return c, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, nil
}

// CloseReleases is false: Close leaves a lease in its minimum hold to
// Redis's expiry of the key, with New as with Open.
func (h *harness) CloseReleases() bool { return false }

func (h *harness) redisKeys(ctx context.Context, key string) ([]string, error) {
	var all []string
	// The key's own: its hash, queue, waiters and (from earlier versions)
	// fence. Its slot's record and trace are the slot's, not the key's.
	for _, k := range redisdlock.LockKeysForTest(redisdlock.DefaultPrefix, key)[:4] {
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

// Leftovers lists the Redis keys still stored for key: none may stay once it
// is free, not even its last token, which its slot's record keeps.
func (h *harness) Leftovers(ctx context.Context, key string) ([]string, error) {
	return h.redisKeys(ctx, key)
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
