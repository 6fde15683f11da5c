package dlock

import (
	"errors"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
	"github.com/dlockdev/dlock/internal/lease"
)

// Errors returned by dlock and its backends. They are wrapped with details
// (the key, the address) where they are raised: test for them with errors.Is.
//
// A message says each detail once, in this order: the call and its subject
// (from dlock), the sentinel's own text, then what only the backend knows
// (the server's address, the holder's remaining TTL, the server's reply,
// the cause):
//
//	lock "k": dlock: key is locked by another owner: expires in 9.8s unless renewed
//	unlock "k": dlock: lock not held: lease lost: not renewed within its validity of 10s
//	lease "k": dlock: lease lost: lock node lock-…-0000000003 was deleted by somebody else
//	open "redis://:xxxxx@db:6379/0?colour=blue": dlock: invalid backend URL: redis: unexpected option: colour
//	dlock: server unavailable: redis at db:6379: dial tcp 10.0.0.7:6379: connect: connection refused (…)
//
// Lease.Err begins with `lease "k": ` because it is read away from any call;
// ErrReleased is returned as is. The rule for backends is in package driver.
var (
	// ErrLocked is returned by TryLock when another owner holds the key or
	// waiters are queued ahead of the caller.
	ErrLocked = driver.ErrLocked

	// ErrNotHeld is returned by Unlock when the lease was already lost or
	// released: the caller cannot be sure it held the key until the call.
	// It never means that somebody else's lock was released.
	ErrNotHeld = driver.ErrNotHeld

	// ErrLeaseLost is the Err of a lease that ended without Unlock: renewal
	// failed until the local deadline passed, the server said the grant was
	// gone, or the backend's session expired.
	ErrLeaseLost = driver.ErrLeaseLost

	// ErrReleased is the Err of a lease after Unlock.
	ErrReleased = lease.ErrReleased

	// ErrHoldLimit is the Err of a lease that HoldAtMost released at its
	// maximum hold, wrapped with the limit. Do returns it (joined with
	// the function's error) when the limit came while the function ran,
	// whose context it cancelled.
	ErrHoldLimit = errors.New("dlock: maximum hold reached")

	// ErrClosed is returned by calls on a closed Client, and is the Err of
	// leases that Close released.
	ErrClosed = errors.New("dlock: client closed")

	// ErrInvalidKey is returned for an empty key, a key longer than
	// MaxKeyLen bytes, or a key that is not UTF-8 or has control characters;
	// and by LockAll for a key list that is empty or names a key twice.
	ErrInvalidKey = keys.ErrInvalid

	// ErrReentrant is returned by Lock, TryLock and Do when ctx carries the
	// live Lease of a Do call of the same Client on the same key: a nested
	// call that would otherwise wait for itself until ctx ends. dlock's
	// locks are not reentrant, as sync.Mutex is not; where the Client
	// cannot know (a lease held elsewhere in the program, another Client of
	// the same process), a second Lock of a held key waits in line like any
	// other caller.
	ErrReentrant = errors.New("dlock: key already held by this caller (locks are not reentrant)")

	// ErrKindMismatch is returned when a key is held or waited for as
	// another kind than the call asks for: a Semaphore of a key locked by
	// Lock, a Lock of a RWMutex's key, or Semaphores of one key with
	// different limits. The message names what the key is; nothing on the
	// server changes. Once nobody holds or waits for the key, it may serve
	// another kind.
	ErrKindMismatch = driver.ErrKindMismatch

	// ErrNoLeader is returned by Election.Leader when nobody leads the
	// election.
	ErrNoLeader = errors.New("dlock: no leader")

	// ErrInvalidOption is returned for an option value out of range.
	ErrInvalidOption = errors.New("dlock: invalid option")

	// ErrInvalidURL is returned by Open for a URL that cannot be parsed,
	// has an unknown scheme, or carries unknown or malformed parameters.
	ErrInvalidURL = driver.ErrInvalidURL

	// ErrUnavailable is returned when the server cannot be reached.
	ErrUnavailable = driver.ErrUnavailable

	// ErrAuth is returned when the server refuses the credentials.
	ErrAuth = driver.ErrAuth

	// ErrStaleToken is returned by a fenced write (packages sqlfence and
	// httpfence, redisdlock.Fence, etcddlock.OwnerTxn and FencedTxn,
	// zkdlock.MultiHeld) that was refused
	// because a newer holder's fencing token was recorded first, or because
	// the lease behind it no longer holds its key: the writer lost its
	// lease, perhaps while it was paused, and nothing was written. The
	// error is a *StaleTokenError where the store knows the recorded token.
	ErrStaleToken = errors.New("dlock: stale fencing token")

	// ErrInvalidFence is returned by the fencing guards, wrapped with what
	// is wrong, for an argument they cannot fence with: an empty fence
	// name, token 0, a lease that is nil or of another backend, a write the
	// guard does not run. Nothing is sent to the store.
	ErrInvalidFence = errors.New("dlock: invalid fencing argument")
)
