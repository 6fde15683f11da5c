package dlocktest

// The scenarios of Client.LockAll and TryLockAll: all the keys or none,
// leases in the caller's order, nothing left held or queued by a call that
// fails, is cancelled or is ended by Close, Done closed by the loss of any
// one lease, and bad input refused before anything is taken. The
// contention scenarios (no overlap, no deadlock) are in multi_contention.go.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dlockdev/dlock"
)

// multiKeys returns n keys of one subtest that sort in the order returned
// (base/a < base/b < …), so that a scenario knows the order in which
// LockAll takes them.
func (s *suite) multiKeys(n int) []string {
	base := s.key()
	out := make([]string, n)
	for i := range out {
		out[i] = base + "/" + string(rune('a'+i))
	}
	return out
}

func (s *suite) lockAll(c *dlock.Client, ks []string, opts ...dlock.LockOption) *dlock.MultiLease {
	s.t.Helper()
	m, err := c.LockAll(s.ctx, ks, opts...)
	if err != nil {
		s.t.Fatalf("LockAll(%q): %v", ks, err)
	}
	return m
}

// checkLeases fails the test unless m holds one valid lease per key of
// want, in want's order.
func (s *suite) checkLeases(m *dlock.MultiLease, want []string) {
	s.t.Helper()
	ls := m.Leases()
	if len(ls) != len(want) {
		s.t.Fatalf("Leases() has %d leases, want %d (one per key of %q)", len(ls), len(want), want)
	}
	for i, l := range ls {
		if l.Key() != want[i] {
			s.t.Fatalf("Leases()[%d] is for %q, want %q: the leases must come in the caller's key order %q", i, l.Key(), want[i], want)
		}
		if l.Mode() != dlock.Exclusive || l.Token() == 0 || l.Err() != nil {
			s.t.Fatalf("lease of %q: mode %v, token %d, err %v; want an exclusive valid lease with a token", l.Key(), l.Mode(), l.Token(), l.Err())
		}
	}
}

// checkFree fails the test unless c can take key at once (and gives it back).
func (s *suite) checkFree(c *dlock.Client, key string) {
	s.t.Helper()
	l, err := c.TryLock(s.ctx, key, s.ttl())
	if err != nil {
		s.t.Fatalf("%q should be free: TryLock: %v", key, err)
	}
	s.unlock(l)
}

// checkHeld fails the test unless key is held or waited for by somebody.
func (s *suite) checkHeld(c *dlock.Client, key string) {
	s.t.Helper()
	if l, err := c.TryLock(s.ctx, key, s.ttl()); !errors.Is(err, dlock.ErrLocked) {
		if err == nil {
			_ = l.Unlock(s.ctx)
		}
		s.t.Fatalf("%q should be held: TryLock: err = %v, want ErrLocked", key, err)
	}
}

// holderNotes returns the notes of key's holders, or ok=false if the backend
// cannot inspect.
func (s *suite) holderNotes(c *dlock.Client, key string) (notes []string, ok bool) {
	s.t.Helper()
	info, err := c.Inspect(s.ctx, key)
	if isUnsupported(err) {
		return nil, false
	}
	if err != nil {
		s.t.Fatalf("Inspect(%q): %v", key, err)
	}
	for _, h := range info.Holders {
		notes = append(notes, h.Metadata.Note)
	}
	return notes, true
}

func note(n string) dlock.LockOption { return dlock.WithMetadata(dlock.Metadata{Note: n}) }

