package memdlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/driver"
)

func init() { dlock.RegisterScheme("mem", open) }

// Options configure New. The zero value (or nil) is a client of a lock
// space of its own, on the real clock.
type Options struct {
	// Space names the lock space the client joins: clients of the same
	// Space in one process, and those opened with dlock.Open on
	// "mem://" + Space, share keys. Empty: a space of the client's own
	// (Handle.NewClient adds clients to it).
	Space string
	// Clock is the fake clock the space counts its leases' TTLs on; nil
	// for the real one. The first client of a named space sets it; a
	// later client that gives another one is refused.
	Clock *Clock
}

// ErrClockDiffers: New joins a named space that counts time on another
// clock than Options.Clock.
var ErrClockDiffers = errors.New("memdlock: the space runs on another clock")

// New returns a Client of an in-memory lock space, and the Handle that
// drives its faults in tests. opts may be nil; copts are the Client's
// options, as for dlock.Open. It returns ErrClockDiffers, or dlock's
// ErrInvalidOption for a bad option.
func New(opts *Options, copts ...dlock.Option) (*dlock.Client, *Handle, error) {
	if opts == nil {
		opts = &Options{}
	}
	s, err := join(opts.Space, opts.Clock)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: space %q", err, opts.Space)
	}
	return s.newClient(copts)
}

func (s *space) newClient(copts []dlock.Option) (*dlock.Client, *Handle, error) {
	c := &conn{s: s}
	cl, err := dlock.NewClient(c, copts...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return cl, &Handle{c: c}, nil
}

// open serves dlock.Open for mem://NAME: NAME is the space, the host part
// of the URL; nothing else may be given.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	if u.User != nil || u.Port() != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: mem:// takes a space name only (mem://NAME)", driver.ErrInvalidURL)
	}
	s, err := join(u.Hostname(), nil)
	if err != nil {
		return nil, err
	}
	return &conn{s: s}, nil
}

// Handle drives one client's faults, for tests. It is safe for concurrent
// use.
type Handle struct {
	c *conn
}

// NewClient returns another client of the same space, as another process
// would have, with its own Handle.
func (h *Handle) NewClient(copts ...dlock.Option) (*dlock.Client, *Handle, error) {
	s := h.c.s
	if s.name != "" {
		// The space of that name now: s itself while anybody uses it.
		var err error
		if s, err = join(s.name, s.clock); err != nil {
			return nil, nil, err
		}
	} else {
		s.mu.Lock()
		s.clients++
		s.mu.Unlock()
	}
	return s.newClient(copts)
}

// Clock returns the fake clock of the client's space, or nil when the
// space runs on the real clock.
func (h *Handle) Clock() *Clock { return h.c.s.clock }

// LoseLease drops the client's leases on key as if they had expired on
// the server: each lease's Done closes, its Err satisfies
// errors.Is(err, dlock.ErrLeaseLost), and the waiters behind are served.
// It reports whether the client held key.
func (h *Handle) LoseLease(key string) bool {
	s := h.c.s
	s.mu.Lock()
	k, dropped, free := s.keys[key], false, false
	if k != nil {
		for _, e := range append([]*entry(nil), k.q...) {
			if e.c == h.c && e.granted {
				free = s.drop(k, e, errLostOnPurpose, s.now()) || free
				dropped = true
			}
		}
	}
	s.mu.Unlock()
	if free {
		s.forgetIfUnused()
	}
	return dropped
}

// errLostOnPurpose is why LoseLease drops a lease.
var errLostOnPurpose = errors.New("dropped by memdlock's Handle.LoseLease")

// DeleteKey removes key's holders and waiters from the space behind
// everybody's back, as an operator might on a server: holders lose their
// leases, and waiters queue again.
func (h *Handle) DeleteKey(key string) {
	s := h.c.s
	s.mu.Lock()
	s.clear(key, errDeleted)
	s.mu.Unlock()
	s.forgetIfUnused()
}

// errDeleted is why DeleteKey drops a lease.
var errDeleted = errors.New("key deleted by memdlock's Handle.DeleteKey")

