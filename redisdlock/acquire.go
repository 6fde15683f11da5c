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
	statusLocked   = 0
	statusGranted  = 1
	statusQueued   = 2
	statusMismatch = 3 // the key is another kind; v[1] is its label
)

type acquireReply struct {
	status   int64
	token    uint64
	serverUs int64         // granted: the server's TIME in µs
	pttl     time.Duration // holder's time left; negative when unknown
	head     bool          // first in the queue
	holder   uint64        // queued: the latest grant's token (the hash's 't')
	label    string        // mismatch: the key's kind label
}

// newGrant returns the grant that req asks for, not granted yet, with
// acquire.lua's command laid out in g.cmd: a waiter sends the same one
// with every poll. Its arguments point to g's fields or are boxed once per
// process, so that neither allocates.
func (d *redisDriver) newGrant(req *driver.AcquireRequest) *grant {
	g := &grant{d: d, keys: d.lockKeys(req.Key), owner: newOwnerArg(req.Owner), ttl: req.TTL, ttlMs: ms(req.TTL), meta: req.Metadata}
	wait := noArg // a try: no waiter timeout
	if req.Wait {
		wait = d.waiterTimeoutArg
	}
	label, mode := shapeArgs(req)
	keys := g.keys[:acquireKeys]
	a := g.cmd[:3+len(keys)+7]
	a[2] = numKeys(len(keys))
	copy(a[3:], keys)
	copy(a[3+len(keys):], []any{&g.owner, &g.ttlMs, &g.meta, label, mode, wait, d.channelArg})
	if req.LockDelay > 0 {
		// "ttl+delay", as the holder's record keeps it (common.lua).
		a[4+len(keys)] = strconv.FormatInt(g.ttlMs, 10) + "+" + strconv.FormatInt(ms(req.LockDelay), 10)
	}
	g.acquireLen = len(a)
	return g
}

// acquireKeys is how many of lockKeys acquire.lua takes: all but the
// release trace, which only release.lua touches. Each key sent costs the
// server a Lua string in KEYS at every run.
const acquireKeys = 5

// The arguments of a lock's shape, boxed once per process: the lock's path
// allocates nothing for them.
var (
	lockLabelArg any = driver.KindLabel(driver.KindLock, 1)
	noArg        any = "0"
	exclusiveArg any = "x"
	sharedArg    any = "s"
)

// shapeArgs returns the kind label (which says the limit: common.lua's
// label_limit) and the mode ("x" or "s") of req, as acquire.lua takes them.
func shapeArgs(req *driver.AcquireRequest) (label, mode any) {
	mode = exclusiveArg
	if req.Mode == driver.Shared {
		mode = sharedArg
	}
	if req.Kind == driver.KindLock {
		return lockLabelArg, mode
	}
	return driver.KindLabel(req.Kind, req.Limit), mode
}

// runAcquire sends g's acquire.lua command (newGrant).
// With Options.WaitReplicas, ack is WAIT's answer to it.
func (d *redisDriver) runAcquire(ctx context.Context, g *grant) (r acquireReply, ack acked, err error) {
	cmd, ack := acquireScript.sendAcked(ctx, d, g.cmd[:g.acquireLen])
	if err := cmd.Err(); err != nil {
		return acquireReply{}, ack, err
	}
	if s, ok := cmd.Val().(string); ok {
		// Granted, with the server's clock (µs) as the token, as is usual.
		r.status = statusGranted
		if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return r, ack, fmt.Errorf("bad acquire reply %q", s)
		}
		if r.serverUs, err = parseInt(s); err != nil {
			return r, ack, fmt.Errorf("bad server time %q in acquire reply", s)
		}
		return r, ack, nil
	}
	v, err := cmd.Slice()
	if err != nil {
		return acquireReply{}, ack, err
	}
	if len(v) < 2 {
		return r, ack, fmt.Errorf("unexpected acquire reply %v", v)
	}
	r.status, _ = v[0].(int64)
	switch r.status {
	case statusGranted:
		// {1, token, now}: the token is not the server's clock.
		s, _ := v[1].(string)
		if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return r, ack, fmt.Errorf("bad acquire reply %v", v)
		}
		if len(v) < 3 {
			return r, ack, fmt.Errorf("bad acquire reply %v", v)
		}
		now, _ := v[2].(string)
		if r.serverUs, err = parseInt(now); err != nil {
			return r, ack, fmt.Errorf("bad server time %q in acquire reply", now)
		}
	case statusMismatch:
		r.label, _ = v[1].(string)
	default:
		p, _ := v[1].(int64)
		r.pttl = time.Duration(p) * time.Millisecond
		if len(v) > 3 {
			h, _ := v[2].(int64)
			r.head = h == 1
			s, _ := v[3].(string)
			r.holder, _ = strconv.ParseUint(s, 10, 64)
		}
	}
	return r, ack, nil
}

