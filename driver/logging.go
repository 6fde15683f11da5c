package driver

import "log/slog"

// Logging is implemented by drivers that have something to log: what their
// server's client library reports (reconnects, dial failures) and what they
// recover from by themselves. dlock.NewClient calls SetLogger once, before it
// returns the Client, with the Client's logger (dlock.WithLogger; one that
// discards everything by default), so that nothing a driver or its client
// library says reaches stderr unless the application asked for it. Until
// then, and without it, a driver logs nothing.
type Logging interface {
	SetLogger(l *slog.Logger)
}
