package dlock

import "context"

// RWMutex is a key that one writer or many readers may hold: "many readers
// of the price table, one writer at a time". Writers and readers wait in
// one queue, in arrival order: a reader that arrives after a waiting writer
// waits behind it, so writers never starve, and the readers at the head of
// the queue are granted together. Each lease has the guarantees of a lock's
// (see Lease), and its fencing token is above every earlier grant's on the
// key, readers' included.
//
// An RWMutex is a handle: it holds nothing by itself, costs nothing to make
// and is safe for concurrent use.
type RWMutex struct {
	c   *Client
	key string
}

// RWMutex returns the read-write lock of key.
func (c *Client) RWMutex(key string) *RWMutex { return &RWMutex{c: c, key: key} }

// Key returns the lock's key.
func (m *RWMutex) Key() string { return m.key }

// Lock takes the key for writing, waiting until no other lease of it is
// held and every earlier waiter has been served, or until ctx ends. Its
// Lease's Mode is Exclusive.
//
// It returns the errors of Client.Lock, and one satisfying
// errors.Is(err, ErrKindMismatch) when the key is in use as a lock or a
// semaphore. When it returns an error it leaves nothing behind on the
// server.
func (m *RWMutex) Lock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.c.acquire(ctx, "lock", m.key, shape{KindRWMutex, 0, Exclusive}, true, opts)
}

// TryLock takes the key for writing if nobody holds or waits for it, and
// otherwise returns at once with an error satisfying errors.Is(err,
// ErrLocked). It returns the same other errors as Lock.
func (m *RWMutex) TryLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.c.acquire(ctx, "lock", m.key, shape{KindRWMutex, 0, Exclusive}, false, opts)
}

// RLock takes the key for reading, waiting until no writer holds it or
// waits ahead of the caller, or until ctx ends. Its Lease's Mode is Shared.
// It returns the same errors as Lock.
func (m *RWMutex) RLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.c.acquire(ctx, "rlock", m.key, shape{KindRWMutex, 0, Shared}, true, opts)
}

// TryRLock takes the key for reading if no writer holds it or waits for
// it, and otherwise returns at once with an error satisfying
// errors.Is(err, ErrLocked). It returns the same other errors as Lock.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...LockOption) (*Lease, error) {
	return m.c.acquire(ctx, "rlock", m.key, shape{KindRWMutex, 0, Shared}, false, opts)
}