// Acquire implements driver.Driver.
//
// Every request carries req.Owner, and acquire.lua recognises a lock that is
// already the owner's, so retrying after a lost reply (go-redis retries by
// itself on network errors) never blocks the caller on its own grant.
func (d *redisDriver) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	g := d.newGrant(req)
	// The waiter registers once a reply queues it (a free key needs none);
	// the notifier keeps a notice that comes before.
	var w waiter
	resubs := d.notify.resubscriptions()

	// notBefore is the send time of the latest request after which the
	// server had not yet granted us the key: a grant delivered by a notice
	// happened after it, so it is a safe ValidFrom for that grant — provided
	// the notice is not older than that request. staleUpTo tells: it is the
	// latest grant's token that request found (the hash's 't'; with
	// several holders, the newest one's). Tokens increase with every grant,
	// so a notice announces a grant made after that request if and only if
	// its token is above it; one with a token up to it announces a grant
	// made before, which we have lost since (we were paused, say, while it
	// expired and passed on), since the request found us still waiting.
	// (Clock readings are few: time.Now costs up to a µs on some VMs.)
	sent := time.Now() // of the latest request
	notBefore := sent
	var staleUpTo uint64
	queued := false
	for polls := 0; ; polls++ {
		if polls > 0 {
			sent = time.Now()
		}
		r, ack, err := d.runAcquire(ctx, g)
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
			if err := d.ackErr(ack, "grant"); err != nil {
				// Never return a grant that a failover may lose.
				_ = d.abandon(ctx, g)
				return nil, err
			}
			g.token, g.validFrom = r.token, sent
			// Only a later reading's received is ever used (clockReading.ahead).
			g.clock = clockReading{sent: sent, received: sent, serverUs: r.serverUs}
			return g, nil
		case r.status == statusMismatch:
			// Nothing was written: no entry to remove. (A waiter whose
			// queue entry expired while another kind took the key ends
			// here too.)
			return nil, driver.KindMismatch(r.label, req.Kind, req.Limit)
		case r.status == statusLocked:
			if r.pttl < 0 {
				return nil, driver.ErrLocked
			}
			return nil, fmt.Errorf("%w: expires in %v unless renewed", driver.ErrLocked, r.pttl)
		default:
			queued = true
			notBefore = sent
			staleUpTo = max(staleUpTo, r.holder)
			if w == nil {
				w = d.notify.register(g.owner, resubs)
				defer d.notify.unregister(g.owner)
			}
		}

		// Wait for the grant notice, polling now and then: at least every
		// TTL/3, so that notBefore stays recent. The first in line also
		// polls at the earliest deadline among the holders (all of which
		// block it), which is how a crashed holder's place reaches the
		// queue.
		next := min(d.opts.PollInterval, req.TTL/3)
		if r.head && r.pttl >= 0 && r.pttl+time.Millisecond < next {
			next = r.pttl + time.Millisecond
		}
		token, err := waitTurn(ctx, w, next, staleUpTo)
		if err != nil {
			return nil, d.abandon(ctx, g)
		}
		// A notice is trusted only while most of the validity counted from
		// notBefore remains; otherwise (we were slow to get here) poll,
		// which extends the grant from now if it is still ours.
		// With WaitReplicas the grant must be acknowledged: the poll,
		// which finds it ours and writes, is followed by WAIT.
		if token != pollNow && !d.waits() && time.Since(notBefore) < req.TTL/3 {
			g.token, g.validFrom = token, notBefore
			// The token is at least the server's clock (µs) at the
			// hand-off, which came after notBefore: a reading of the
			// server's clock, perhaps high, which can only make
			// clockReading.ahead report less.
			g.clock = clockReading{sent: notBefore, received: notBefore, serverUs: int64(token)}
			return g, nil
		}
	}
}

// waitTurn waits up to d for a hand-off notice, returning its token, or pollNow
// when it is time to poll (the timer ran out, or the subscription was
// re-established and notices may have been lost). Notices with a token up to
// staleUpTo are dropped: they announce grants the caller has lost since. It
// returns ctx's error when ctx ends.
func waitTurn(ctx context.Context, w waiter, d time.Duration, staleUpTo uint64) (uint64, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case token := <-w:
			if token == pollNow || token > staleUpTo {
				return token, nil
			}
		case <-timer.C:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// abandon removes every trace of an attempt that will not be returned to the
// caller: its queue entry and, if the key was granted meanwhile, the grant
// (handing it to the next waiter). It returns ctx's error, or nil.
func (d *redisDriver) abandon(ctx context.Context, g *grant) error {
	// ctx may be over; cleaning up must not be, but it must not hang either.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.WaiterTimeout)
	defer cancel()
	g.token = 0 // not granted: no grant has token 0
	_ = releaseScript.send(cctx, d, g.releaseCmd()).Err()
	// If that failed too, the queue entry expires after WaiterTimeout and a
	// grant after its TTL.
	return ctx.Err()
}
