package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/keys"
)

// MaxLockDelay is the longest lock-delay WithLockDelay accepts. A longer
// one would keep a key from everyone for longer than an operator would
// expect to wait after a crash.
const MaxLockDelay = driver.MaxLockDelay

type lockDelayOption time.Duration

func (o lockDelayOption) applyLock(c *lockConfig) error {
	d := time.Duration(o)
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock-delay %v is outside [0, %v]", ErrInvalidOption, d, MaxLockDelay)
	}
	c.lockDelay = d
	return nil
}

func (o lockDelayOption) applyClient(c *clientConfig) error { return o.applyLock(&c.lock) }

// WithLockDelay sets the lease's lock-delay: after its grant ends other
// than by Unlock (its lease expired on the server, its session ended, or
// Client.Revoke ended it), the key is granted to nobody else until d has
// passed. It gives a holder that lost its lease without knowing it (a
// paused process, one cut off from the server) time to notice before the
// next holder starts. Meanwhile the ended lease keeps its place as a
// holder: a semaphore's permit or a reader's share stays taken too. An
// Unlock never starts a delay. Default 0 (none); it must lie within
// [0, MaxLockDelay], else ErrInvalidOption.
//
// How the delay is counted depends on the backend: by the server's clock
// from the grant's end on Redis and memdlock; from the moment the next
// holder's client learned that the lease was gone on ZooKeeper and etcd
// (never earlier than its end). A backend that cannot keep a delay (one
// whose driver does not implement driver.Revoker) refuses a lock with a
// lock-delay above 0 with an error satisfying errors.Is(err,
// errors.ErrUnsupported).
func WithLockDelay(d time.Duration) CommonOption { return lockDelayOption(d) }

// RevokeOption configures one Client.Revoke call.
type RevokeOption interface {
	applyRevoke(*revokeConfig) error
}

type revokeConfig struct {
	token uint64 // 0: every holder
}

type revokeTokenOption uint64

func (o revokeTokenOption) applyRevoke(c *revokeConfig) error {
	if o == 0 {
		// 0 is never a token; taken for "every holder" it would revoke
		// more than the caller named.
		return fmt.Errorf("%w: fencing token 0 names no holder", ErrInvalidOption)
	}
	c.token = uint64(o)
	return nil
}

// RevokeToken makes Client.Revoke end only the grant whose fencing token
// (Lease.Token, Entry.Token) is token, instead of every holder's: the way
// to remove one stuck holder of a semaphore or of a read-write lock's
// readers, or to be sure of revoking the holder one saw in Inspect and
// not a later one. Token 0 is refused with ErrInvalidOption.
func RevokeToken(token uint64) RevokeOption { return revokeTokenOption(token) }

// Revoke ends the grants of key on the server, as an operator's way to
// remove a holder stuck in a live process that renews its lease for ever:
// every holder's, or with RevokeToken only that of the holder with the
// given fencing token. It returns the revoked holders as Inspect showed
// them; none, and no error, when nobody holds the key. Waiters keep their
// places and are granted as after an Unlock, once the revoked leases'
// lock-delays (WithLockDelay) have passed.
//
// A revoke does NOT stop the holder's process. Its Lease learns of the
// revoke at its next contact with the server (a renewal, at most about a
// third of its TTL later, or earlier where the backend watches its grant):
// then its Done closes, its Err satisfies errors.Is(err, ErrLeaseLost),
// and its Unlock returns ErrNotHeld. Until then it may still be working,
// beside the next holder. The next grant's fencing token is above the
// revoked one, so a fenced resource refuses the revoked holder's late
// writes; and a lock-delay on the revoked lease keeps the key from the
// next holder meanwhile. Revoke only what is fenced or delayed, or known
// to be dead.
//
// It returns an error satisfying errors.Is with ErrInvalidKey for a bad
// key, ErrInvalidOption for a bad option, ErrNotHeld when RevokeToken
// names no current holder (nothing is then changed), errors.ErrUnsupported
// when the backend cannot revoke, ErrClosed after Close, ErrUnavailable
// when the server cannot be reached or its reply was lost (a retry is
// safe: Revoke is idempotent), or ctx.Err() wrapped.
func (c *Client) Revoke(ctx context.Context, key string, opts ...RevokeOption) ([]Entry, error) {
	if err := keys.Validate(key); err != nil {
		return nil, opErr("revoke", key, err)
	}
	var cfg revokeConfig
	for _, o := range opts {
		if err := o.applyRevoke(&cfg); err != nil {
			return nil, opErr("revoke", key, err)
		}
	}
	if err := c.checkOpen(); err != nil {
		return nil, opErr("revoke", key, err)
	}
	r, ok := c.drv.(driver.Revoker)
	if !ok {
		return nil, opErr("revoke", key, errUnsupportedRevoke)
	}
	revoked, err := r.Revoke(ctx, key, cfg.token)
	if err != nil {
		return nil, opErr("revoke", key, err)
	}
	out := make([]Entry, len(revoked))
	for i, e := range revoked {
		out[i] = convertEntry(e)
	}
	return out, nil
}

var (
	errUnsupportedRevoke    = fmt.Errorf("%w: the backend cannot revoke grants", errors.ErrUnsupported)
	errUnsupportedLockDelay = fmt.Errorf("%w: the backend cannot keep a lock-delay", errors.ErrUnsupported)
)

// checkLockDelay refuses a lock-delay on a driver that would not keep it:
// a lock that silently ran without its delay would let the next holder
// start beside a paused one the caller meant to protect against.
func checkLockDelay(d driver.Driver, cfg *lockConfig) error {
	if cfg.lockDelay == 0 {
		return nil
	}
	if _, ok := d.(driver.Revoker); !ok {
		return errUnsupportedLockDelay
	}
	return nil
}
