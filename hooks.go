package dlock

import (
	"context"
	"fmt"
	"time"
)

// Hooks are functions a Client calls at the events of its leases' lives, for
// metrics, traces and logs: the modules observability/dlockprom and
// observability/dlockotel fill them in, and docs/observability.md lists what
// they report. Every field may be nil. A Client without hooks pays nothing
// for them: no allocation, no call.
//
// The Client calls them synchronously on the goroutine of the event: the
// caller's for AcquireStart, AcquireDone and Unprotected; for Renewed and
// LeaseEnded, the lease's timer's, or that of the call that ended the
// lease (Unlock, Close, or a Done or Err that found the lease's deadline
// passed). They must return quickly, must not block, and must not call the
// Client or its leases. Given WithHooks more than once, the Client calls
// each set in the order given, passing the context one returns to the
// next; the records of WithLogger come last.
//
// Every info names the lock service as Backend ("redis", "zookeeper",
// "etcd", "mem": what the driver says through driver.Named; empty for a
// driver that does not), the Key, its Kind and Limit (a semaphore's
// permits; 1 for a lock or an election, 0 for a RWMutex), and the Mode of
// the caller's entry.
//
// Each granted lease is reported in order: one AcquireDone with
// OutcomeAcquired, its Renewed calls, and exactly one LeaseEnded, whoever
// ends it and however (a HoldAtLeast's deferred release included). A grant
// that arrives while Close runs is reported so too, acquired and then
// ended by Close at once, although the call returns ErrClosed: so a gauge
// of held leases, up at a grant and down at an end, stays true.
//
// An election's Campaign is an acquire of KindElection: its AcquireDone with
// OutcomeAcquired is a won election, and the LeaseEnded of its lease the end
// of that leadership. A multi-key lock (LockAll) reports each of its keys.
type Hooks struct {
	// AcquireStart is called when an acquiring call begins: Lock,
	// TryLock, Do, LockAll, a Semaphore's or RWMutex's acquire, Campaign.
	// The context it returns is the one the backend's requests are made
	// with, so that a tracer's span there parents the backend client's own
	// spans; AcquireDone gets it too. It must return ctx or a context
	// derived from it.
	AcquireStart func(ctx context.Context, info AcquireStartInfo) context.Context

	// AcquireDone is called when that call ends, whatever its outcome.
	// When the lease was granted, the context it returns is kept with the
	// lease and passed to the lease's Renewed and LeaseEnded (a tracer's
	// hold span lives there); otherwise it is dropped.
	AcquireDone func(ctx context.Context, info AcquireDoneInfo) context.Context

	// Renewed is called after each renewal of a held lease, succeeded or
	// failed (a failed one is retried until the lease's local deadline,
	// unless the server said the grant is gone). A renewal answered after
	// the lease ended is not reported.
	Renewed func(ctx context.Context, info RenewedInfo)

	// LeaseEnded is called once for each granted lease, when it ends:
	// released, lost, released at its maximum hold, or ended by Close.
	LeaseEnded func(ctx context.Context, info LeaseEndedInfo)

	// Unprotected is called when the function of a Do returns after its
	// lease ended other than by that return (lost, or released at its
	// HoldAtMost): for that long the job ran without the lock. It gets
	// the context kept with the lease.
	Unprotected func(ctx context.Context, info UnprotectedInfo)
}

// AcquireStartInfo describes an acquiring call as it begins.
type AcquireStartInfo struct {
	Backend string
	Key     string
	Kind    Kind
	Mode    Mode
	Limit   int
	Wait    bool // false for TryLock and with NoWait: give up at once when the key is taken
}

// AcquireDoneInfo describes how an acquiring call ended.
type AcquireDoneInfo struct {
	Backend string
	Key     string
	Kind    Kind
	Mode    Mode
	Limit   int
	Outcome Outcome
	// Waited is the time from the call's start to its end: for a grant,
	// the wait for the key plus the round trips that took it.
	Waited time.Duration
	// Token is the lease's fencing token; 0 unless Outcome is
	// OutcomeAcquired.
	Token uint64
	// Err is the error the call returns; nil for OutcomeAcquired.
	Err error
}

