package dlock

import (
	"fmt"
	"log/slog"
	"time"
)

const (
	// DefaultTTL is the lease length when WithTTL is not given. Ten seconds
	// frees the key of a crashed holder quickly enough for jobs that run every
	// minute or so, while leaving renewals (every TTL/3) several round trips
	// of slack on a congested network.
	DefaultTTL = 10 * time.Second

	// MinTTL is the shortest lease. Below it, the renewal interval (TTL/3)
	// and the safety margin (1% + 2 ms) leave no room for a round trip.
	MinTTL = 100 * time.Millisecond

	// MaxTTL is the longest lease. A holder that dies keeps the key for up
	// to a TTL, so longer leases are almost always a mistake.
	MaxTTL = 24 * time.Hour

	// CloseTimeout is the longest that Client.Close waits for the server to
	// confirm the releases of the leases it ends, all together (and for
	// each lease at most its TTL). A healthy server answers in
	// milliseconds; one that has not answered in ten seconds is not
	// reachable, and it frees the keys by itself when their TTLs run out.
	CloseTimeout = 10 * time.Second

	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 256

	// MaxNoteLen is the longest Metadata.Note, in bytes.
	MaxNoteLen = 1024
)

// Option configures a Client in Open or NewClient.
type Option interface {
	applyClient(*clientConfig) error
}

// LockOption configures one Lock, TryLock or Do call.
type LockOption interface {
	applyLock(*lockConfig) error
}

// CommonOption is accepted both by Open (as the default for every lock of the
// client) and by Lock (for that lock only).
type CommonOption interface {
	Option
	LockOption
}

type clientConfig struct {
	lock   lockConfig
	logger *slog.Logger
	hooks  []Hooks // by WithHooks, in order
}

type lockConfig struct {
	ttl      time.Duration
	ttlSet   bool // by WithTTL: checked against a driver.FixedTTL
	metadata Metadata
	value    string        // an election candidate's value (Campaign)
	noWait   bool          // NoWait: give up at once instead of queueing
	hold     time.Duration // HoldAtLeast: the minimum hold, 0 for none
	holdMax  time.Duration // HoldAtMost: the maximum hold, 0 for none
	// lockDelay is WithLockDelay's, 0 for none.
	lockDelay time.Duration
}

type ttlOption time.Duration

func (o ttlOption) applyLock(c *lockConfig) error {
	d := time.Duration(o)
	if d < MinTTL || d > MaxTTL {
		return fmt.Errorf("%w: TTL %v is outside [%v, %v]", ErrInvalidOption, d, MinTTL, MaxTTL)
	}
	c.ttl, c.ttlSet = d, true
	return nil
}

func (o ttlOption) applyClient(c *clientConfig) error { return o.applyLock(&c.lock) }

// WithTTL sets the lease length: how long the server keeps the key for a
// holder that stops renewing (because it crashed or lost its network). The
// lease renews itself about every TTL/3 while held. Default DefaultTTL; it
// must lie within [MinTTL, MaxTTL].
//
// Some backends round it: see the backend's documentation. On a backend
// whose leases all last one length set by the connection (ZooKeeper: the
// session timeout), a TTL other than that length is refused with
// ErrInvalidOption; leave WithTTL out there.
func WithTTL(d time.Duration) CommonOption { return ttlOption(d) }

type metadataOption Metadata

func (o metadataOption) applyLock(c *lockConfig) error {
	m := Metadata(o)
	if len(m.Note) > MaxNoteLen {
		return fmt.Errorf("%w: metadata note is %d bytes long, the limit is %d", ErrInvalidOption, len(m.Note), MaxNoteLen)
	}
	if len(m.Host) > MaxNoteLen {
		return fmt.Errorf("%w: metadata host is %d bytes long, the limit is %d", ErrInvalidOption, len(m.Host), MaxNoteLen)
	}
	if m.Host != "" {
		c.metadata.Host = m.Host
	}
	if m.PID != 0 {
		c.metadata.PID = m.PID
	}
	if m.Note != "" {
		c.metadata.Note = m.Note
	}
	return nil
}

func (o metadataOption) applyClient(c *clientConfig) error { return o.applyLock(&c.lock) }

// WithMetadata stores m with the lease and with the caller's place in the
// queue, where Client.Inspect and `dlock status` show it. Empty fields keep
// their defaults: the host name and process id of this process, no note.
func WithMetadata(m Metadata) CommonOption { return metadataOption(m) }

type loggerOption struct{ l *slog.Logger }

func (o loggerOption) applyClient(c *clientConfig) error {
	if o.l == nil {
		return fmt.Errorf("%w: nil logger", ErrInvalidOption)
	}
	c.logger = o.l
	return nil
}

// WithLogger sets where the client records the events of its leases'
// lives (each acquire, renewal and lease end: the events of Hooks, with
// their fields, at the levels of docs/observability.md), what it recovers
// from by itself, and where its backend sends what the backend's client
// library reports (reconnects, failed dials: see driver.Logging and the
// backend's documentation). Default: nothing is logged, and nothing is
// written to stderr; every failure that matters is also returned or
// reported via Lease.Err.
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }
