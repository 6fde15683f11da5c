package dlock

import (
	"context"
	"log/slog"
)

// logHooks are the hooks by which a Client given WithLogger logs every
// event. The levels are in docs/observability.md, section Logs: Debug for
// what goes as planned, and for what the caller is told anyway (an
// acquire's error is returned); Warn for what the Client alone sees and
// the holder may need to act on (a failed renewal, a lost lease, a job
// cut off at its maximum hold); Error for a job that ran without its lock.
func logHooks(log *slog.Logger) Hooks {
	return Hooks{
		AcquireStart: func(ctx context.Context, i AcquireStartInfo) context.Context {
			if log.Enabled(ctx, slog.LevelDebug) {
				log.LogAttrs(ctx, slog.LevelDebug, "dlock: acquiring", slog.String("key", i.Key),
					slog.String("kind", i.Kind.String()), slog.String("mode", i.Mode.String()))
			}
			return ctx
		},
		AcquireDone: func(ctx context.Context, i AcquireDoneInfo) context.Context {
			if !log.Enabled(ctx, slog.LevelDebug) {
				return ctx
			}
			attrs := []slog.Attr{slog.String("key", i.Key), slog.String("kind", i.Kind.String()), slog.String("mode", i.Mode.String()),
				slog.String("outcome", i.Outcome.String()), slog.Duration("waited", i.Waited)}
			if i.Outcome == OutcomeAcquired {
				attrs = append(attrs, slog.Uint64("token", i.Token))
			} else {
				attrs = append(attrs, slog.Any("error", i.Err))
			}
			log.LogAttrs(ctx, slog.LevelDebug, "dlock: acquire done", attrs...)
			return ctx
		},
		Renewed: func(ctx context.Context, i RenewedInfo) {
			level, msg := slog.LevelDebug, "dlock: lease renewed"
			if i.Err != nil {
				// Retried until the lease's local deadline, unless the
				// server said it is gone: LeaseEnded says which.
				level, msg = slog.LevelWarn, "dlock: lease renewal failed"
			}
			if !log.Enabled(ctx, level) {
				return
			}
			attrs := []slog.Attr{slog.String("key", i.Key), slog.String("kind", i.Kind.String()), slog.String("mode", i.Mode.String()),
				slog.Uint64("token", i.Token), slog.Duration("latency", i.Latency), slog.Duration("late", i.Late)}
			if i.Err != nil {
				attrs = append(attrs, slog.Any("error", i.Err))
			}
			log.LogAttrs(ctx, level, msg, attrs...)
		},
		LeaseEnded: func(ctx context.Context, i LeaseEndedInfo) {
			level, msg := slog.LevelDebug, "dlock: lease ended"
			if i.Reason.Lost() {
				level, msg = slog.LevelWarn, "dlock: lease lost"
			} else if i.Reason == EndHoldLimit {
				level, msg = slog.LevelWarn, "dlock: lease released at its maximum hold"
			}
			if !log.Enabled(ctx, level) {
				return
			}
			attrs := []slog.Attr{slog.String("key", i.Key), slog.String("kind", i.Kind.String()), slog.String("mode", i.Mode.String()),
				slog.Uint64("token", i.Token), slog.String("reason", i.Reason.String()), slog.Duration("held", i.Held)}
			if level != slog.LevelDebug {
				attrs = append(attrs, slog.Any("error", i.Err))
			}
			log.LogAttrs(ctx, level, msg, attrs...)
		},
		Unprotected: func(ctx context.Context, i UnprotectedInfo) {
			if log.Enabled(ctx, slog.LevelError) {
				log.LogAttrs(ctx, slog.LevelError, "dlock: job ran on after its lease ended", slog.String("key", i.Key),
					slog.String("kind", i.Kind.String()), slog.Uint64("token", i.Token), slog.String("reason", i.Reason.String()),
					slog.Duration("unprotected", i.Unprotected))
			}
		},
	}
}
