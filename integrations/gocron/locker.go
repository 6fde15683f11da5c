package dlockgocron

import (
	"context"

	"github.com/dlockdev/dlock"
	"github.com/go-co-op/gocron/v2"
)

// Locker is a gocron.Locker on dlock. gocron calls Lock with the job's name
// before each run and skips the run when it fails; Locker takes the key
// prefix+name with dlock.NoWait, so that the instances that fire while
// another one runs the job skip it instead of running it after that one.
//
// Pass dlock.HoldAtLeast(d) to keep the key held until d after the run
// started even when the job is quicker (ShedLock's lockAtLeastFor): an
// instance whose clock or scheduler fires up to d late skips too. Choose d
// longer than the instances' clocks disagree and shorter than the job's
// interval.
//
// gocron does not hand the job the lease: a job that must stop when the
// lease is lost (the server unreachable for a TTL) should take the lock
// itself with dlock.Client.Do and dlock.NoWait instead.
type Locker struct {
	client *dlock.Client
	prefix string
	opts   []dlock.LockOption
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker taking keys prefix+job name on client with
// opts (dlock.HoldAtLeast, dlock.WithTTL, dlock.WithMetadata) and
// dlock.NoWait.
func NewLocker(client *dlock.Client, prefix string, opts ...dlock.LockOption) *Locker {
	return &Locker{client: client, prefix: prefix, opts: append(append([]dlock.LockOption(nil), opts...), dlock.NoWait())}
}

// Lock takes the job's key, or fails with an error satisfying
// errors.Is(err, dlock.ErrLocked) when another instance holds it (gocron
// then skips the run and calls the job's AfterLockError listener).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lease, err := l.client.Lock(ctx, l.prefix+key, l.opts...)
	if err != nil {
		return nil, err
	}
	return lock{lease}, nil
}

type lock struct{ l *dlock.Lease }

// Unlock releases the key, or, inside the minimum hold, has the Client
// release it when the hold ends.
func (k lock) Unlock(ctx context.Context) error { return k.l.Unlock(ctx) }
