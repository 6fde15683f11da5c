package dlock

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock/internal/backoff"
)

// Lead runs fn whenever the caller leads the election, until ctx ends: it
// campaigns with value, calls fn with a context that is cancelled as soon
// as leadership is lost (its context.Cause is the term's Err), resigns
// when fn returns, and campaigns again (at the end of the line, so that
// the other candidates get their turn), as Curator's LeaderSelector with
// autoRequeue and client-go's leader election do. fn's own errors do not
// stop Lead: they are logged (WithLogger), and the next campaign follows
// after a pause that grows from 10ms to a second while fn keeps failing,
// so that a function that cannot work does not spin through terms.
//
// Lead returns ctx's error once ctx ends, or the first error that another
// campaign would only repeat: ErrInvalidKey, ErrInvalidOption,
// ErrKindMismatch, ErrReentrant, ErrClosed, errors.ErrUnsupported. Other
// errors of Campaign (ErrUnavailable) are retried after a pause that grows
// to a second. Each pause is drawn between half and all of its length, so
// that candidates that failed together do not campaign again together.
func (e *Election) Lead(ctx context.Context, value string, fn func(ctx context.Context, term *Leadership) error, opts ...LockOption) error {
	campaignPause, fnPause := backoff.New(retryPauses), backoff.New(retryPauses)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		term, err := e.Campaign(ctx, value, opts...)
		switch {
		case err == nil:
			campaignPause.Reset()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidOption), errors.Is(err, ErrKindMismatch),
			errors.Is(err, ErrReentrant), errors.Is(err, ErrClosed), errors.Is(err, errors.ErrUnsupported):
			return err
		default:
			e.c.log.Warn("dlock: campaign failed; trying again", "key", e.key, "error", err)
			if campaignPause.Wait(ctx) != nil {
				return ctx.Err()
			}
			continue
		}
		if failed := e.serve(ctx, term, fn); !failed {
			fnPause.Reset()
		} else if fnPause.Wait(ctx) != nil {
			return ctx.Err()
		}
	}
}

// serve runs fn for one term and ends the term. It reports whether fn
// failed by itself: an error other than that of its context ending.
func (e *Election) serve(ctx context.Context, term *Leadership, fn func(ctx context.Context, term *Leadership) error) (failed bool) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lostContext{term.l}, func() { cancel(term.Err()) })
	fnErr := fn(fnCtx, term)
	stop()
	ended := fnCtx.Err() != nil // lost, or ctx ended: not fn's failure
	cancel(nil)
	if fnErr != nil && !ended {
		e.c.log.Warn("dlock: leader's function failed", "key", e.key, "token", term.Token(), "error", fnErr)
	}
	// Resign even if ctx has ended, but not forever: the server frees the
	// key within a TTL anyway, since nobody renews it any more.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), term.l.ttl)
	defer rcancel()
	_ = term.Resign(rctx) // ErrNotHeld: lost already
	return fnErr != nil && !ended
}
