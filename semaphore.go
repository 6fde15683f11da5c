package dlock

import "context"

// Semaphore is a key that up to a limit of holders may hold at once: "at
// most 3 exports run at the same time across the fleet". Each holder holds
// one permit, as a Lease with the same guarantees as a lock's: renewed in
// the background, Done closed before the server can give the permit to
// anybody else, returned within its TTL when the holder dies, a fencing
// token above every earlier grant's on the key. Permits are granted in
// arrival order.
//
// A Semaphore is a handle: it holds nothing by itself, costs nothing to
// make and is safe for concurrent use. Every Semaphore of a key must have
// the same limit while anybody holds or waits for it (see ErrKindMismatch).
type Semaphore struct {
	c     *Client
	key   string
	limit int
}

// Semaphore returns the semaphore of key with limit permits. A limit below
// 1 is reported by Acquire and TryAcquire, with ErrInvalidOption.
func (c *Client) Semaphore(key string, limit int) *Semaphore {
	return &Semaphore{c: c, key: key, limit: limit}
}

// Key returns the semaphore's key.
func (s *Semaphore) Key() string { return s.key }

// Limit returns the number of permits.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire takes one permit, waiting until one is free and every earlier
// waiter has been served, or until ctx ends. Its Lease's Mode is Shared.
//
// It returns the errors of Client.Lock, and one satisfying
// errors.Is(err, ErrKindMismatch) when the key is in use as a lock, a
// read-write lock or a semaphore of another limit. When it returns an
// error it leaves nothing behind on the server.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return s.c.acquire(ctx, "acquire", s.key, s.shape(), true, opts)
}

// TryAcquire takes one permit if one is free and nobody waits, and
// otherwise returns at once with an error satisfying errors.Is(err,
// ErrLocked). It returns the same other errors as Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return s.c.acquire(ctx, "acquire", s.key, s.shape(), false, opts)
}

func (s *Semaphore) shape() shape { return shape{KindSemaphore, s.limit, Shared} }
