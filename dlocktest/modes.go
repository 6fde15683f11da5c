package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dlockdev/dlock"
)

// Helpers of the scenarios of semaphores and read-write locks, which order
// several contenders of one key and check the queue between steps.
//
// The queue is observed with Inspect, and the scenarios rely on what the
// grant rule makes of it: an entry that the rule admits is a holder as
// soon as it is on the server (its client may learn of the grant a moment
// later, but Inspect must not show it waiting), and once a release, a
// cancelled Acquire or Client.Close has returned, the server has granted
// every waiter that the release made grantable. So the suite checks the
// queue right after such a step, without waiting for it to settle: a
// backend that grants only one permit at a time, or that lets a reader
// pass a waiting writer, fails at once rather than at the watchdog.

// acquirer is one of the calls that take a lease of a key: a Semaphore's
// Acquire or TryAcquire, a RWMutex's Lock, TryLock, RLock or TryRLock, or
// Client.Lock bound to its key (lockOf).
type acquirer func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error)

// lockOf returns Client.Lock of key as an acquirer.
func lockOf(c *dlock.Client, key string) acquirer {
	return func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
		return c.Lock(ctx, key, opts...)
	}
}

// tryLockOf returns Client.TryLock of key as an acquirer.
func tryLockOf(c *dlock.Client, key string) acquirer {
	return func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
		return c.TryLock(ctx, key, opts...)
	}
}

// noted names an entry, so that Inspect can tell it from the others.
func noted(name string) dlock.LockOption {
	return dlock.WithMetadata(dlock.Metadata{Note: name})
}

// pending is an acquire running in the background.
type pending struct {
	name  string
	done  chan struct{} // closed when the call has returned
	lease *dlock.Lease  // the call's results, set before done is closed
	err   error
}

// start runs acquire in the background with ctx, the suite's TTL and the
// note name.
func (s *suite) start(ctx context.Context, name string, acquire acquirer) *pending {
	p := &pending{name: name, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.lease, p.err = acquire(ctx, s.ttl(), noted(name))
	}()
	return p
}

// arrive starts acquire as start does, with the suite's context, and
// returns once the server has queued it (as a holder or a waiter): the
// arrival order is then the order of the arrive calls. An acquire that
// fails is fatal.
func (s *suite) arrive(c *dlock.Client, key, name string, acquire acquirer) *pending {
	s.t.Helper()
	return s.arriveCtx(s.ctx, c, key, name, acquire)
}

// arriveCtx is arrive with ctx for the acquire, which the caller may
// cancel.
func (s *suite) arriveCtx(ctx context.Context, c *dlock.Client, key, name string, acquire acquirer) *pending {
	s.t.Helper()
	p := s.start(ctx, name, acquire)
	s.awaitQueued(c, key, name, p.done)
	select {
	case <-p.done:
		if p.err != nil {
			s.t.Fatalf("%s: %v", name, p.err)
		}
	default:
	}
	return p
}

// awaitQueued returns once name is queued on key, as a holder or a waiter,
// or its call has returned (done is closed): the background acquires and
// campaigns share it, so that the arrival order is the order of the calls.
func (s *suite) awaitQueued(c *dlock.Client, key, name string, done <-chan struct{}) {
	s.t.Helper()
	s.eventually(name+" queued on "+key, func() bool {
		select {
		case <-done:
			return true
		default:
		}
		info := s.inspect(c, key)
		return slices.Contains(notes(info.Holders), name) || slices.Contains(notes(info.Waiters), name)
	})
}

// granted waits for p's lease, failing the test at the watchdog or if p
// failed.
func (s *suite) granted(p *pending) *dlock.Lease {
	s.t.Helper()
	select {
	case <-p.done:
	case <-s.ctx.Done():
		s.t.Fatalf("%s not granted (watchdog)", p.name)
	}
	if p.err != nil {
		s.t.Fatalf("%s: %v", p.name, p.err)
	}
	return p.lease
}

// failed waits for p to return and returns its error, failing the test
// if p was granted.
func (s *suite) failed(p *pending) error {
	s.t.Helper()
	select {
	case <-p.done:
	case <-s.ctx.Done():
		s.t.Fatalf("%s has not returned (watchdog)", p.name)
	}
	if p.err == nil {
		s.t.Fatalf("%s was granted (token %d), want an error", p.name, p.lease.Token())
	}
	return p.err
}

// grantedOrCanceled waits for p, whose context is canceled in a race
// with its grant, to return: either outcome is right, any other error
// fails the test. when names the step of the scenario.
func (s *suite) grantedOrCanceled(p *pending, when string) {
	s.t.Helper()
	select {
	case <-p.done:
		if p.err != nil && !errors.Is(p.err, context.Canceled) {
			s.t.Fatalf("%s: %s: %v", when, p.name, p.err)
		}
	case <-s.ctx.Done():
		s.t.Fatalf("%s: %s has not returned (watchdog)", when, p.name)
	}
}

// waiting fails the test if any of ps has returned: they must still wait.
// It tells a backend's state from its clients' view; the queue itself is
// checked with expectQueue.
func (s *suite) waiting(ps ...*pending) {
	s.t.Helper()
	for _, p := range ps {
		select {
		case <-p.done:
			if p.err != nil {
				s.t.Fatalf("%s returned while it should wait: %v", p.name, p.err)
			}
			s.t.Fatalf("%s was granted (token %d) while it should wait", p.name, p.lease.Token())
		default:
		}
	}
}

// expectQueue fails the test unless the key's holders (in grant order)
// and waiters (in arrival order) are, by their notes, holders and
// waiters. when says at which step of the scenario.
func (s *suite) expectQueue(c *dlock.Client, key, when string, holders, waiters []string) *dlock.LockInfo {
	s.t.Helper()
	info := s.inspect(c, key)
	gotH, gotW := notes(info.Holders), notes(info.Waiters)
	if !slices.Equal(gotH, holders) || !slices.Equal(gotW, waiters) {
		s.t.Fatalf("%s: holders %q, waiters %q; want holders %q, waiters %q", when, gotH, gotW, holders, waiters)
	}
	return info
}

// expectErr fails the test unless err satisfies errors.Is(err, want).
func (s *suite) expectErr(what string, err, want error) {
	s.t.Helper()
	if !errors.Is(err, want) {
		s.t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// held calls acquire, which must be granted at once (TryAcquire, TryLock,
// TryRLock, or a call the key admits), with the suite's TTL and the note
// name.
func (s *suite) held(name string, acquire acquirer) *dlock.Lease {
	s.t.Helper()
	l, err := acquire(s.ctx, s.ttl(), noted(name))
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	return l
}

// tokenAbove fails the test unless l's token is above every one of
// earlier's.
func (s *suite) tokenAbove(what string, l *dlock.Lease, earlier ...*dlock.Lease) {
	s.t.Helper()
	for _, e := range earlier {
		if l.Token() <= e.Token() {
			s.t.Fatalf("%s: token %d not above %d of an earlier grant", what, l.Token(), e.Token())
		}
	}
}

func notes(entries []dlock.Entry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Metadata.Note)
	}
	return out
}

// seq returns prefix0 … prefix(n-1).
func seq(prefix string, from, to int) []string {
	out := []string{}
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}
