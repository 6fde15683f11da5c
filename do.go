package dlock

import (
	"context"
	"errors"
	"time"
)

// Do takes key (waiting as Lock does, unless NoWait), runs fn with a context that is
// cancelled as soon as the lease is lost, and unlocks. If the key cannot be
// taken it returns Lock's error (ErrInvalidKey, ErrInvalidOption,
// ErrReentrant, ErrClosed, ErrUnavailable, ctx.Err()) without calling fn.
// Otherwise it returns fn's error;
// if the lease was lost while fn ran, the error also satisfies
// errors.Is(err, ErrLeaseLost), even when fn returned nil, because the work
// may have overlapped with another holder's; if Client.Close ended the lease
// while fn ran, it satisfies errors.Is(err, ErrClosed); if HoldAtMost
// released it while fn ran, errors.Is(err, ErrHoldLimit). fn's context is
// then cancelled with the same error as its cause (context.Cause). The
// lease's fencing token is available to fn through LeaseFromContext.
//
// For a job fired on every instance of a service, NoWait makes Do skip it
// (returning an error satisfying errors.Is(err, ErrLocked), without calling
// fn) when another instance holds the key, and HoldAtLeast keeps the key
// held for a while after fn returns, in the background, so that an instance
// that fires a little later skips it too: see HoldAtLeast. HoldAtMost
// releases the key of a job that hangs.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(withLease(ctx, l))
	stop := context.AfterFunc(lostContext{l}, func() { cancel(l.Err()) })
	fnErr := fn(fnCtx)
	var returned time.Time
	if len(c.hooks.unprotected) > 0 {
		returned = time.Now()
	}
	stop()
	cancel(nil)

	lost := l.Err()
	if lost != nil && !returned.IsZero() {
		l.reportUnprotected(returned)
	}
	// Unlock even if ctx has ended, but not forever.
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
	defer ucancel()
	uerr := l.Unlock(uctx)
	switch {
	case lost != nil:
		return errors.Join(fnErr, lost)
	case uerr != nil:
		// Lost between fn returning and Unlock (ErrNotHeld), or the
		// release could not be confirmed. Unlock names the key.
		return errors.Join(fnErr, uerr)
	}
	return fnErr
}

type leaseKey struct{}

// heldLeases are the leases of the Do calls a context passed through,
// innermost first.
type heldLeases struct {
	l     *Lease
	outer *heldLeases
}

func withLease(ctx context.Context, l *Lease) context.Context {
	outer, _ := ctx.Value(leaseKey{}).(*heldLeases)
	return context.WithValue(ctx, leaseKey{}, &heldLeases{l: l, outer: outer})
}

// LeaseFromContext returns the lease of the (innermost) Do call that ctx was
// passed to.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	h, ok := ctx.Value(leaseKey{}).(*heldLeases)
	if !ok {
		return nil, false
	}
	return h.l, true
}

// holdsInContext says whether ctx passed through a Do call of c on key
// whose lease is still held: a Lock of key with ctx would wait for itself.
func (c *Client) holdsInContext(ctx context.Context, key string) bool {
	h, _ := ctx.Value(leaseKey{}).(*heldLeases)
	for ; h != nil; h = h.outer {
		if h.l.client == c && h.l.key == key && h.l.Err() == nil {
			return true
		}
	}
	return false
}

// lostContext adapts a Lease to the part of context.Context that
// context.AfterFunc watches.
type lostContext struct{ l *Lease }

func (c lostContext) Deadline() (deadline time.Time, ok bool) { return }
func (c lostContext) Done() <-chan struct{}                   { return c.l.Done() }
func (c lostContext) Err() error                              { return c.l.Err() }
func (c lostContext) Value(any) any                           { return nil }