func testMultiLock_heldTogether_leasesInCallerOrder(s *suite) {
	a, b := s.client(), s.client()
	ks := s.multiKeys(3)
	req := []string{ks[2], ks[0], ks[1]} // not sorted: the caller's order is kept
	m := s.lockAll(a, req, s.ttl())
	s.checkLeases(m, req)

	// WithTTL applies to every key: each lease has the TTL a single Lock
	// with the same option gets (whatever the backend made of it).
	ref := s.lock(b, s.key(), s.ttl())
	for _, l := range m.Leases() {
		if l.TTL() != ref.TTL() {
			s.t.Errorf("lease of %q has TTL %v, want %v as a Lock with the same option", l.Key(), l.TTL(), ref.TTL())
		}
	}
	s.unlock(ref)

	for _, k := range ks {
		s.checkHeld(b, k)
	}
	select {
	case <-m.Done():
		s.t.Fatalf("Done closed while every lease is held: %v", m.Err())
	default:
	}
	if err := m.Err(); err != nil {
		s.t.Fatalf("Err while every lease is held = %v, want nil", err)
	}
	ls := m.Leases()
	ls[0] = nil
	if m.Leases()[0] == nil {
		s.t.Fatal("Leases returned the MultiLease's own slice, not a copy")
	}

	if err := m.Unlock(s.ctx); err != nil {
		s.t.Fatalf("Unlock: %v", err)
	}
	select {
	case <-m.Done():
	default:
		s.t.Fatal("Done not closed after Unlock")
	}
	if !errors.Is(m.Err(), dlock.ErrReleased) {
		s.t.Fatalf("Err after Unlock = %v, want ErrReleased", m.Err())
	}
	for _, l := range m.Leases() {
		if !errors.Is(l.Err(), dlock.ErrReleased) {
			s.t.Errorf("lease of %q after Unlock: Err = %v, want ErrReleased", l.Key(), l.Err())
		}
	}
	for _, k := range ks {
		s.checkFree(b, k)
		s.checkNothingLeft(k)
	}
	err := m.Unlock(s.ctx)
	if !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("second Unlock: err = %v, want ErrNotHeld", err)
	}
	for _, k := range ks {
		if !strings.Contains(err.Error(), strconv.Quote(k)) {
			s.t.Errorf("second Unlock's error does not name %q: %v", k, err)
		}
	}
}

func testMultiLock_oneHeldByOther_allOrNone(s *suite) {
	a, b, c := s.client(), s.client(), s.client()
	ks := s.multiKeys(3)
	req := []string{ks[2], ks[1], ks[0]}
	// b holds the middle key: TryLockAll takes the first before it finds
	// the second held, and must give the first back.
	hb := s.tryLock(b, ks[1], s.ttl())
	_, err := a.TryLockAll(s.ctx, req, s.ttl())
	if !errors.Is(err, dlock.ErrLocked) || !strings.Contains(err.Error(), strconv.Quote(ks[1])) {
		s.t.Fatalf("TryLockAll with %q held by another: err = %v, want ErrLocked naming it", ks[1], err)
	}
	for _, k := range []string{ks[0], ks[2]} {
		s.checkFree(c, k)
		s.checkNothingLeft(k)
	}
	if info, err := c.Inspect(s.ctx, ks[1]); err == nil && (len(info.Holders) != 1 || len(info.Waiters) != 0) {
		s.t.Fatalf("%q after the failed TryLockAll: %d holders, waiters %+v; want b alone", ks[1], len(info.Holders), info.Waiters)
	}

	// LockAll waits for the held key instead, and gets all three once b
	// lets go.
	type result struct {
		m   *dlock.MultiLease
		err error
	}
	got := make(chan result, 1)
	go func() {
		m, err := a.LockAll(s.ctx, req, s.ttl(), note("all"))
		got <- result{m, err}
	}()
	s.waitQueuedIfInspectable(c, ks[1], "all")
	select {
	case r := <-got:
		s.t.Fatalf("LockAll returned while another client held %q: %v", ks[1], r.err)
	default:
	}
	// It holds the first key in sorted order while it waits for the
	// second, and has not touched the third.
	if notes, ok := s.holderNotes(c, ks[0]); ok && (len(notes) != 1 || notes[0] != "all") {
		s.t.Fatalf("while LockAll waits for %q, %q is held by %q, want the waiting LockAll (keys are taken in sorted order)", ks[1], ks[0], notes)
	}
	s.checkFree(c, ks[2])
	s.unlock(hb)
	var r result
	select {
	case r = <-got:
	case <-s.ctx.Done():
		s.t.Fatal("LockAll not granted after the held key was released (watchdog)")
	}
	if r.err != nil {
		s.t.Fatalf("LockAll: %v", r.err)
	}
	s.checkLeases(r.m, req)
	if tok := r.m.Leases()[1].Token(); tok <= hb.Token() {
		s.t.Fatalf("token of %q went from %d to %d, want strictly increasing", ks[1], hb.Token(), tok)
	}
	if err := r.m.Unlock(s.ctx); err != nil {
		s.t.Fatalf("Unlock: %v", err)
	}
	for _, k := range ks {
		s.checkNothingLeft(k)
	}
}

