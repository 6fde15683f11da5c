package dlock

import "github.com/dlockdev/dlock/driver"

// Kind is the primitive a key serves: a lock (Client.Lock), a semaphore
// (Client.Semaphore), a read-write lock (Client.RWMutex) or an election
// (Client.Election). All four share one fair queue per key, whose entries
// carry a Mode; see the package documentation, section Primitives. A key
// serves one kind, with one limit, while anybody holds or waits for it: a
// call of another kind fails with ErrKindMismatch.
type Kind = driver.Kind

// The kinds of keys.
const (
	KindLock      = driver.KindLock      // Client.Lock, TryLock and Do
	KindSemaphore = driver.KindSemaphore // Client.Semaphore
	KindRWMutex   = driver.KindRWMutex   // Client.RWMutex
	KindElection  = driver.KindElection  // Client.Election
)

// Mode is what a lease holds, or a waiter waits for.
type Mode = driver.Mode

// The modes of leases.
const (
	// Exclusive: a lock, or a RWMutex's writer. No other lease of the key
	// is valid at the same time.
	Exclusive = driver.Exclusive
	// Shared: a RWMutex's reader, or one of a Semaphore's permits. Shared
	// leases of a key may be valid together (a semaphore's, up to its
	// limit).
	Shared = driver.Shared
)
