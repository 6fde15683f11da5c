package dlock

import (
	"context"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/internal/lease"
	"github.com/dlockdev/dlock/internal/leasegrant"
)

// Lease is a held lock. It renews itself in the background until Unlock, or
// until it is lost: then Done is closed and Err says why.
//
// A Lease is safe for concurrent use. Holding a Lease does not by itself
// guarantee that nobody else holds the key: a process paused longer than the
// TTL (by a garbage collector, a VM migration, SIGSTOP) wakes up with a Lease
// that the server has already given to someone else. Check Done before each
// step of the protected work and pass Token to every system you write to, so
// that a stale holder's writes can be rejected there. See the package
// documentation, section Safety.
type Lease struct {
	client *Client
	key    string
	token  uint64
	ttl    time.Duration
	kind   Kind
	mode   Mode
	grant  driver.Grant // for what the engine does not do: an election's Publish, the backends' fencing checks
	// metadata is what the lease was granted with, kept by Proclaim.
	metadata Metadata
	eng      *lease.Engine // &engine
	engine   lease.Engine
	// req is the request that acquired the lease; ownerBits are its
	// Owner's, and callCtx its context when it needed one of its own.
	req       driver.AcquireRequest
	ownerBits [16]byte
	callCtx   closedBy
	hold      *minHold // HoldAtLeast's state; nil without it
	granted   time.Time
	// hookCtx is the context AcquireDone returned, for the lease's later
	// hooks; nil when the Client has none for leases.
	hookCtx context.Context
}

// The backends' fencing checks (etcddlock.IsOwner, zkdlock.CheckHeld) read
// from a lease's grant what it holds on the server. The grant stays
// unexported, as the lease engine owns it: a Renew or Release called
// directly would break Done, Err and Unlock.
func init() {
	leasegrant.Of = func(lease any) driver.Grant {
		if l, ok := lease.(*Lease); ok && l != nil {
			return l.grant
		}
		return nil
	}
}

// Mode returns what the lease holds: Exclusive for a lock and a
// RWMutex.Lock, Shared for a RWMutex.RLock and a Semaphore's permit.
func (l *Lease) Mode() Mode { return l.mode }

// Key returns the key this lease holds.
func (l *Lease) Key() string { return l.key }

// Token returns the fencing token: it is strictly greater than the token of
// every earlier lease on the same key. A resource that remembers the highest
// token it has seen and rejects lower ones cannot be written by a holder
// whose lease was lost.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease length the backend granted: the requested TTL, or
// what the backend made of it (on ZooKeeper, the session timeout; on etcd,
// whole seconds).
func (l *Lease) TTL() time.Duration { return l.ttl }

// Done returns a channel that is closed when the lease is lost or released.
// It is closed before the server can grant the key to anybody else.
func (l *Lease) Done() <-chan struct{} { return l.eng.Done() }

// Err returns nil while the lease is held. After Done is closed it returns an
// error satisfying errors.Is with ErrLeaseLost (renewal failed or the server
// dropped the grant), ErrReleased (after Unlock), ErrHoldLimit (released at
// its HoldAtMost) or ErrClosed (after Client.Close).
func (l *Lease) Err() error { return l.eng.Err() }

// Deadline returns the local time until which the lease is known to be held
// even if no renewal succeeds from now on.
func (l *Lease) Deadline() time.Time { return l.eng.Deadline() }

// Unlock releases the key and hands it to the next waiter. It returns an
// error satisfying errors.Is(err, ErrNotHeld) when the lease had already been
// lost, unlocked or released by Client.Close: the work done under it may have overlapped with another
// holder's. Unlock never releases a lock that has passed to someone else.
// Other errors (ErrUnavailable, ctx.Err()) mean the release could not be
// confirmed; the server frees the key when the TTL runs out.
//
// With HoldAtLeast, an Unlock before the minimum hold has passed returns nil
// at once and the release happens in the background when it has passed (see
// HoldAtLeast); a second Unlock then returns ErrNotHeld. After the maximum
// hold (HoldAtMost) released the lease, Unlock returns an error satisfying
// both ErrNotHeld and ErrHoldLimit.
func (l *Lease) Unlock(ctx context.Context) error {
	if deferred, err := l.unlockAfterHold(); deferred {
		return err
	}
	defer l.client.forget(l)
	if err := l.eng.Release(ctx); err != nil {
		return opErr("unlock", l.key, err)
	}
	return nil
}