func testMultiLock_cancelWhileWaitingOnSecond_leavesNothing(s *suite) {
	holder, waiter := s.client(), s.client()
	ks := s.multiKeys(2)
	lh := s.lock(holder, ks[1], s.ttl())
	for _, end := range []string{"cancel", "deadline"} {
		var ctx context.Context
		var cancel context.CancelFunc
		want := context.Canceled
		if end == "cancel" {
			ctx, cancel = context.WithCancel(s.ctx)
		} else {
			// The deadline's length only decides when the scenario ends.
			ctx, cancel = context.WithTimeout(s.ctx, s.h.TTL()/2)
			want = context.DeadlineExceeded
		}
		errc := make(chan error, 1)
		go func() {
			m, err := waiter.LockAll(ctx, []string{ks[1], ks[0]}, s.ttl(), note("quitter"))
			if err == nil {
				err = errors.Join(errors.New("LockAll succeeded while a key was held by another"), m.Unlock(s.ctx))
			}
			errc <- err
		}()
		if end == "cancel" {
			s.waitQueuedIfInspectable(holder, ks[1], "quitter")
			// Keys are taken in sorted order: the quitter holds the first
			// while it waits for the second.
			if notes, ok := s.holderNotes(holder, ks[0]); ok && (len(notes) != 1 || notes[0] != "quitter") {
				s.t.Fatalf("while LockAll waits for %q, %q is held by %q, want the waiting LockAll (keys are taken in sorted order)", ks[1], ks[0], notes)
			}
			cancel()
		}
		select {
		case err := <-errc:
			if !errors.Is(err, want) {
				s.t.Fatalf("%s: LockAll: err = %v, want %v", end, err, want)
			}
		case <-s.ctx.Done():
			s.t.Fatalf("%s: LockAll did not return after its context ended (watchdog)", end)
		}
		cancel()
		// Nothing held on the first key, nothing queued on the second.
		s.checkFree(holder, ks[0])
		s.checkNothingLeft(ks[0])
		if info, err := holder.Inspect(s.ctx, ks[1]); err == nil && len(info.Waiters) != 0 {
			s.t.Fatalf("%s: after LockAll returned, %q has waiters %+v, want none", end, ks[1], info.Waiters)
		}
	}
	s.unlock(lh)
	s.checkNothingLeft(ks[1])
}

func testMultiLock_clientClose_endsAll(s *suite) {
	a, b := s.client(), s.client()
	ks := s.multiKeys(4)
	m := s.lockAll(a, ks[:2], s.ttl())
	hb := s.lock(b, ks[3], s.ttl())
	// A second LockAll of a takes ks[2] and waits for ks[3].
	errc := make(chan error, 1)
	go func() {
		m, err := a.LockAll(s.ctx, []string{ks[3], ks[2]}, s.ttl(), note("waiting"))
		if err == nil {
			err = errors.Join(errors.New("LockAll succeeded while a key was held by another"), m.Unlock(s.ctx))
		}
		errc <- err
	}()
	s.waitQueuedIfInspectable(b, ks[3], "waiting")
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	select {
	case <-m.Done():
	default:
		s.t.Fatal("MultiLease's Done not closed by Client.Close")
	}
	if !errors.Is(m.Err(), dlock.ErrClosed) {
		s.t.Fatalf("Err after Client.Close = %v, want ErrClosed", m.Err())
	}
	for _, l := range m.Leases() {
		if !errors.Is(l.Err(), dlock.ErrClosed) {
			s.t.Errorf("lease of %q after Client.Close: Err = %v, want ErrClosed", l.Key(), l.Err())
		}
	}
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			s.t.Fatalf("waiting LockAll after Client.Close: err = %v, want ErrClosed", err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("waiting LockAll did not return after Client.Close (watchdog)")
	}
	if err := m.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("Unlock after Client.Close: err = %v, want ErrNotHeld", err)
	}
	for _, k := range ks[:3] {
		s.checkFree(b, k)
		s.checkNothingLeft(k)
	}
	if info, err := b.Inspect(s.ctx, ks[3]); err == nil && len(info.Waiters) != 0 {
		s.t.Fatalf("after Close, %q has waiters %+v, want none", ks[3], info.Waiters)
	}
	s.unlock(hb)
	s.checkNothingLeft(ks[3])
}

