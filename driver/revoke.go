package driver

import (
	"context"
	"time"
)

// MaxLockDelay is the longest lock-delay a request may carry. A longer one
// would keep a key from everyone for longer than an operator would expect
// to wait after a crash.
const MaxLockDelay = time.Minute

// Revoker is implemented by a Driver that can end other owners' grants on
// the server: an operator's way to remove a holder stuck in a live process
// that renews its lease for ever.
//
// A revoke is not a release by the holder: the holder may still be working
// when the next waiter is granted, until its next contact with the server
// tells it the grant is gone. Two things make that safe to use: the next
// grant's fencing token is greater than the revoked one (tokens of a key
// only go up), so fenced stores refuse the revoked holder's late writes;
// and the revoked entry's lock-delay (AcquireRequest.LockDelay) applies, as
// after an expiry.
type Revoker interface {
	// Revoke ends the grants of key on the server: every holder when
	// token is 0, else only the holder whose fencing token is token.
	// Waiters keep their places, and those the grant rule then admits are
	// granted (after the revoked entries' lock-delay, if any) as after a
	// release. It returns the revoked holders as Inspect would have shown
	// them.
	//
	// A revoked holder learns it at its next contact: its next Renew
	// returns an error satisfying errors.Is(err, ErrNotHeld), or its Lost
	// fires earlier where the backend watches its grant, and its Release
	// returns ErrNotHeld without touching anyone else's grant.
	//
	// When token is not 0 and no holder has it, Revoke changes nothing and
	// returns an error satisfying errors.Is(err, ErrNotHeld). When token is
	// 0 and nobody holds the key, it returns no entries and no error.
	// Revoke is idempotent: a retry after a lost reply revokes nothing more
	// than the first request meant to (a holder granted in between keeps
	// its grant when token is not 0; with token 0 a retry may end it too,
	// which the caller asked for).
	Revoke(ctx context.Context, key string, token uint64) ([]Entry, error)
}
