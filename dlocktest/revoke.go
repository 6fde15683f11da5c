package dlocktest

import (
	"errors"
	"slices"

	"github.com/dlockdev/dlock"
)

// Scenarios of Client.Revoke, run when the backend's driver implements
// driver.Revoker (skipped otherwise). The operator's Client is another
// Client than the holders', as a `dlock revoke` run elsewhere would be.

// needRevoke skips the scenario unless c's backend can revoke, probed on
// a key nobody uses.
func (s *suite) needRevoke(c *dlock.Client) {
	s.t.Helper()
	_, err := c.Revoke(s.ctx, s.key())
	if isUnsupported(err) {
		s.t.Skip("backend cannot revoke (its driver does not implement driver.Revoker)")
	}
	if err != nil {
		s.t.Fatalf("Revoke of a free key: %v", err)
	}
}

// revoke runs op.Revoke, fatal on error, and checks that it returned the
// holders with the tokens of want, in any order.
func (s *suite) revoke(op *dlock.Client, key string, opts []dlock.RevokeOption, want ...*dlock.Lease) []dlock.Entry {
	s.t.Helper()
	got, err := op.Revoke(s.ctx, key, opts...)
	if err != nil {
		s.t.Fatalf("Revoke(%q): %v", key, err)
	}
	var gotT, wantT []uint64
	for _, e := range got {
		gotT = append(gotT, e.Token)
	}
	for _, l := range want {
		wantT = append(wantT, l.Token())
	}
	slices.Sort(gotT)
	slices.Sort(wantT)
	if !slices.Equal(gotT, wantT) {
		s.t.Fatalf("Revoke(%q) returned holders with tokens %v, want %v", key, gotT, wantT)
	}
	return got
}

// revokedLease checks what a revoked holder sees: Done closed with
// ErrLeaseLost, and an Unlock that says ErrNotHeld.
func (s *suite) revokedLease(name string, l *dlock.Lease) {
	s.t.Helper()
	s.waitDone(l, "it was revoked")
	if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("%s: Err after a revoke = %v, want ErrLeaseLost", name, l.Err())
	}
	if err := l.Unlock(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("%s: Unlock after a revoke = %v, want ErrNotHeld", name, err)
	}
}

// stillHeld fails the test if l's lease has ended.
func (s *suite) stillHeld(name string, l *dlock.Lease) {
	s.t.Helper()
	if err := l.Err(); err != nil {
		s.t.Fatalf("%s: lease ended: %v", name, err)
	}
}

// write is a fenced write to r: accepted when token is above every token
// accepted before, as a store that checks fencing tokens does.
func (r *fencedResource) write(token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token <= r.maxToken {
		return false
	}
	r.maxToken = token
	r.writes++
	return true
}

// Revoking every holder of a lock ends the holder's lease (Done, then
// ErrNotHeld from its Unlock, which touches nobody else), grants the
// waiter with a larger token, and a fenced resource refuses the revoked
// holder's late write.
func testRevoke_all_waiterGrantedHolderFenced(s *suite) {
	op := s.client()
	s.needRevoke(op)
	a, b := s.client(), s.client()
	key := s.key()
	var res fencedResource
	la := s.held("holder", lockOf(a, key))
	if !res.write(la.Token()) {
		s.t.Fatal("the holder's first write was refused")
	}
	pw := s.arrive(b, key, "waiter", lockOf(b, key))

	got := s.revoke(op, key, nil, la)
	if got[0].Metadata.Note != "holder" {
		s.t.Fatalf("Revoke returned %+v, want the holder's entry as Inspect shows it", got[0])
	}
	lw := s.granted(pw)
	s.tokenAbove("the waiter granted after the revoke", lw, la)
	s.revokedLease("holder", la)
	s.expectQueue(op, key, "after the revoked holder's Unlock", []string{"waiter"}, []string{})
	s.stillHeld("waiter", lw)

	if !res.write(lw.Token()) {
		s.t.Fatal("the new holder's write was refused")
	}
	if res.write(la.Token()) {
		s.t.Fatalf("the fenced resource took the revoked holder's late write (token %d after %d)", la.Token(), lw.Token())
	}
	s.unlock(lw)
	s.checkNothingLeft(key)
}

// Revoking every holder of a read-write lock ends every reader's lease,
// and the writer behind them is granted above all their tokens.
func testRevoke_all_everyReader(s *suite) {
	op := s.client()
	s.needRevoke(op)
	key := s.key()
	r1 := s.held("r1", s.client().RWMutex(key).TryRLock)
	r2 := s.held("r2", s.client().RWMutex(key).TryRLock)
	pw := s.arrive(op, key, "w", s.client().RWMutex(key).Lock)

	s.revoke(op, key, nil, r1, r2)
	w := s.granted(pw)
	s.tokenAbove("the writer granted after the revoke", w, r1, r2)
	s.revokedLease("r1", r1)
	s.revokedLease("r2", r2)
	s.expectQueue(op, key, "after the revoke", []string{"w"}, []string{})
	s.unlock(w)
}

// Revoking one permit of a semaphore by its token frees that permit only:
// the first waiter is granted, the other holder keeps its permit and the
// second waiter still waits.
func testRevoke_byToken_onePermit(s *suite) {
	const limit = 2
	op := s.client()
	s.needRevoke(op)
	key := s.key()
	p1 := s.held("p1", s.client().Semaphore(key, limit).TryAcquire)
	p2 := s.held("p2", s.client().Semaphore(key, limit).TryAcquire)
	pw1 := s.arrive(op, key, "w1", s.client().Semaphore(key, limit).Acquire)
	pw2 := s.arrive(op, key, "w2", s.client().Semaphore(key, limit).Acquire)

	s.revoke(op, key, []dlock.RevokeOption{dlock.RevokeToken(p1.Token())}, p1)
	w1 := s.granted(pw1)
	s.tokenAbove("w1 granted after the revoke", w1, p1, p2)
	s.waiting(pw2)
	s.expectQueue(op, key, "after revoking p1", []string{"p2", "w1"}, []string{"w2"})
	s.revokedLease("p1", p1)
	s.stillHeld("p2", p2)
	s.unlock(p2)
	w2 := s.granted(pw2)
	s.unlock(w1)
	s.unlock(w2)
}

// A token that no holder has changes nothing: ErrNotHeld, and the holder
// keeps its lease and releases it normally.
func testRevoke_unknownToken_changesNothing(s *suite) {
	op := s.client()
	s.needRevoke(op)
	key := s.key()
	h := s.held("holder", lockOf(s.client(), key))
	_, err := op.Revoke(s.ctx, key, dlock.RevokeToken(h.Token()+1_000_000))
	s.expectErr("Revoke of a token nobody holds", err, dlock.ErrNotHeld)
	s.expectQueue(op, key, "after the refused revoke", []string{"holder"}, []string{})
	s.stillHeld("holder", h)
	s.unlock(h)
}

// A free key: revoking every holder returns nothing and no error; a
// token returns ErrNotHeld; nothing is left on the server.
func testRevoke_freeKey(s *suite) {
	op := s.client()
	s.needRevoke(op)
	key := s.key()
	got, err := op.Revoke(s.ctx, key)
	if err != nil || len(got) != 0 {
		s.t.Fatalf("Revoke of a free key = %v, %v; want no entries and no error", got, err)
	}
	_, err = op.Revoke(s.ctx, key, dlock.RevokeToken(1))
	s.expectErr("Revoke by token of a free key", err, dlock.ErrNotHeld)
	s.checkNothingLeft(key)
}