// Restart empties the client's space, as a server restarted without
// persistence: every holder of every key loses its lease, waiters queue
// again, and fencing tokens keep increasing (they come from one counter
// for the process). Clients stay connected: their next calls find the
// empty space.
func (h *Handle) Restart() {
	s := h.c.s
	s.mu.Lock()
	// The keys first: clear puts the waiters back in new queues.
	for _, key := range slices.Collect(maps.Keys(s.keys)) {
		s.clear(key, errRestarted)
	}
	s.mu.Unlock()
	s.forgetIfUnused()
}

// errRestarted is why Restart drops a lease.
var errRestarted = errors.New("space emptied by memdlock's Handle.Restart")

// clear removes key's queue: holders are dropped for reason, waiters join
// a new queue in their order, as their attempts go on. s.mu is held.
func (s *space) clear(key string, reason error) {
	k := s.keys[key]
	if k == nil {
		return
	}
	delete(s.keys, key)
	var waiters []*entry
	for _, e := range k.q {
		e.gone = true
		if e.stop != nil {
			e.stop()
		}
		if e.granted {
			if !e.ended { // an ended one was told already
				e.tellLost(reason)
			}
		} else {
			waiters = append(waiters, e)
		}
	}
	s.changed(key)
	for _, e := range waiters {
		nk := s.keys[key]
		if nk == nil {
			nk = &keyState{key: key, label: k.label, kind: k.kind, limit: k.limit}
			s.keys[key] = nk
		}
		e.k, e.gone, e.waited, e.targets, e.stop = nk, false, false, nil, nil
		nk.q = append(nk.q, e)
		s.plan(nk, e)
		if !e.granted && (e.abandoned || e.c.back != nil) {
			s.armWaiter(e) // still unheard of
		}
	}
}

// Disconnect cuts the client off from its space, as a network partition
// would: its calls (locking, renewals, releases, Inspect, List, Observe's
// watches) wait until Reconnect or until their ctx ends (Lock and TryLock
// then fail with the ctx's error, other calls with dlock.ErrUnavailable),
// and its watches hear of no change. The space stops hearing from it: its leases expire when their
// TTL runs out unrenewed (on a fake clock, at Clock.Advance past it), and
// its waiters' entries one TTL after Disconnect, so that neither holds up
// the clients behind for longer. A Lock still waiting when the client is
// back queues again if its entry expired meanwhile.
func (h *Handle) Disconnect() {
	c := h.c
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.back != nil {
		return
	}
	c.back = make(chan struct{})
	for _, e := range s.entriesOf(c) {
		if !e.granted {
			s.armWaiter(e)
		}
	}
}

// Reconnect ends Disconnect: the calls that waited go on, and the
// client's watches hear that the keys may have changed. Leases that
// expired meanwhile stay lost.
func (h *Handle) Reconnect() {
	c := h.c
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.back == nil {
		return
	}
	close(c.back)
	c.back = nil
	for _, e := range s.entriesOf(c) {
		if !e.granted && !e.abandoned && e.stop != nil {
			e.stop()
			e.stop = nil
		}
	}
	for _, ws := range s.watchers {
		for ch, wc := range ws {
			if wc == c {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}
}

// entriesOf returns c's holders and waiters. s.mu is held.
func (s *space) entriesOf(c *conn) []*entry {
	var out []*entry
	for _, k := range s.keys {
		for _, e := range k.q {
			if e.c == c {
				out = append(out, e)
			}
		}
	}
	return out
}

// RenewRequests returns how many renewal requests the client has sent.
// Its Client renews all its leases of one TTL together, in one request
// per renewal interval (see driver.BatchRenewer).
func (h *Handle) RenewRequests() int64 { return h.c.renewals.Load() }

// Freeze stops the client's renewals from reaching the space, as if its
// process were paused: each renewal fails, and the leases end when their
// TTL runs out (at once on Clock.Advance past it) unless Thaw comes first.
func (h *Handle) Freeze() { h.c.frozen.Store(true) }

// Thaw ends Freeze.
func (h *Handle) Thaw() { h.c.frozen.Store(false) }
