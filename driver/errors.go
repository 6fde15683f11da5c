package driver

import "errors"

// The errors below are re-exported by package dlock under the same names;
// drivers wrap them with details (fmt.Errorf("%w: ...", ErrLocked)) so that
// errors.Is works for applications.
var (
	// ErrLocked: the key is held by another owner (TryLock).
	ErrLocked = errors.New("dlock: key is locked by another owner")
	// ErrNotHeld: the caller no longer owns the key it tries to renew or release.
	ErrNotHeld = errors.New("dlock: lock not held")
	// ErrLeaseLost: a held lease ended without Unlock.
	ErrLeaseLost = errors.New("dlock: lease lost")
	// ErrUnavailable: the server cannot be reached or does not answer.
	ErrUnavailable = errors.New("dlock: server unavailable")
	// ErrAuth: the server refused the credentials.
	ErrAuth = errors.New("dlock: authentication failed")
	// ErrInvalidURL: a backend URL cannot be parsed or names unknown options.
	ErrInvalidURL = errors.New("dlock: invalid backend URL")
)
