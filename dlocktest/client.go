package dlocktest

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
)

func testBadInput_rejected(s *suite) {
	c := s.client()
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("k", 257): "limit",
		"line\nbreak":            "control character",
		"nul\x00":                "control character",
		"\xff\xfe":               "UTF-8",
	}
	for key, want := range bad {
		for name, call := range map[string]func(context.Context, string, ...dlock.LockOption) (*dlock.Lease, error){
			"Lock": c.Lock, "TryLock": c.TryLock,
		} {
			_, err := call(s.ctx, key)
			if !errors.Is(err, dlock.ErrInvalidKey) || !strings.Contains(err.Error(), want) {
				s.t.Errorf("%s(%q): err = %v, want ErrInvalidKey mentioning %q", name, key, err, want)
			}
		}
		if _, err := c.Inspect(s.ctx, key); !errors.Is(err, dlock.ErrInvalidKey) {
			s.t.Errorf("Inspect(%q): err = %v, want ErrInvalidKey", key, err)
		}
	}
	key := s.key()
	for _, ttl := range []time.Duration{0, -time.Second, dlock.MinTTL - 1, dlock.MaxTTL + 1} {
		if _, err := c.Lock(s.ctx, key, dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrInvalidOption) {
			s.t.Errorf("Lock with TTL %v: err = %v, want ErrInvalidOption", ttl, err)
		}
	}
	long := dlock.Metadata{Note: strings.Repeat("n", dlock.MaxNoteLen+1)}
	if _, err := c.Lock(s.ctx, key, dlock.WithMetadata(long)); !errors.Is(err, dlock.ErrInvalidOption) {
		s.t.Errorf("Lock with a long note: err = %v, want ErrInvalidOption", err)
	}
	s.checkNothingLeft(key)
	// Unusual but valid keys work and stay distinct.
	odd := []string{"a/../b", "/", "..", "{x}", "}x{", "key with spaces", "ключ", "a:b", "*", strings.Repeat("k", 256)}
	var leases []*dlock.Lease
	for _, k := range odd {
		leases = append(leases, s.tryLock(c, k, s.ttl()))
	}
	for _, l := range leases {
		s.unlock(l)
		s.checkNothingLeft(l.Key())
	}
}

func testInspect_showsHolderAndWaiters(s *suite) {
	key := s.key()
	a, b := s.client(), s.client()
	la := s.lock(a, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "nightly job"}))
	info := s.inspect(b, key)
	if info.Key != key || len(info.Holders) != 1 || info.Kind != dlock.KindLock || info.Limit != 1 {
		s.t.Fatalf("Inspect = %+v, want one holder of %q, kind lock, limit 1", info, key)
	}
	h := info.Holders[0]
	if h.Mode != dlock.Exclusive {
		s.t.Fatalf("holder mode = %v, want exclusive", h.Mode)
	}
	host, _ := os.Hostname()
	if h.Token != la.Token() || h.Metadata.Note != "nightly job" || h.Metadata.PID != os.Getpid() || h.Metadata.Host != host {
		s.t.Fatalf("holder = %+v, want token %d, note %q, pid %d, host %q", h, la.Token(), "nightly job", os.Getpid(), host)
	}
	if h.TTL > s.h.TTL() || h.TTL == 0 {
		s.t.Fatalf("holder TTL left = %v, want in (0, %v] or negative for unknown", h.TTL, s.h.TTL())
	}
	errc := make(chan error, 1)
	go func() {
		l, err := b.Lock(s.ctx, key, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "second", Host: "elsewhere", PID: 42}))
		if err == nil {
			err = l.Unlock(s.ctx)
		}
		errc <- err
	}()
	s.waitQueued(a, key, "second")
	w := s.inspect(a, key).Waiters[0]
	if w.Metadata.Host != "elsewhere" || w.Metadata.PID != 42 {
		s.t.Fatalf("waiter = %+v, want host elsewhere, pid 42", w)
	}
	list, err := a.List(s.ctx, key[:len(key)-1])
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	found := false
	for _, li := range list {
		found = found || (li.Key == key && len(li.Holders) == 1 && li.Holders[0].Token == la.Token())
	}
	if !found {
		s.t.Fatalf("List(prefix of %q) = %+v, want the held key", key, list)
	}
	s.unlock(la)
	if err := <-errc; err != nil {
		s.t.Fatal(err)
	}
	if info := s.inspect(a, key); len(info.Holders) != 0 || len(info.Waiters) != 0 {
		s.t.Fatalf("Inspect of a free key = %+v, want no holder, no waiters", info)
	}
}

