package redisdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/v9"
)

// Under an evicting maxmemory-policy Redis may evict a held lock's hash
// under memory pressure and grant the key a second time (volatile-lru and
// allkeys-lru alike: lock keys all have an expiry, so volatile-* policies
// take them too). New and Open refuse such a server with ErrUnsafeServer,
// naming the policy and the address, and leave nothing on it;
// AllowEviction (allow_eviction=true) accepts it.
func TestOpen_refusesEvictingServer(t *testing.T) {
	srv := testserver.StartRedis(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })

	refused := func(what, policy string, err error) {
		t.Helper()
		if !errors.Is(err, redisdlock.ErrUnsafeServer) || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), srv.Addr()) {
			t.Fatalf("%s on a server with maxmemory-policy %s: err = %v, want ErrUnsafeServer naming the policy and %s", what, policy, err, srv.Addr())
		}
		// Refused before subscribing: nothing of dlock's on the server.
		if ch := admin.PubSubChannels(ctx, redisdlock.DefaultPrefix+"*").Val(); len(ch) != 0 {
			t.Fatalf("%s refused, but left subscriptions %v", what, ch)
		}
	}
	c, err := redisdlock.New(ctx, rdb, nil)
	if err == nil {
		_ = c.Close()
	}
	refused("New", "allkeys-lru", err)
	c, err = dlock.Open(ctx, srv.URL())
	if err == nil {
		_ = c.Close()
	}
	refused("Open", "allkeys-lru", err)

	// Every policy but noeviction may evict lock keys.
	for _, p := range []string{"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lfu", "allkeys-random"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
			t.Fatal(err)
		}
		c, err := redisdlock.New(ctx, rdb, nil)
		if err == nil {
			_ = c.Close()
		}
		refused("New", p, err)
	}

	// Accepting the risk knowingly.
	c, err = redisdlock.New(ctx, rdb, &redisdlock.Options{AllowEviction: true})
	if err != nil {
		t.Fatalf("New with AllowEviction: %v", err)
	}
	lockUnlock(t, ctx, c, "allowed")
	_ = c.Close()
	c, err = dlock.Open(ctx, srv.URL()+"?allow_eviction=true")
	if err != nil {
		t.Fatalf("Open with allow_eviction=true: %v", err)
	}
	lockUnlock(t, ctx, c, "allowed")
	_ = c.Close()

	// noeviction is safe, with or without maxmemory.
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	c, err = redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatalf("New on a noeviction server: %v", err)
	}
	lockUnlock(t, ctx, c, "noeviction")
	_ = c.Close()
}

// A server that will not say its policy (here an ACL denies INFO, as a
// locked-down user might) cannot be checked: New proceeds, as documented
// in docs/redis.md, rather than refuse every such deployment.
func TestOpen_proceedsWhenPolicyHidden(t *testing.T) {
	srv := testserver.StartRedis(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	ctx := testCtx(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all", "-info", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "locker", Password: "s3cret", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Info(ctx, "memory").Err(); err == nil {
		t.Fatal("the ACL lets INFO through: the test proves nothing")
	}
	c, err := redisdlock.New(ctx, rdb, nil)
	if err != nil {
		t.Fatalf("New as a user who may not run INFO: %v, want it to proceed", err)
	}
	lockUnlock(t, ctx, c, "hidden")
	_ = c.Close()
}

func lockUnlock(t *testing.T, ctx context.Context, c *dlock.Client, key string) {
	t.Helper()
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
