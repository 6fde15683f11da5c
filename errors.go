package dlock

import (
	"errors"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
	"github.com/dlockdev/dlock/internal/lease"
)

// Errors returned by dlock and its backends. They are wrapped with details
// (the key, the address) where they are raised: test for them with errors.Is.
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

	// ErrClosed is returned by calls on a closed Client, and is the Err of
	// leases that Close released.
	ErrClosed = errors.New("dlock: client closed")

	// ErrInvalidKey is returned for an empty key, a key longer than
	// MaxKeyLen bytes, or a key that is not UTF-8 or has control characters.
	ErrInvalidKey = keys.ErrInvalid

	// ErrInvalidOption is returned for an option value out of range.
	ErrInvalidOption = errors.New("dlock: invalid option")

	// ErrInvalidURL is returned by Open for a URL that cannot be parsed,
	// has an unknown scheme, or carries unknown or malformed parameters.
	ErrInvalidURL = driver.ErrInvalidURL

	// ErrUnavailable is returned when the server cannot be reached.
	ErrUnavailable = driver.ErrUnavailable

	// ErrAuth is returned when the server refuses the credentials.
	ErrAuth = driver.ErrAuth
)
