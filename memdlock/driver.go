package memdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// conn is one client's driver: its view of a space.
type conn struct {
	s      *space
	frozen atomic.Bool
	closed atomic.Bool
	// back is closed when the client, cut off by Handle.Disconnect, is
	// reconnected; nil while connected. Guarded by s.mu.
	back chan struct{}
	// renewals counts Renew and RenewBatch calls, for
	// Handle.RenewRequests.
	renewals atomic.Int64
}

var (
	_ driver.Driver       = (*conn)(nil)
	_ driver.Inspector    = (*conn)(nil)
	_ driver.Observer     = (*conn)(nil)
	_ driver.BatchRenewer = (*conn)(nil)
	_ driver.Revoker      = (*conn)(nil)
	_ driver.Publisher    = (*grant)(nil)
	_ driver.Abandoner    = (*grant)(nil)
)

// errCutOff is what a call of a client cut off by Handle.Disconnect meets
// when its ctx ends first.
var errCutOff = errors.New("memdlock: client cut off by Handle.Disconnect")

// reach waits until the client is connected, as a request waits for a
// network that is down, and reports false if ctx ends first.
func (c *conn) reach(ctx context.Context) bool {
	c.s.mu.Lock()
	back := c.back
	c.s.mu.Unlock()
	if back == nil {
		return true
	}
	select {
	case <-back:
		return true
	case <-ctx.Done():
		return false
	}
}

// call is reach for the calls that return an error: an unreachable space
// is driver.ErrUnavailable.
func (c *conn) call(ctx context.Context) error {
	if !c.reach(ctx) {
		return fmt.Errorf("%w: %w: %w", driver.ErrUnavailable, errCutOff, context.Cause(ctx))
	}
	return nil
}

// Acquire queues an entry for req.Key and waits for the planner's grant.
func (c *conn) Acquire(ctx context.Context, req *driver.AcquireRequest) (driver.Grant, error) {
	s := c.s
	for {
		// The request reaches the space once the client is connected.
		if !c.reach(ctx) {
			return nil, ctx.Err()
		}
		s.mu.Lock()
		e, err := s.join(c, req)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-e.ready:
			// The reply reaches a client cut off meanwhile once it is back.
			if c.reach(ctx) {
				return &grant{c: c, k: e.k, e: e}, nil
			}
		case <-e.expired:
			// Cut off while waiting, the client was forgotten: back, it
			// queues again.
			if ctx.Err() == nil {
				continue
			}
		case <-ctx.Done():
		}
		return nil, c.giveUp(e, ctx.Err())
	}
}

// join queues a new entry of c for req, granted if the planner says so,
// or returns ErrLocked (req.Wait false) or a kind mismatch. s.mu is held.
func (s *space) join(c *conn, req *driver.AcquireRequest) (*entry, error) {
	label := driver.KindLabel(req.Kind, req.Limit)
	k := s.keys[req.Key]
	if k == nil {
		k = &keyState{key: req.Key, label: label, kind: req.Kind, limit: req.Limit}
		s.keys[req.Key] = k
	} else if k.label != label {
		return nil, driver.KindMismatch(k.label, req.Kind, req.Limit)
	}
	e := &entry{
		c: c, k: k, owner: req.Owner, mode: req.Mode, metadata: req.Metadata, ttl: req.TTL, delay: req.LockDelay,
		since: s.now(), ready: make(chan struct{}), expired: make(chan struct{}), lost: make(chan error, 1),
	}
	k.q = append(k.q, e)
	s.plan(k, e)
	if !e.granted && !req.Wait {
		holders := 0
		for _, h := range k.q {
			if h.granted {
				holders++
			}
		}
		waiters := len(k.q) - holders - 1
		s.remove(k, e, false)
		return nil, fmt.Errorf("%w: %d holding, %d waiting", driver.ErrLocked, holders, waiters)
	}
	if !e.granted {
		e.queued = true
		s.changed(k.key) // a waiter joined (a grant has told the watchers already)
	}
	if c.back != nil {
		s.armWaiter(e) // cut off right after its request
	}
	return e, nil
}

// giveUp ends an Acquire whose ctx ended, and returns err. A connected
// client takes its entry out of the queue, even if granted meanwhile; one
// cut off cannot, and leaves it to expire.
func (c *conn) giveUp(e *entry, err error) error {
	s := c.s
	s.mu.Lock()
	if c.back != nil {
		// A waiter's expiry runs since the cut; Reconnect leaves it.
		e.abandoned = true
		s.mu.Unlock()
		return err
	}
	if e.ended {
		// Revoked or expired meanwhile: its lock-delay keeps it until
		// the delay's end, whoever gave up.
		s.mu.Unlock()
		return err
	}
	free := s.remove(e.k, e, e.granted)
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
	return err
}

