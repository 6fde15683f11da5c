package driver

import "errors"

// Error messages: each detail has one owner, so that a message says it once.
//
//   - Package dlock owns the operation and its subject, which it puts first:
//     `lock "k": `, `unlock "k": `, `inspect "k": `, `list "p": `, and
//     `lease "k": ` for Lease.Err, which is read without the context of a
//     call. For a bad backend URL it is `open "URL": ` (passwords hidden):
//     Open owns the URL, so no driver formats it, nor can leak a password
//     through it. Errors from the server at Open carry no prefix: the
//     driver names the server, which is what the user must check.
//   - The sentinel owns the category: its text ("dlock: key is locked by
//     another owner") is printed once, by %w, and nobody paraphrases it.
//   - A driver adds, after the sentinel, only what only it knows: the
//     server and its address where it matters (unreachable, refusing the
//     credentials, an unexpected reply), the holder's remaining TTL, how
//     many wait, the server's reply, and the cause, wrapped with %w so that
//     errors.Is and errors.As reach it. It never repeats the key (not even
//     inside a server-side name such as a node path) nor the sentinel's
//     words, and names an operation only when it is a step of its own
//     ("renew", "subscribe", "create a lock node"), not the call that
//     package dlock names already.
//
// So a driver returns
//
//	fmt.Errorf("%w: expires in %v unless renewed", driver.ErrLocked, ttl)
//
// and the application sees
//
//	lock "k": dlock: key is locked by another owner: expires in 9.8s unless renewed
//
// A driver error with no sentinel (an unexpected reply) starts with the
// server: `redis at 127.0.0.1:6379: renew: unexpected reply [1]`. The
// golden files testdata/errors.golden of each backend pin the result.
//
// The errors below are re-exported by package dlock under the same names;
// drivers wrap them with details (by the rule above) so that errors.Is works
// for applications.
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
