package redisdlock

import (
	"context"
	"fmt"
	"time"
)

// grant is a lock held on Redis. It implements driver.Grant.
type grant struct {
	d         *redisDriver
	keys      []any // lockKeys
	owner     any   // the owner id (a string), boxed once
	ttl       time.Duration
	token     uint64
	validFrom time.Time
}

func (g *grant) Token() uint64           { return g.token }
func (g *grant) ValidFrom() time.Time    { return g.validFrom }
func (g *grant) Validity() time.Duration { return g.ttl }

// Lost returns nil: Redis cannot tell us, and renewals find out soon enough.
func (g *grant) Lost() <-chan error { return nil }

// Renew extends the lease if the key is still ours (renew.lua). Extending
// counts from when the server runs the script, which is after this call
// started, as the lease engine assumes.
func (g *grant) Renew(ctx context.Context) error {
	n, err := renewScript.run(ctx, g.d.rdb, g.keys, g.owner, ms(g.ttl)).Int()
	if err != nil {
		return wrapErr(fmt.Sprintf("redis at %s: renew", g.d.addr), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the key expired or passed to another owner", errNotHeld)
	}
	return nil
}

// Release gives the key up and hands it to the next waiter (release.lua).
func (g *grant) Release(ctx context.Context) error {
	n, err := releaseScript.run(ctx, g.d.rdb, g.keys, g.owner).Int()
	if err != nil {
		return wrapErr(fmt.Sprintf("redis at %s: release", g.d.addr), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the key expired or passed to another owner before the release", errNotHeld)
	}
	return nil
}