// Close leaves the space; dlock has released or abandoned the grants.
func (c *conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.s.leave()
	return nil
}

// Inspect returns the state of one key.
func (c *conn) Inspect(ctx context.Context, key string) (*driver.LockInfo, error) {
	if err := c.call(ctx); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.info(key), nil
}

// List returns the keys that start with prefix, sorted.
func (c *conn) List(ctx context.Context, prefix string) ([]*driver.LockInfo, error) {
	if err := c.call(ctx); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.list(prefix), nil
}

// Watch reports every change of key's holders, their metadata and its
// waiters.
func (c *conn) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := c.call(ctx); err != nil {
		return nil, err
	}
	s := c.s
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	s.mu.Lock()
	if s.watchers[key] == nil {
		s.watchers[key] = map[chan struct{}]*conn{}
	}
	s.watchers[key][ch] = c
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watchers[key], ch)
		if len(s.watchers[key]) == 0 {
			delete(s.watchers, key)
		}
		close(ch)
	})
	return ch, nil
}

// grant is a held entry.
type grant struct {
	c *conn
	k *keyState
	e *entry
}

func (g *grant) Token() uint64           { return g.e.token }
func (g *grant) ValidFrom() time.Time    { return g.e.at }
func (g *grant) Validity() time.Duration { return g.e.ttl }
func (g *grant) Lost() <-chan error      { return g.e.lost }

// AfterLost has f called, instead of a send on Lost, when the grant is
// dropped; at once if it has been.
func (g *grant) AfterLost(f func(error)) {
	s := g.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case reason := <-g.e.lost:
		go f(reason)
	default:
		g.e.onLost = f
	}
}

// errFrozen is what a renewal of a frozen client meets.
var errFrozen = errors.New("memdlock: renewals frozen by Handle.Freeze")

// Renew extends the grant by its TTL from now, unless the client is frozen
// or cut off.
func (g *grant) Renew(ctx context.Context) error {
	g.c.renewals.Add(1)
	if g.c.frozen.Load() {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, errFrozen)
	}
	return g.whileHeld(ctx, g.extend)
}

// RenewBatch renews grants in one visit to the space, as one request to a
// server would: all fail together when the client is frozen or cut off,
// and each grant that is gone fails alone.
func (c *conn) RenewBatch(ctx context.Context, grants []driver.Grant) []error {
	c.renewals.Add(1)
	fail := func(err error) []error {
		errs := make([]error, len(grants))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if c.frozen.Load() {
		return fail(fmt.Errorf("%w: %w", driver.ErrUnavailable, errFrozen))
	}
	if err := c.call(ctx); err != nil {
		return fail(err)
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i, dg := range grants {
		g := dg.(*grant)
		if g.e.gone || g.e.ended {
			if errs == nil {
				errs = make([]error, len(grants))
			}
			errs[i] = fmt.Errorf("%w: the grant is gone", driver.ErrNotHeld)
			continue
		}
		g.extend(s)
	}
	return errs
}

// extend moves the grant's expiry to its TTL from now. s.mu is held.
func (g *grant) extend(s *space) {
	g.e.expires = s.now().Add(g.e.ttl)
	g.e.stop()
	g.e.stop = s.afterFunc(g.e.ttl, func() { s.expire(g.k, g.e) })
}

// Release gives the key up and serves the waiters it makes grantable.
func (g *grant) Release(ctx context.Context) error {
	free := false
	err := g.whileHeld(ctx, func(s *space) { free = s.remove(g.k, g.e, true) })
	if free {
		g.c.s.forgetIfUnused()
	}
	return err
}

// Publish replaces the grant's metadata while it is held.
func (g *grant) Publish(ctx context.Context, metadata []byte) error {
	return g.whileHeld(ctx, func(s *space) {
		g.e.metadata = metadata
		s.changed(g.k.key)
	})
}

// whileHeld runs fn with s.mu held once the space is reached, if the grant
// is still there; otherwise it returns the call's error or ErrNotHeld.
func (g *grant) whileHeld(ctx context.Context, fn func(s *space)) error {
	if err := g.c.call(ctx); err != nil {
		return err
	}
	s := g.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.e.gone || g.e.ended {
		return fmt.Errorf("%w: the grant is gone", driver.ErrNotHeld)
	}
	fn(s)
	return nil
}

// Abandon leaves the grant to expire: on a fake clock, at the next
// Clock.Advance past its TTL.
func (g *grant) Abandon(ctx context.Context) error {
	s := g.c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g.e.abandoned = true
	return nil
}
