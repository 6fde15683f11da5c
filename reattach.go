package dlock

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/handoff"
)

// errHandedOff is the Err of a lease handed off by handoff.Detach.
var errHandedOff = errors.New("dlock: lease handed off: renewed and released by reference")

func init() {
	handoff.Detach = func(ctx context.Context, lease any) (driver.GrantRef, bool) {
		l, ok := lease.(*Lease)
		if !ok || l == nil || l.hold != nil {
			return driver.GrantRef{}, false
		}
		if _, ok := l.client.drv.(driver.Reattacher); !ok {
			return driver.GrantRef{}, false
		}
		r, ok := l.grant.(driver.Referrer)
		if !ok {
			return driver.GrantRef{}, false
		}
		data, ok := r.Ref()
		if !ok {
			return driver.GrantRef{}, false
		}
		// Not released: the grant lives on, on the server, for whoever
		// renews it by reference. Abandon stops what the grant runs in
		// the background; the server frees it by itself.
		_ = l.eng.Abandon(ctx, errHandedOff)
		l.client.forget(l)
		q := &l.req
		return driver.GrantRef{Key: q.Key, Owner: q.Owner, TTL: l.ttl, Kind: q.Kind, Limit: q.Limit, Mode: q.Mode, Token: l.token, Data: data}, true
	}
	handoff.Reattach = func(client any, ref driver.GrantRef) (driver.Grant, bool, error) {
		c, ok := client.(*Client)
		if !ok || c == nil {
			return nil, false, nil
		}
		ra, ok := c.drv.(driver.Reattacher)
		if !ok {
			return nil, false, nil
		}
		g, err := ra.Reattach(ref)
		return g, true, err
	}
}
