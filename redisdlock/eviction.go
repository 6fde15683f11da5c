package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// checkEviction returns an error satisfying errors.Is(err, ErrUnsafeServer)
// when a server rdb talks to runs a maxmemory-policy that may evict keys.
// Every policy but noeviction may: the volatile-* policies evict keys that
// have an expiry, and every lock key has one. On a Cluster it asks every
// master; through Sentinel, the master.
//
// It reads INFO memory rather than CONFIG GET: managed services (ElastiCache,
// Memorystore, Azure Cache) and locked-down ACLs deny CONFIG, but nearly all
// answer INFO. A server that will not tell (INFO denied, or a Redis-like
// server without the field) cannot be checked, and is accepted: refusing
// would refuse every such deployment, while the documentation says which
// policy is required (docs/redis.md). Only an error on the way to the
// server (it is unreachable) fails the check.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, addr string) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return checkNodeEviction(ctx, c, c.Options().Addr)
		})
	}
	return checkNodeEviction(ctx, rdb, addr)
}

func checkNodeEviction(ctx context.Context, c redis.Cmdable, addr string) error {
	info, err := c.Info(ctx, "memory").Result()
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		return nil // the server declined (NOPERM, unknown command): cannot tell
	case err != nil:
		return wrapErr(fmt.Sprintf("redis at %s: INFO memory", addr), err)
	}
	policy, maxmemory := infoField(info, "maxmemory_policy"), infoField(info, "maxmemory_human")
	if policy == "" || policy == "noeviction" {
		return nil
	}
	return fmt.Errorf("%w: redis at %s: maxmemory-policy is %s (maxmemory %s): under memory pressure the server may evict a held lock's key and grant it to a second owner; "+
		"set maxmemory-policy noeviction, or set AllowEviction in redisdlock.Options (URL: allow_eviction=true) to accept that risk",
		ErrUnsafeServer, addr, policy, maxmemory)
}

// infoField returns the value of name in an INFO reply, or "".
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
