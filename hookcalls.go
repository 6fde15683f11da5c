package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockdev/dlock/internal/lease"
)

// hookSet is a Client's Hooks, combined: each event's functions from every
// WithHooks set (and the logger's, last), nil ones left out, in order. A
// Client without hooks has empty slices, and every call site checks their
// length before it reads a clock or fills an info struct.
type hookSet struct {
	acquireStart []func(context.Context, AcquireStartInfo) context.Context
	acquireDone  []func(context.Context, AcquireDoneInfo) context.Context
	renewed      []func(context.Context, RenewedInfo)
	leaseEnded   []func(context.Context, LeaseEndedInfo)
	unprotected  []func(context.Context, UnprotectedInfo)
}

func combineHooks(sets []Hooks) hookSet {
	var h hookSet
	for _, s := range sets {
		if s.AcquireStart != nil {
			h.acquireStart = append(h.acquireStart, s.AcquireStart)
		}
		if s.AcquireDone != nil {
			h.acquireDone = append(h.acquireDone, s.AcquireDone)
		}
		if s.Renewed != nil {
			h.renewed = append(h.renewed, s.Renewed)
		}
		if s.LeaseEnded != nil {
			h.leaseEnded = append(h.leaseEnded, s.LeaseEnded)
		}
		if s.Unprotected != nil {
			h.unprotected = append(h.unprotected, s.Unprotected)
		}
	}
	return h
}

// acquires reports whether an acquire has anybody to tell.
func (h *hookSet) acquires() bool { return len(h.acquireStart)+len(h.acquireDone) > 0 }

// watchesLeases reports whether leases need an observer: for Renewed and
// LeaseEnded, and for Unprotected, which needs the moment the lease ended.
func (h *hookSet) watchesLeases() bool {
	return len(h.renewed)+len(h.leaseEnded)+len(h.unprotected) > 0
}

func (h *hookSet) startAcquire(ctx context.Context, info AcquireStartInfo) context.Context {
	for _, f := range h.acquireStart {
		ctx = f(ctx, info)
	}
	return ctx
}

func (h *hookSet) doneAcquire(ctx context.Context, info AcquireDoneInfo) context.Context {
	for _, f := range h.acquireDone {
		ctx = f(ctx, info)
	}
	return ctx
}

// outcome classifies an acquiring call's error.
func outcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrLocked):
		return OutcomeSkipped
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
		return OutcomeCanceled
	}
	return OutcomeError
}

// hasNoWait reports whether opts hold NoWait, for AcquireStartInfo.Wait
// before the options are checked.
func hasNoWait(opts []LockOption) bool {
	for _, o := range opts {
		if _, ok := o.(noWaitOption); ok {
			return true
		}
	}
	return false
}

// endReason maps the engine's end to the hooks', given the lease's Err:
// the engine releases for Unlock, Resign and Close alike.
func endReason(end lease.End, err error) EndReason {
	switch end {
	case lease.Expired:
		return EndExpired
	case lease.Dropped:
		return EndDropped
	case lease.Limited:
		return EndHoldLimit
	case lease.Abandoned:
		return EndClosed
	}
	if errors.Is(err, ErrClosed) {
		return EndClosed
	}
	return EndReleased
}

// leaseEvents is a Lease as its engine's Observer. It is one pointer, so
// that it makes an interface value without an allocation.
type leaseEvents struct{ l *Lease }

func (o leaseEvents) Renewed(latency, late time.Duration, err error) {
	l := o.l
	info := RenewedInfo{Backend: l.client.backend, Key: l.key, Kind: l.kind, Mode: l.mode, Token: l.token, Latency: latency, Late: late, Err: err}
	for _, f := range l.client.hooks.renewed {
		f(l.hookCtx, info)
	}
}

func (o leaseEvents) Ended(end lease.End, at time.Time, err error) {
	l := o.l
	info := LeaseEndedInfo{Backend: l.client.backend, Key: l.key, Kind: l.kind, Mode: l.mode, Token: l.token, Reason: endReason(end, err), Held: at.Sub(l.granted), Err: err}
	for _, f := range l.client.hooks.leaseEnded {
		f(l.hookCtx, info)
	}
}

// reportUnprotected tells the Unprotected hooks that Do's function
// returned at returned after l ended other than by that return: lost, or
// released at its maximum hold.
func (l *Lease) reportUnprotected(returned time.Time) {
	end, at, ok := l.eng.Ended()
	if !ok || at.After(returned) {
		return
	}
	reason := endReason(end, l.eng.Err())
	if !reason.Lost() && reason != EndHoldLimit {
		return
	}
	info := UnprotectedInfo{Backend: l.client.backend, Key: l.key, Kind: l.kind, Token: l.token, Reason: reason, Unprotected: returned.Sub(at)}
	for _, f := range l.client.hooks.unprotected {
		f(l.hookCtx, info)
	}
}
