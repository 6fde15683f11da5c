package dlock

import (
	"context"
	"errors"
	"time"
)

// Lead runs fn whenever the caller leads the election, until ctx ends: it
// campaigns with value, calls fn with a context that is cancelled as soon
// as leadership is lost, resigns when fn returns, and campaigns again (at
// the end of the line, so that the other candidates get their turn), as
// Curator's LeaderSelector with autoRequeue and client-go's leader election
// do. fn's own errors do not stop Lead: they are logged (WithLogger), and
// the next term follows.
//
// Lead returns ctx's error once ctx ends, or the first error that another
// campaign would only repeat: ErrInvalidKey, ErrInvalidOption,
// ErrKindMismatch, ErrClosed. Other errors of Campaign (ErrUnavailable)
// are retried after a pause that grows to a second.
func (e *Election) Lead(ctx context.Context, value string, fn func(ctx context.Context, term *Leadership) error, opts ...LockOption) error {
	pause := 10 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		term, err := e.Campaign(ctx, value, opts...)
		switch {
		case err == nil:
			pause = 10 * time.Millisecond
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidOption),
			errors.Is(err, ErrKindMismatch), errors.Is(err, ErrClosed), errors.Is(err, errors.ErrUnsupported):
			return err
		default:
			e.c.log.Warn("dlock: campaign failed; trying again", "key", e.key, "err", err)
			if !sleepCtx(ctx, pause) {
				return ctx.Err()
			}
			pause = min(2*pause, time.Second)
			continue
		}
		e.serve(ctx, term, fn)
	}
}

// serve runs fn for one term and ends the term.
func (e *Election) serve(ctx context.Context, term *Leadership, fn func(ctx context.Context, term *Leadership) error) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lostContext{term.l}, func() { cancel(term.Err()) })
	fnErr := fn(fnCtx, term)
	stop()
	cancel(nil)
	if fnErr != nil && !errors.Is(fnErr, context.Canceled) {
		e.c.log.Warn("dlock: leader's function failed", "key", e.key, "token", term.Token(), "err", fnErr)
	}
	// Resign even if ctx has ended, but not forever.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), term.l.ttl)
	defer rcancel()
	_ = term.Resign(rctx) // ErrNotHeld: lost already; else the server frees it within a TTL
}