func testClient_Close(s *suite) {
	key, key2 := s.key(), s.key()
	a, b := s.client(), s.client()
	la := s.lock(a, key, s.ttl())
	lb := s.lock(b, key2, s.ttl())
	errc := make(chan error, 1)
	go func() {
		_, err := a.Lock(s.ctx, key2, s.ttl(), dlock.WithMetadata(dlock.Metadata{Note: "closing"}))
		errc <- err
	}()
	s.waitQueuedIfInspectable(b, key2, "closing")
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			s.t.Fatalf("Lock waiting during Close: err = %v, want ErrClosed", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("waiting Lock did not return after Close (watchdog)")
	}
	select {
	case <-la.Done():
	default:
		s.t.Fatal("lease still open after Close")
	}
	// Close, not a release, ended it: the docs promise ErrClosed, not
	// ErrReleased.
	if !errors.Is(la.Err(), dlock.ErrClosed) {
		s.t.Fatalf("Err of a lease released by Close = %v, want ErrClosed", la.Err())
	}
	if _, err := a.TryLock(s.ctx, key); !errors.Is(err, dlock.ErrClosed) {
		s.t.Fatalf("TryLock after Close: err = %v, want ErrClosed", err)
	}
	s.unlock(s.tryLock(b, key, s.ttl())) // Close released it
	s.unlock(lb)
	s.checkNothingLeft(key)
	s.checkNothingLeft(key2)
}

// Close on a server that stopped answering returns within about one TTL,
// however many leases it holds. A Close that released its leases one after
// another, each with a timeout of a TTL, would take n × TTL here; Close
// needs one TTL and the time to close its connection, so the watchdog, at
// n/2 × TTL, leaves a wide margin on both sides.
func testClient_Close_unreachableServerIsBounded(s *suite) {
	const n = 20
	a, link := s.faulty()
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		leases[i] = s.tryLock(a, s.key(), s.ttl())
	}
	link.Blackhole()
	defer link.Restore()
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	watchdog := time.NewTimer(n / 2 * s.h.TTL())
	defer watchdog.Stop()
	select {
	case err := <-closed:
		// An error is expected: the releases were not confirmed.
		s.t.Logf("Close: %v", err)
	case <-watchdog.C:
		s.t.Fatalf("Close of a client holding %d leases on an unreachable server still runs after %v: it must not take a TTL per lease", n, n/2*s.h.TTL())
	}
	for _, l := range leases {
		select {
		case <-l.Done():
		default:
			s.t.Fatalf("lease on %q still open after Close", l.Key())
		}
		// A lease may have been found lost just before Close: the
		// server stopped answering its renewals.
		if err := l.Err(); !errors.Is(err, dlock.ErrClosed) && !errors.Is(err, dlock.ErrLeaseLost) {
			s.t.Fatalf("Err of a lease ended by Close = %v, want ErrClosed (or ErrLeaseLost)", err)
		}
	}
}

// A Lock or Do nested in a Do of the same key on the same Client would wait
// for itself until ctx ends: it fails at once with ErrReentrant and leaves
// nothing on the server, and one of another key still works (dlock is not
// reentrant, and says so where the Client can know).
func testDo_nestedSameKey_ErrReentrant(s *suite) {
	c := s.client()
	key, other := s.key(), s.key()
	var nestedLock, nestedTry, nestedDo, deeper error
	err := c.Do(s.ctx, key, func(ctx context.Context) error {
		_, nestedLock = c.Lock(ctx, key)
		_, nestedTry = c.TryLock(ctx, key)
		nestedDo = c.Do(ctx, key, func(context.Context) error { return nil })
		// Through a Do of another key, the outer lease is still known.
		return c.Do(ctx, other, func(ctx context.Context) error {
			_, deeper = c.Lock(ctx, key)
			return nil
		})
	})
	if err != nil {
		s.t.Fatalf("Do: %v", err)
	}
	for name, err := range map[string]error{"Lock": nestedLock, "TryLock": nestedTry, "Do": nestedDo, "Lock under Do of another key": deeper} {
		if !errors.Is(err, dlock.ErrReentrant) {
			s.t.Errorf("nested %s of the held key: %v, want ErrReentrant", name, err)
		}
	}
	s.checkNothingLeft(key)
	s.checkNothingLeft(other)
}