func testMultiLock_keyDeleted_doneCloses(s *suite) {
	kd, ok := s.h.(KeyDeleter)
	if !ok {
		s.t.Skip("backend harness cannot delete keys (no KeyDeleter)")
	}
	a, b := s.client(), s.client()
	ks := s.multiKeys(3)
	m := s.lockAll(a, ks, s.ttl())
	if err := kd.DeleteKey(s.ctx, ks[1]); err != nil {
		s.t.Fatalf("DeleteKey: %v", err)
	}
	select {
	case <-m.Done():
	case <-s.ctx.Done():
		s.t.Fatalf("MultiLease's Done not closed after %q was deleted on the server (watchdog)", ks[1])
	}
	err := m.Err()
	if !errors.Is(err, dlock.ErrLeaseLost) || !strings.Contains(err.Error(), strconv.Quote(ks[1])) {
		s.t.Fatalf("Err = %v, want ErrLeaseLost naming %q", err, ks[1])
	}
	// The others are still held, until Unlock.
	for _, i := range []int{0, 2} {
		if l := m.Leases()[i]; l.Err() != nil {
			s.t.Fatalf("lease of %q ended with the deleted key's: %v", l.Key(), l.Err())
		}
		s.checkHeld(b, ks[i])
	}
	err = m.Unlock(s.ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), strconv.Quote(ks[1])) {
		s.t.Fatalf("Unlock: err = %v, want ErrNotHeld naming %q", err, ks[1])
	}
	for _, i := range []int{0, 2} {
		if strings.Contains(err.Error(), strconv.Quote(ks[i])) {
			s.t.Fatalf("Unlock: err = %v names %q, whose lease was held", err, ks[i])
		}
	}
	if !errors.Is(m.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("Err after Unlock = %v, want the loss it reported before", m.Err())
	}
	for _, k := range ks {
		s.checkFree(b, k)
		s.checkNothingLeft(k)
	}
}

func testMultiLock_holderCutOff_lostBeforeNextGrant(s *suite) {
	a, link := s.faulty()
	b, c := s.client(), s.client()
	ks := s.multiKeys(2)
	ma := s.lockAll(a, ks, s.ttl())
	link.Blackhole()
	mb := s.lockAll(b, []string{ks[1], ks[0]}, s.ttl())
	// As for a single lease: by the time anybody else holds the keys, the
	// old holder's MultiLease has ended locally.
	select {
	case <-ma.Done():
	default:
		s.t.Fatal("b was granted the keys while a's MultiLease was still not Done")
	}
	if !errors.Is(ma.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("a's Err = %v, want ErrLeaseLost", ma.Err())
	}
	for i, k := range ks {
		if old, now := ma.Leases()[i].Token(), mb.Leases()[1-i].Token(); now <= old {
			s.t.Fatalf("token of %q went from %d to %d, want strictly increasing", k, old, now)
		}
	}
	link.Restore()
	if err := ma.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("stale holder's Unlock: err = %v, want ErrNotHeld", err)
	}
	for _, k := range ks {
		s.checkHeld(c, k) // b's, still
	}
	if err := mb.Err(); err != nil {
		s.t.Fatalf("b's MultiLease ended after the stale holder's Unlock: %v", err)
	}
	if err := mb.Unlock(s.ctx); err != nil {
		s.t.Fatalf("b's Unlock: %v", err)
	}
}

