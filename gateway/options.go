package gateway

import (
	"fmt"
	"log/slog"
	"time"
)

const (
	// DefaultMaxBodyBytes bounds a request body. An acquire's fields
	// (a key of at most dlock.MaxKeyLen bytes, a note of at most
	// dlock.MaxNoteLen) fit in a few kilobytes; anything longer is not a
	// request the gateway serves, and reading it would cost memory.
	DefaultMaxBodyBytes = 16 << 10

	// DefaultMaxLeases bounds the leases one gateway holds for its
	// clients, each renewed on the backend: past it, an acquire fails
	// with too_many_leases rather than loading the backend without bound.
	DefaultMaxLeases = 10000

	// DefaultMaxWaiters bounds the waits in progress (long polls, holds
	// waiting for their grant), the tickets keeping a place and the
	// election observers, together: each is a waiter queued on the
	// backend, or a watch of it.
	DefaultMaxWaiters = 1000

	// DefaultMaxWait bounds one long poll. Thirty seconds stays below the
	// idle timeouts of common proxies and load balancers (60 s), which
	// would otherwise cut the poll and make its place look abandoned.
	DefaultMaxWait = 30 * time.Second

	// DefaultTicketTTL is how long a wait that ended ungranted keeps its
	// place in the queue for a new poll that presents its ticket: long
	// enough for a client to poll again at once, short enough that a
	// client gone away holds up the queue only briefly.
	DefaultTicketTTL = 10 * time.Second

	// DefaultKeepAlive is the longest interval between two events of a
	// streaming hold (at most a third of the lease's TTL is used when
	// shorter), so that a client notices a dead stream, and proxies do
	// not close an idle one.
	DefaultKeepAlive = 5 * time.Second

	// DefaultMaxWatches bounds the watch streams (GET /v1/watch) served at
	// once. Each lists its prefix every WatchListInterval and watches up
	// to 256 keys on the backend: a few dashboards and tools, not one per
	// client of a fleet.
	DefaultMaxWatches = 64

	// DefaultWatchListInterval is how often a watch stream lists its
	// prefix, to find the keys that appear under it and the changes the
	// backend sends no notice of (on Redis, a lock's release): a second
	// keeps a dashboard current for people at one List a second per
	// stream.
	DefaultWatchListInterval = time.Second
)

// Option configures a Gateway in New.
type Option func(*config) error

// minInterval is the shortest duration that each duration option takes.
const minInterval = 10 * time.Millisecond

// atLeast is the Option that sets the field of c that field returns to v,
// or fails New when v is below lowest.
func atLeast[T int | int64 | time.Duration](name string, v, lowest T, field func(*config) *T) Option {
	return func(c *config) error {
		if v < lowest {
			return fmt.Errorf("%w: %s %v is below %v", ErrInvalidOption, name, v, lowest)
		}
		*field(c) = v
		return nil
	}
}

type config struct {
	maxBody    int64
	maxLeases  int
	maxWaiters int
	maxWait    time.Duration
	ticketTTL  time.Duration
	keepAlive  time.Duration
	maxWatches int
	watchList  time.Duration
	log        *slog.Logger
	auth       Authenticator // nil: no authentication
	rate       float64       // requests a second per client; 0: no limit
	burst      int
	maxStreams int // per client; 0: no limit
	leaseKey   []byte
}

func defaultConfig() config {
	return config{
		maxBody:    DefaultMaxBodyBytes,
		maxLeases:  DefaultMaxLeases,
		maxWaiters: DefaultMaxWaiters,
		maxWait:    DefaultMaxWait,
		ticketTTL:  DefaultTicketTTL,
		keepAlive:  DefaultKeepAlive,
		maxWatches: DefaultMaxWatches,
		watchList:  DefaultWatchListInterval,
		log:        slog.New(slog.DiscardHandler),
		leaseKey:   newLeaseKey(),
	}
}

// MaxBodyBytes sets the longest request body, default DefaultMaxBodyBytes.
// A longer body is refused with 413 body_too_large.
func MaxBodyBytes(n int64) Option {
	return atLeast("MaxBodyBytes", n, 1024, func(c *config) *int64 { return &c.maxBody })
}

