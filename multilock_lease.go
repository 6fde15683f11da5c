package dlock

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
)

// MultiLease is the set of locks that LockAll or TryLockAll took together:
// one Lease per key, each renewed in the background and lost on its own.
// Done closes as soon as any of them ends, so that work that needs all the
// keys can stop; the others stay held until Unlock, which releases them
// all. Call Unlock after Done closes too.
//
// Everything said of Lease holds for each lease: check Done before each
// step of the protected work and pass each key's Token to the system that
// key protects. A MultiLease is safe for concurrent use.
type MultiLease struct {
	leases []*Lease // in the caller's key order

	done chan struct{}
	mu   sync.Mutex
	err  error // non-nil once done is closed; guarded by mu
}

func newMultiLease(leases []*Lease) *MultiLease {
	m := &MultiLease{leases: leases, done: make(chan struct{})}
	go m.watch()
	return m
}

// watch closes done when the first lease ends. It is one goroutine per
// MultiLease, gone at that moment: Unlock, Close or a loss end it.
func (m *MultiLease) watch() {
	cases := make([]reflect.SelectCase, len(m.leases))
	for i, l := range m.leases {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.Done())}
	}
	i, _, _ := reflect.Select(cases)
	m.end(m.leases[i].Err())
}

// end records why the first lease ended and closes done, once.
func (m *MultiLease) end(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil && err != nil {
		m.err = err
		close(m.done)
	}
}

// poll ends m if a lease has ended without watch having seen it yet: each
// lease compares the clock with its deadline when asked, so a caller that
// checks Done or Err observes a loss even when watch has not been
// scheduled since (on a loaded machine, possibly not before the server
// frees the key).
func (m *MultiLease) poll() {
	for _, l := range m.leases {
		if err := l.Err(); err != nil {
			m.end(err)
			return
		}
	}
}

// Leases returns the leases, one per key, in the order of the keys given to
// LockAll or TryLockAll (not the order in which they were taken). The slice
// is the caller's to keep.
func (m *MultiLease) Leases() []*Lease { return slices.Clone(m.leases) }

// Done returns a channel that is closed when any of the leases is lost or
// released, before the server can grant that key to anybody else.
func (m *MultiLease) Done() <-chan struct{} {
	m.poll()
	return m.done
}

// Err returns nil while every lease is held. After Done is closed it
// returns the Err of the first lease that ended, which names its key and
// satisfies errors.Is with ErrLeaseLost or ErrClosed (after Client.Close);
// or ErrReleased after Unlock when no lease had ended before it.
func (m *MultiLease) Err() error {
	m.poll()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Unlock releases every lease, all at once, and hands each key to its next
// waiter. It returns the errors of the leases' Unlock joined, each naming
// its key: one satisfying errors.Is(err, ErrNotHeld) for a lease that had
// already been lost, unlocked or released by Client.Close (the work done
// under it may have overlapped with another holder's), others (ErrUnavailable,
// ctx.Err()) for releases the server did not confirm, which it undoes when
// the lease's TTL runs out. The other leases are released either way.
func (m *MultiLease) Unlock(ctx context.Context) error {
	// A lease lost before Unlock stays the reason, rather than ErrReleased;
	// and Done closes before the first key is let go, as Lease.Unlock's.
	m.poll()
	m.end(ErrReleased)
	errs := make([]error, len(m.leases))
	var wg sync.WaitGroup
	for i, l := range m.leases {
		wg.Go(func() { errs[i] = l.Unlock(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