func testMultiLock_badInput_takesNothing(s *suite) {
	a, b := s.client(), s.client()
	ks := s.multiKeys(2)
	// b holds ks[0]: a call that took the keys before checking them all
	// would fail with ErrLocked (TryLockAll) or wait (LockAll) on it
	// instead of refusing the input. The bad keys sort after ks[0], so
	// that even a call checking each key as it takes it in sorted order
	// meets ks[0] first.
	hb := s.lock(b, ks[0], s.ttl())
	cases := []struct {
		name    string
		keys    []string
		opts    []dlock.LockOption
		want    error
		mention string
	}{
		{"nil list", nil, nil, dlock.ErrInvalidKey, "no keys"},
		{"empty list", []string{}, nil, dlock.ErrInvalidKey, "no keys"},
		{"duplicate", []string{ks[0], ks[1], ks[0]}, nil, dlock.ErrInvalidKey, strconv.Quote(ks[0]) + ": dlock: invalid key: given twice"},
		{"empty key", []string{ks[0], ks[1], ""}, nil, dlock.ErrInvalidKey, `""`},
		{"control character", []string{ks[0], "zz\nkey"}, nil, dlock.ErrInvalidKey, `"zz\nkey"`},
		{"too long", []string{ks[0], strings.Repeat("k", dlock.MaxKeyLen+1)}, nil, dlock.ErrInvalidKey, "limit"},
		{"bad TTL", []string{ks[1], ks[0]}, []dlock.LockOption{dlock.WithTTL(time.Nanosecond)}, dlock.ErrInvalidOption, "TTL"},
	}
	// LockAll's context is cancelled: bad input is refused before the
	// context matters, and a call that queued on ks[0] cannot hang.
	cancelled, cancel := context.WithCancel(s.ctx)
	cancel()
	for _, tc := range cases {
		for _, call := range []string{"LockAll", "TryLockAll"} {
			var err error
			if call == "LockAll" {
				_, err = a.LockAll(cancelled, tc.keys, tc.opts...)
			} else {
				_, err = a.TryLockAll(s.ctx, tc.keys, tc.opts...)
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
				s.t.Errorf("%s, %s: err = %v, want %v mentioning %s", call, tc.name, err, tc.want, tc.mention)
			}
		}
	}
	s.checkFree(a, ks[1])
	s.checkNothingLeft(ks[1])
	if info, err := a.Inspect(s.ctx, ks[0]); err == nil && (len(info.Holders) != 1 || len(info.Waiters) != 0) {
		s.t.Fatalf("%q after refused calls: %d holders, waiters %+v; want b alone", ks[0], len(info.Holders), info.Waiters)
	}
	s.unlock(hb)
	s.checkNothingLeft(ks[0])
}

func testMultiLock_insideDo_reentrant(s *suite) {
	a, b := s.client(), s.client()
	ks := s.multiKeys(2)
	hb := s.lock(b, ks[0], s.ttl()) // as in badInput: refused before ks[0] is tried
	err := a.Do(s.ctx, ks[1], func(ctx context.Context) error {
		cancelled, cancel := context.WithCancel(ctx) // keeps Do's lease
		cancel()
		_, err1 := a.LockAll(cancelled, []string{ks[0], ks[1]}, s.ttl())
		_, err2 := a.TryLockAll(ctx, []string{ks[1], ks[0]}, s.ttl())
		for _, err := range []error{err1, err2} {
			if !errors.Is(err, dlock.ErrReentrant) || !strings.Contains(err.Error(), strconv.Quote(ks[1])) {
				return errors.New("LockAll of a key held by the Do around it: err = " + errString(err) + ", want ErrReentrant naming " + strconv.Quote(ks[1]))
			}
		}
		return nil
	}, s.ttl())
	if err != nil {
		s.t.Fatal(err)
	}
	s.unlock(hb)
	for _, k := range ks {
		s.checkNothingLeft(k)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
