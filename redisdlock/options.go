package redisdlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
)

const (
	// DefaultPrefix starts the name of every Redis key dlock writes.
	DefaultPrefix = "dlock:"

	// DefaultWaiterTimeout is how long a waiter's place in a queue lasts
	// without a poll. A waiter whose process died is skipped at most this
	// long after its last poll. Three seconds keeps a dead waiter's cost to
	// the queue small while surviving two lost polls in a row.
	DefaultWaiterTimeout = 3 * time.Second
)

// Options configure the Redis backend. The zero value (or nil) selects the
// defaults.
type Options struct {
	// Prefix starts every key dlock writes. Default DefaultPrefix. It must
	// not contain '{' or '}', which would break Redis Cluster hash tags.
	Prefix string

	// WaiterTimeout is how long a place in a queue lasts without a poll.
	// Default DefaultWaiterTimeout; at least 100 ms.
	WaiterTimeout time.Duration

	// PollInterval is how often a waiting Lock polls the server: to keep
	// its place in the queue alive and to catch a hand-off notice lost with
	// a Pub/Sub connection. Waiting is otherwise driven by the notice, so
	// this costs one request per waiter per interval, not per hand-off.
	// Default WaiterTimeout/3; it must be below WaiterTimeout.
	PollInterval time.Duration

	// AllowEviction lets New and Open accept a server whose
	// maxmemory-policy may evict keys (anything but noeviction). By default
	// they refuse one with ErrUnsafeServer: under memory pressure such a
	// server may evict a held lock's key and grant the key to a second
	// owner while the first still holds a valid lease. Lock keys all have
	// an expiry, so the volatile-* policies take them too. Set it only if a
	// double grant is acceptable, or the server can never run out of
	// memory. URL parameter: allow_eviction=true.
	AllowEviction bool

	// WaitReplicas, when above zero, makes every grant, renewal and release
	// wait until that many replicas have it (Redis WAIT, sent right behind
	// the script on the same connection), so that a failover to one of them
	// cannot grant a held key again. A grant not acknowledged within
	// WaitTimeout is released and Lock reports an error satisfying
	// errors.Is(err, dlock.ErrUnavailable); a renewal not acknowledged
	// counts as failed (the lease engine retries it until the lease's
	// deadline); a release not acknowledged has freed the key on the master
	// and Unlock reports ErrUnavailable. An acknowledgement is no fsync, and
	// a failover to a replica that has not acknowledged is still possible:
	// docs/redis.md, "Replica acknowledgement". Default 0: no WAIT.
	// URL parameter: wait_replicas.
	WaitReplicas int

	// WaitTimeout is how long WAIT waits for WaitReplicas replicas. Default
	// DefaultWaitTimeout; it must be positive and below the go-redis
	// client's read timeout. URL parameter: wait_timeout.
	WaitTimeout time.Duration

	// ClientOptions are passed to dlock.NewClient (WithTTL, WithMetadata,
	// WithLogger defaults for every lock).
	ClientOptions []dlock.Option
}

// withDefaults fills in the defaults and checks the values. Its errors say
// what is wrong and no more: New makes them ErrInvalidOption, a URL's
// parameters ErrInvalidURL.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Prefix == "" {
		out.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(out.Prefix, "{}") {
		return out, fmt.Errorf("prefix %q contains '{' or '}'", out.Prefix)
	}
	if out.WaiterTimeout == 0 {
		out.WaiterTimeout = DefaultWaiterTimeout
	}
	if out.WaiterTimeout < 100*time.Millisecond {
		return out, fmt.Errorf("waiter timeout %v is below 100ms", out.WaiterTimeout)
	}
	if out.PollInterval == 0 {
		out.PollInterval = out.WaiterTimeout / 3
	}
	if out.PollInterval <= 0 || out.PollInterval >= out.WaiterTimeout {
		return out, fmt.Errorf("poll interval %v must be positive and below the waiter timeout %v", out.PollInterval, out.WaiterTimeout)
	}
	if out.WaitReplicas < 0 {
		return out, fmt.Errorf("wait replicas %d is negative", out.WaitReplicas)
	}
	if out.WaitTimeout == 0 {
		out.WaitTimeout = DefaultWaitTimeout
	}
	// WAIT 0 would block forever; below a millisecond it would be WAIT 0.
	if out.WaitTimeout < time.Millisecond {
		return out, fmt.Errorf("wait timeout %v is below 1ms", out.WaitTimeout)
	}
	return out, nil
}
