package redisdlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// Replies of acquire.lua.
const (
	statusLocked  = 0
	statusGranted = 1
	statusQueued  = 2
)

type acquireReply struct {
	status int64
	token  uint64
	pttl   time.Duration // holder's time left; negative when unknown
	head   bool          // first in the queue
}

func (d *redisDriver) runAcquire(ctx context.Context, keys []string, req *driver.AcquireRequest) (acquireReply, error) {
	wait := "0"
	if req.Wait {
		wait = "1"
	}
	v, err := acquireScript.Run(ctx, d.rdb, keys,
		req.Owner, ms(req.TTL), req.Metadata, wait, ms(d.opts.WaiterTimeout), d.notify.channel).Slice()
	if err != nil {
		return acquireReply{}, err
	}
	var r acquireReply
	if len(v) < 2 {
		return r, fmt.Errorf("redisdlock: unexpected acquire reply %v", v)
	}
	r.status, _ = v[0].(int64)
	switch r.status {
	case statusGranted:
		s, _ := v[1].(string)
		if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return r, fmt.Errorf("redisdlock: bad token %q in acquire reply", s)
		}
	default:
		p, _ := v[1].(int64)
		r.pttl = time.Duration(p) * time.Millisecond
		if len(v) > 2 {
			h, _ := v[2].(int64)
			r.head = h == 1
		}
	}
	return r, nil
}

// Acquire implements driver.Driver.
//
// Every request carries req.Owner, and acquire.lua recognises a lock that is
// already the owner's, so retrying after a lost reply (go-redis retries by
// itself on network errors) never blocks the caller on its own grant.
func (d *redisDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	keys := d.lockKeys(req.Key)
	var w *waiter
	if req.Wait {
		// Register before the first request: the notice may beat its reply.
		w = d.notify.register(req.Owner)
		defer d.notify.unregister(req.Owner)
	}
	g := &grant{d: d, keys: keys, owner: req.Owner, ttl: req.TTL}

	// notBefore is the send time of the latest request after which the
	// server had not yet granted us the key: a grant delivered by a notice
	// happened after it, so it is a safe ValidFrom for that grant.
	notBefore := time.Now()
	queued := false
	for {
		sent := time.Now()
		r, err := d.runAcquire(ctx, keys, req)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, d.abandon(ctx, g)
		case err != nil && !queued:
			// The request may have reached the server: clean up anything it
			// left (a grant, a queue entry) before reporting.
			_ = d.abandon(ctx, g)
			return nil, wrapErr(fmt.Sprintf("redis at %s", d.addr), err)
		case err != nil:
			// Already queued: keep our place by polling again. The queue
			// entry outlives a few failed polls (WaiterTimeout).
			r.status = statusQueued
			r.pttl = -1
		case r.status == statusGranted:
			g.token, g.validFrom = r.token, sent
			return g, nil
		case r.status == statusLocked:
			return nil, fmt.Errorf("%w: key %q is held by another owner (expires in %v unless renewed)", driver.ErrLocked, req.Key, r.pttl)
		default:
			queued = true
			notBefore = sent
		}

		// Wait for the hand-off notice, polling now and then. The first in
		// line also polls when the holder's lease would run out, which is
		// how a crashed holder's key reaches the queue.
		next := d.opts.PollInterval
		if r.head && r.pttl >= 0 && r.pttl+time.Millisecond < next {
			next = r.pttl + time.Millisecond
		}
		timer := time.NewTimer(next)
		select {
		case token := <-w.granted:
			timer.Stop()
			g.token, g.validFrom = token, notBefore
			return g, nil
		case <-w.poke:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, d.abandon(ctx, g)
		}
		timer.Stop()
	}
}

// abandon removes every trace of an attempt that will not be returned to the
// caller: its queue entry and, if the key was granted meanwhile, the grant
// (handing it to the next waiter). It returns ctx's error, or nil.
func (d *redisDriver) abandon(ctx context.Context, g *grant) error {
	// ctx may be over; cleaning up must not be, but it must not hang either.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.WaiterTimeout)
	defer cancel()
	_ = releaseScript.Run(cctx, d.rdb, g.keys, g.owner).Err()
	// If that failed too, the queue entry expires after WaiterTimeout and a
	// grant after its TTL.
	return ctx.Err()
}