// MaxLeases sets how many leases the gateway holds at once, explicit and
// streamed together, default DefaultMaxLeases; an explicit lease that any
// instance serves counts only while it is acquired, as no instance holds
// it afterwards. An acquire beyond it is refused with 429 too_many_leases.
func MaxLeases(n int) Option {
	return atLeast("MaxLeases", n, 1, func(c *config) *int { return &c.maxLeases })
}

// MaxWaiters sets how many waits, tickets and election observers the
// gateway keeps at once, default DefaultMaxWaiters. One beyond it is
// refused with 429 too_many_waiters.
func MaxWaiters(n int) Option {
	return atLeast("MaxWaiters", n, 1, func(c *config) *int { return &c.maxWaiters })
}

// MaxWait sets the longest long poll, default DefaultMaxWait: a longer
// wait_ms is shortened to it (the reply's ticket lets the client go on
// waiting in its place).
func MaxWait(d time.Duration) Option {
	return atLeast("MaxWait", d, minInterval, func(c *config) *time.Duration { return &c.maxWait })
}

// TicketTTL sets how long a wait that ended ungranted keeps its place for
// a poll presenting its ticket, default DefaultTicketTTL.
func TicketTTL(d time.Duration) Option {
	return atLeast("TicketTTL", d, minInterval, func(c *config) *time.Duration { return &c.ticketTTL })
}

// KeepAlive sets the longest interval between two events of a streaming
// hold, default DefaultKeepAlive.
func KeepAlive(d time.Duration) Option {
	return atLeast("KeepAlive", d, minInterval, func(c *config) *time.Duration { return &c.keepAlive })
}

// MaxWatches sets how many watch streams the gateway serves at once,
// default DefaultMaxWatches. One beyond it is refused with 429
// too_many_watches.
func MaxWatches(n int) Option {
	return atLeast("MaxWatches", n, 1, func(c *config) *int { return &c.maxWatches })
}

// WatchListInterval sets how often a watch stream lists its prefix,
// default DefaultWatchListInterval.
func WatchListInterval(d time.Duration) Option {
	return atLeast("WatchListInterval", d, minInterval, func(c *config) *time.Duration { return &c.watchList })
}

// Logger sets where the gateway logs what it does on its own: leases
// released because their client stopped renewing, grants released because
// their client went away, releases that failed. Default: nothing is logged.
func Logger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil Logger", ErrInvalidOption)
		}
		c.log = l
		return nil
	}
}

// RateLimit bounds each client's requests to perSecond on average, in
// bursts of at most burst: a token bucket per principal, or per remote
// address without Authenticate. A request beyond it is refused with 429
// rate_limited and a Retry-After header. Default: no limit.
func RateLimit(perSecond float64, burst int) Option {
	return func(c *config) error {
		if !(perSecond > 0) || burst < 1 {
			return fmt.Errorf("%w: RateLimit %g a second, bursts of %d: want both above 0", ErrInvalidOption, perSecond, burst)
		}
		c.rate, c.burst = perSecond, burst
		return nil
	}
}

// MaxStreamsPerClient bounds the streams (holds, watches, observes) each
// client has open at once: each principal, or each remote address without
// Authenticate. One beyond it is refused with 429 too_many_streams.
// Default: no bound but the gateway's own (MaxWaiters, MaxWatches,
// MaxLeases).
func MaxStreamsPerClient(n int) Option {
	return atLeast("MaxStreamsPerClient", n, 1, func(c *config) *int { return &c.maxStreams })
}

// MinLeaseKeyLen is the shortest key LeaseKey takes: 256 bits, HMAC-SHA256's
// own strength.
const MinLeaseKeyLen = 32

// LeaseKey sets the secret that signs the lease ids (HMAC-SHA256), so that
// no client can forge or alter one. Gateway instances in front of one
// backend given the same key renew and release each other's leases where
// the backend keeps a lease's state (Redis): any instance then serves a
// lease's requests. Default: a random key of the instance's own, which
// accepts only the ids it issued and answers another's with 421
// wrong_instance. The key must be at least MinLeaseKeyLen bytes; keep it
// as secret as the credentials.
func LeaseKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < MinLeaseKeyLen {
			return fmt.Errorf("%w: LeaseKey of %d bytes: want at least %d", ErrInvalidOption, len(key), MinLeaseKeyLen)
		}
		c.leaseKey = append([]byte(nil), key...)
		return nil
	}
}
