package memdlock

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockdev/dlock/driver"
	"github.com/dlockdev/dlock/driver/queue"
)

// lastToken is the last fencing token given, in any space: one counter for
// the process keeps every key's tokens increasing with no record per key,
// even across a space that was freed and opened again by its name, while a
// fenced store may still remember the tokens of its first life.
var lastToken atomic.Uint64

// space is one lock space: the keys' queues, the fencing tokens and the
// clock, shared by the clients that joined it.
type space struct {
	name  string
	clock *Clock // nil: real time

	mu       sync.Mutex
	clients  int
	keys     map[string]*keyState               // keys held or waited for
	watchers map[string]map[chan struct{}]*conn // Observer's, by key, with their client
}

func newSpace(name string, clock *Clock) *space {
	return &space{name: name, clock: clock, keys: map[string]*keyState{}, watchers: map[string]map[chan struct{}]*conn{}}
}

// keyState is one key's queue: holders first, then waiters, in arrival
// order.
type keyState struct {
	key   string
	label string
	kind  driver.Kind
	limit int
	q     []*entry
}

// entry is a holder or a waiter.
type entry struct {
	c        *conn
	k        *keyState // its key's queue
	owner    string
	mode     driver.Mode
	metadata []byte
	ttl      time.Duration
	since    time.Time

	granted bool
	token   uint64
	at      time.Time // the grant, on the real clock: its validity counts from it
	expires time.Time
	// stop stops the expiry timer: a holder's, or a waiter's while the
	// space does not hear from it (see armWaiter).
	stop    func()
	ready   chan struct{} // closed at the grant
	expired chan struct{} // closed when a waiter's entry expires
	lost    chan error    // receives why a holder was dropped
	onLost  func(error)   // called with it instead, once set (grant.AfterLost)
	gone    bool          // left the queue
	// queued: a waiter whose arrival the key's watchers were told of, so
	// they are told of its leaving too (a failed TryLock's entry is
	// neither).
	queued bool
	// abandoned: nobody renews it or waits for it any more (its lease's
	// driver.Abandoner, or an Acquire that gave up while cut off), so it
	// expires on its TTL, also on a fake clock.
	abandoned bool

	// delay is the entry's lock-delay (AcquireRequest.LockDelay).
	delay time.Duration
	// ended: a holder whose grant ended other than by release (expired,
	// revoked) and which keeps its place until endsAt, its lock-delay
	// after the end (see queue, "Lock-delay"). Renew and Release see it
	// as gone.
	ended  bool
	endsAt time.Time

	waited  bool       // planned a wait at least once
	plan    queue.Plan // the current wait
	targets []*entry   // what the plan waits for
}

func (s *space) now() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock.Now()
}

func (s *space) afterFunc(d time.Duration, f func()) func() {
	if s.clock == nil {
		t := time.AfterFunc(d, f)
		return func() { t.Stop() }
	}
	return s.clock.afterFunc(d, f)
}

// listing is what entry e knows of the entries ahead of it: all of them.
func (k *keyState) listing(e *entry) ([]*entry, queue.Listing) {
	i := slices.Index(k.q, e)
	ahead := k.q[:i]
	l := queue.Listing{Ahead: make([]queue.Entry, len(ahead)), Complete: true, Mode: e.mode, Label: k.label, Limit: k.limit}
	for j, a := range ahead {
		l.Ahead[j] = queue.Entry{Mode: a.mode, Label: k.label}
	}
	return ahead, l
}

// plan decides e's wait, granting it if the rule does. s.mu is held.
func (s *space) plan(k *keyState, e *entry) {
	ahead, l := k.listing(e)
	p := queue.Decide(l)
	switch p.Verdict {
	case queue.Granted:
		s.grant(k, e, p)
		return
	case queue.WaitFor:
		e.targets = []*entry{ahead[p.Target]}
	case queue.WaitAny:
		e.targets = slices.Clone(ahead[:p.Any])
	default:
		// A complete listing of one kind decides: nothing else to read.
		panic("memdlock: planner: " + p.Verdict.String() + " on a complete listing")
	}
	e.plan, e.waited = p, true
}

// grant makes e a holder. s.mu is held.
func (s *space) grant(k *keyState, e *entry, p queue.Plan) {
	e.granted, e.token, e.targets, e.at = true, lastToken.Add(1), nil, time.Now()
	if e.stop != nil {
		e.stop() // a waiter's expiry
	}
	e.expires = s.now().Add(e.ttl)
	e.stop = s.afterFunc(e.ttl, func() { s.expire(k, e) })
	close(e.ready)
	if e.waited && p.Notify {
		// The grant notice that a waiter behind may wait for.
		s.event(k, e, false, true)
	}
	s.changed(k.key)
}

// event serves the waiters whose plans wait on e: e left the queue (left,
// as a release when released) or wrote its grant notice. Each is granted
// when its plan says the event proves it, and plans again otherwise.
// s.mu is held.
func (s *space) event(k *keyState, e *entry, released, notice bool) {
	for _, w := range slices.Clone(k.q) {
		if w.granted || w.gone || !slices.Contains(w.targets, e) {
			continue
		}
		p := w.plan
		proven := false
		switch {
		case notice:
			// A grant notice proves nothing by itself: plan again.
		case p.Verdict == queue.WaitAny:
			// Any of the first waiter's holders gone grants it.
			proven = true
		case p.Delete:
			proven = true
		case released && (p.Release || (p.ExclusiveRelease && e.mode == driver.Exclusive)):
			proven = true
		}
		if proven {
			s.grant(k, w, p)
			continue
		}
		s.plan(k, w)
	}
}

