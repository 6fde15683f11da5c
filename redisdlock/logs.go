package redisdlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/dlockdev/dlock/driver"
	"github.com/redis/go-redis/v9"
)

// SetRedisLogger makes go-redis log to l, at level Warn, instead of to
// stderr; a nil l drops its messages. They are about its connections
// (a failed dial, a broken connection), whichever part of the program made
// the request.
//
// go-redis has one logger per process, not one per client, and does not say
// which client a message is about: so dlock.WithLogger cannot reach them,
// and SetRedisLogger replaces go-redis's logger for the whole process,
// including one the program set with redis.SetLogger. Call it once, at
// start-up, if at all. Without it, dlock leaves go-redis's logger alone and
// keeps it quiet by not dialling a server that refuses connections (see
// docs/redis.md, "Logs").
func SetRedisLogger(l *slog.Logger) {
	redis.SetLogger(slogLogger{l})
}

// slogLogger is the go-redis logger that SetRedisLogger installs.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Printf(ctx context.Context, format string, args ...any) {
	if s.l == nil || !s.l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	s.l.Log(ctx, slog.LevelWarn, fmt.Sprintf(format, args...))
}

// logTo is the Client's logger, shared by the driver and its notifier; nil
// until dlock.NewClient calls SetLogger.
type logTo struct{ p atomic.Pointer[slog.Logger] }

// logger returns the Client's logger, or nil.
func (t *logTo) logger() *slog.Logger { return t.p.Load() }

var _ driver.Logging = (*redisDriver)(nil)

// SetLogger implements driver.Logging.
func (d *redisDriver) SetLogger(l *slog.Logger) { d.log.p.Store(l) }
