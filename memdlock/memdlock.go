package memdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"

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
				free = s.drop(k, e, errLostOnPurpose) || free
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
	k := s.keys[key]
	var waiters []*entry
	if k != nil {
		delete(s.keys, key)
		for _, e := range k.q {
			e.gone = true
			if e.stop != nil {
				e.stop()
			}
			if e.granted {
				e.lost <- errDeleted
			} else {
				waiters = append(waiters, e)
			}
		}
		s.changed(key)
	}
	// The waiters' attempts go on: they join again, in their order.
	for _, e := range waiters {
		nk := s.keys[key]
		if nk == nil {
			nk = &keyState{key: key, label: k.label, kind: k.kind, limit: k.limit}
			s.keys[key] = nk
		}
		e.k, e.gone, e.waited, e.targets = nk, false, false, nil
		nk.q = append(nk.q, e)
		s.plan(nk, e)
	}
	s.mu.Unlock()
	s.forgetIfUnused()
}

// errDeleted is why DeleteKey drops a lease.
var errDeleted = errors.New("key deleted by memdlock's Handle.DeleteKey")

// Freeze stops the client's renewals from reaching the space, as if its
// process were paused: each renewal fails, and the leases end when their
// TTL runs out (at once on Clock.Advance past it) unless Thaw comes first.
func (h *Handle) Freeze() { h.c.frozen.Store(true) }

// Thaw ends Freeze.
func (h *Handle) Thaw() { h.c.frozen.Store(false) }