// remove takes e out of its key's queue and serves the waiters that
// waited on it. s.mu is held. It reports whether the key is now free.
func (s *space) remove(k *keyState, e *entry, released bool) bool {
	i := slices.Index(k.q, e)
	if i < 0 {
		return false
	}
	k.q = slices.Delete(k.q, i, i+1)
	e.gone = true
	if e.stop != nil {
		e.stop()
	}
	s.event(k, e, released && e.granted, false)
	if e.granted || e.queued {
		s.changed(k.key)
	}
	if len(k.q) == 0 {
		delete(s.keys, k.key)
		return true
	}
	return false
}

// drop ends holder e's grant for a reason its lease learns through
// Lost; end is when the grant ended by the space's clock, from which its
// lock-delay counts. Without a delay e leaves the queue at once; with one
// it stays there, as a holder to the planner, until the delay is over.
// s.mu is held. It reports whether the key is now free.
func (s *space) drop(k *keyState, e *entry, reason error, end time.Time) bool {
	if e.gone || e.ended {
		return false
	}
	if e.delay == 0 {
		free := s.remove(k, e, false)
		e.tellLost(reason)
		return free
	}
	e.ended, e.endsAt = true, end.Add(e.delay)
	if e.stop != nil {
		e.stop()
	}
	e.stop = s.afterFunc(e.endsAt.Sub(s.now()), func() { s.endDelay(k, e) })
	e.tellLost(reason)
	s.changed(k.key)
	return false
}

// endDelay takes ended entry e out of the queue once its lock-delay is
// over, granting the waiters it kept out.
func (s *space) endDelay(k *keyState, e *entry) {
	s.mu.Lock()
	free := s.remove(k, e, false)
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
}

// tellLost tells holder e's lease why it was dropped: on its Lost
// channel, or to its AfterLost function. s.mu is held.
func (e *entry) tellLost(reason error) {
	if e.onLost != nil {
		go e.onLost(reason)
		return
	}
	e.lost <- reason
}

// expire drops holder e if its validity has run out without renewal.
func (s *space) expire(k *keyState, e *entry) {
	s.mu.Lock()
	free := false
	if !e.gone && s.clock != nil && !e.abandoned && !e.c.frozen.Load() && !e.c.closed.Load() && e.c.back == nil {
		// On a fake clock, a live client's renewals would have come in
		// the time Advance skipped: only frozen and abandoned leases end.
		e.expires = s.now().Add(e.ttl)
		e.stop = s.afterFunc(e.ttl, func() { s.expire(k, e) })
	} else if !e.gone && !e.ended && !s.now().Before(e.expires) {
		// The delay counts from the deadline the space kept, not from
		// this timer's run.
		free = s.drop(k, e, errExpired, e.expires)
	}
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
}

// errExpired is why a holder that was not renewed in time is dropped.
var errExpired = errors.New("not renewed within its TTL")

// armWaiter starts the expiry of waiter e, which the space no longer hears
// from (its client is cut off, or its Acquire gave up then): a server
// drops such an entry one TTL later, as a holder's without renewals, so
// that it holds up nobody for longer. s.mu is held.
func (s *space) armWaiter(e *entry) {
	if e.stop != nil {
		e.stop()
	}
	e.expires = s.now().Add(e.ttl)
	e.stop = s.afterFunc(e.ttl, func() { s.expireWaiter(e) })
}

// expireWaiter drops waiter e if the space has still not heard from it.
func (s *space) expireWaiter(e *entry) {
	s.mu.Lock()
	free := false
	if !e.gone && !e.granted && (e.abandoned || e.c.back != nil) && !s.now().Before(e.expires) {
		free = s.remove(e.k, e, false)
		close(e.expired)
	}
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
}

// changed wakes the watchers of key, except those of clients cut off (they
// hear of it when they are back). s.mu is held.
func (s *space) changed(key string) {
	for ch, c := range s.watchers[key] {
		if c.back != nil {
			continue
		}
		select {
		case ch <- struct{}{}:
		default: // a full buffer says "changed" already
		}
	}
}

// info returns a snapshot of k. s.mu is held.
func (s *space) info(key string) *driver.LockInfo {
	k := s.keys[key]
	if k == nil {
		return &driver.LockInfo{Key: key, Kind: driver.KindLock, Limit: 1}
	}
	in := &driver.LockInfo{Key: key, Kind: k.kind, Limit: k.limit}
	now := s.now()
	for _, e := range k.q {
		out := driver.Entry{Metadata: slices.Clone(e.metadata), Since: e.since, TTL: -1, Mode: e.mode, LockDelay: e.delay}
		if e.granted {
			out.Token, out.TTL = e.token, e.expires.Sub(now)
			if e.ended {
				// Nothing renews it: it leaves when the delay ends.
				out.TTL = max(e.endsAt.Sub(now), 0)
				if e.endsAt.After(in.DelayedUntil) {
					in.DelayedUntil = e.endsAt
				}
			}
			in.Holders = append(in.Holders, out)
		} else {
			in.Waiters = append(in.Waiters, out)
		}
	}
	return in
}

// list returns the snapshots of the keys that start with prefix.
func (s *space) list(prefix string) []*driver.LockInfo {
	var out []*driver.LockInfo
	for key := range s.keys {
		if strings.HasPrefix(key, prefix) {
			out = append(out, s.info(key))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