// RenewedInfo describes one renewal of a held lease.
type RenewedInfo struct {
	Backend string
	Key     string
	Kind    Kind
	Mode    Mode
	Token   uint64
	// Latency is the time from sending the renewal to its answer.
	Latency time.Duration
	// Late is how long after its scheduled moment the renewal was sent:
	// near zero on a healthy process, large when the process was paused
	// or starved of CPU. A renewal late by more than a third of the TTL
	// puts the lease at risk.
	Late time.Duration
	// Err is nil when the server extended the lease; otherwise why not.
	Err error
}

// LeaseEndedInfo describes the end of a lease.
type LeaseEndedInfo struct {
	Backend string
	Key     string
	Kind    Kind
	Mode    Mode
	Token   uint64
	Reason  EndReason
	// Held is the time from the grant to the end (for EndExpired, to the
	// local deadline that passed).
	Held time.Duration
	// Err is the lease's Err: why it ended.
	Err error
}

// UnprotectedInfo describes a Do whose function outlived its lease.
type UnprotectedInfo struct {
	Backend string
	Key     string
	Kind    Kind
	Token   uint64
	Reason  EndReason // EndExpired, EndDropped or EndHoldLimit
	// Unprotected is how long the function ran after the lease ended
	// (for EndExpired, after its local deadline).
	Unprotected time.Duration
}

// Outcome is how an acquiring call ended.
type Outcome uint8

// The outcomes of acquiring calls.
const (
	// OutcomeAcquired: the lease was granted.
	OutcomeAcquired Outcome = iota + 1
	// OutcomeSkipped: TryLock or NoWait found the key taken (ErrLocked):
	// a scheduled job that another instance runs.
	OutcomeSkipped
	// OutcomeTimeout: the caller's context reached its deadline.
	OutcomeTimeout
	// OutcomeCanceled: the caller's context was cancelled, or the Client
	// was closed.
	OutcomeCanceled
	// OutcomeError: any other error (bad input, ErrKindMismatch,
	// ErrUnavailable, ErrReentrant).
	OutcomeError
)

// String returns the outcome's name as metrics label it: "acquired",
// "skipped", "timeout", "canceled" or "error".
func (o Outcome) String() string {
	switch o {
	case OutcomeAcquired:
		return "acquired"
	case OutcomeSkipped:
		return "skipped"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeCanceled:
		return "canceled"
	case OutcomeError:
		return "error"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// EndReason is why a lease ended.
type EndReason uint8

// The reasons a lease ends.
const (
	// EndReleased: Unlock, Resign or the end of Do released it.
	EndReleased EndReason = iota + 1
	// EndExpired: lost, because no renewal succeeded before its local
	// deadline (the server unreachable, the process paused).
	EndExpired
	// EndDropped: lost, because the server said the grant is gone (its
	// lease or session expired there, or somebody deleted it).
	EndDropped
	// EndHoldLimit: released at its maximum hold (HoldAtMost).
	EndHoldLimit
	// EndClosed: ended by Client.Close.
	EndClosed
)

// String returns the reason's name as metrics label it: "released",
// "expired", "dropped", "hold_limit" or "closed".
func (r EndReason) String() string {
	switch r {
	case EndReleased:
		return "released"
	case EndExpired:
		return "expired"
	case EndDropped:
		return "dropped"
	case EndHoldLimit:
		return "hold_limit"
	case EndClosed:
		return "closed"
	}
	return fmt.Sprintf("EndReason(%d)", uint8(r))
}

// Lost reports whether the lease was lost (EndExpired or EndDropped) rather
// than given up: the work done under it may have overlapped with another
// holder's.
func (r EndReason) Lost() bool { return r == EndExpired || r == EndDropped }

type hooksOption struct{ h Hooks }

func (o hooksOption) applyClient(c *clientConfig) error {
	c.hooks = append(c.hooks, o.h)
	return nil
}

// WithHooks makes the Client call h's functions at the events of its leases'
// lives (see Hooks). Given more than once, every set is called, in order.
func WithHooks(h Hooks) Option { return hooksOption{h} }
