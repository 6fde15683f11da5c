package dlocktest

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock"
)

// leadTerm is one call of Lead's function: its context and term, and the
// channel that tells it to return.
type leadTerm struct {
	ctx  context.Context
	term *dlock.Leadership
	ret  chan error
}

// leader is a Lead running in the background.
type leader struct {
	name  string
	terms chan leadTerm // each call of fn, as it starts
	done  chan struct{} // closed when Lead has returned
	err   error         // Lead's result, set before done is closed
}

// lead runs Lead of key on c with ctx, value name and note name. Its
// function reports each term on terms and returns what it is told, or
// its context's error when that ends first.
func (s *suite) lead(ctx context.Context, c *dlock.Client, key, name string) *leader {
	r := &leader{name: name, terms: make(chan leadTerm), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = c.Election(key).Lead(ctx, name, func(ctx context.Context, term *dlock.Leadership) error {
			lt := leadTerm{ctx: ctx, term: term, ret: make(chan error, 1)}
			select {
			case r.terms <- lt:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-lt.ret:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, s.ttl(), noted(name))
	}()
	return r
}

// leads waits for r's function to start a term.
func (s *suite) leads(r *leader, when string) leadTerm {
	s.t.Helper()
	select {
	case lt := <-r.terms:
		if err := lt.term.Err(); err != nil {
			// It may have been lost since; a term that starts lost is not.
			select {
			case <-lt.ctx.Done():
			default:
				s.t.Fatalf("%s: %s's function runs with a lost term whose context has not ended: %v", when, r.name, err)
			}
		}
		return lt
	case <-r.done:
		s.t.Fatalf("%s: Lead of %s returned: %v", when, r.name, r.err)
	case <-s.ctx.Done():
		s.t.Fatalf("%s: %s's function not started (watchdog)", when, r.name)
	}
	panic("unreachable")
}

// ctxEnded waits for a term's context to end, failing at the watchdog.
func (s *suite) ctxEnded(lt leadTerm, when string) {
	s.t.Helper()
	select {
	case <-lt.ctx.Done():
	case <-s.ctx.Done():
		s.t.Fatalf("%s: the function's context not cancelled (watchdog)", when)
	}
}

// Lead runs its function while leading, one term at a time across the
// candidates, resigns when the function returns (even with an error) and
// campaigns again behind the others, cancels the function's context when
// the term is lost, and returns when its own context ends, leaving
// nothing behind.
func testElection_leadRunsWhileLeading(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	actx, acancel := context.WithCancel(s.ctx)
	defer acancel()
	bClient := s.client()
	a := s.lead(actx, s.client(), key, "a")
	a1 := s.leads(a, "a alone")
	s.expectLeader(c, key, "a's function runs", a1.term, "a")
	b := s.lead(s.ctx, bClient, key, "b")
	s.waitQueued(c, key, "b")

	// a's function fails: Lead goes on, resigning to b and campaigning
	// again behind it.
	a1.ret <- errors.New("a's function fails")
	b1 := s.leads(b, "a's function returned an error")
	select {
	case <-a1.ctx.Done():
	default:
		s.t.Fatal("b's function started while a's context had not ended")
	}
	if b1.term.Token() <= a1.term.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", a1.term.Token(), b1.term.Token())
	}
	if !errors.Is(a1.term.Err(), dlock.ErrReleased) {
		s.t.Fatalf("a's first term after its function returned: Err = %v, want ErrReleased (resigned)", a1.term.Err())
	}
	s.waitQueued(c, key, "a")
	s.expectQueue(c, key, "b leads, a campaigns again", []string{"b"}, []string{"a"})

	// b's term is lost (its Client closes): b's function's context ends
	// with the term's Err as cause, b's Lead stops (ErrClosed), a leads.
	if err := bClient.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.ctxEnded(b1, "b's client closed")
	if cause := context.Cause(b1.ctx); !errors.Is(cause, dlock.ErrClosed) {
		s.t.Fatalf("b's function's context ended with cause %v, want the term's Err (ErrClosed)", cause)
	}
	a2 := s.leads(a, "b's term ended")
	if a2.term.Token() <= b1.term.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", b1.term.Token(), a2.term.Token())
	}
	select {
	case <-b.done:
		if !errors.Is(b.err, dlock.ErrClosed) {
			s.t.Fatalf("Lead of a closed client returned %v, want ErrClosed", b.err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("Lead of a closed client has not returned (watchdog)")
	}
	s.expectLeader(c, key, "a leads again", a2.term, "a")

	// a's function returns nil: a campaigns again, alone, and leads again.
	a2.ret <- nil
	a3 := s.leads(a, "a's function returned, nobody else campaigns")
	if a3.term.Token() <= a2.term.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", a2.term.Token(), a3.term.Token())
	}

	// a's context ends: the function's context ends, Lead resigns and
	// returns ctx's error.
	acancel()
	s.ctxEnded(a3, "Lead's context ended")
	select {
	case <-a.done:
		if !errors.Is(a.err, context.Canceled) {
			s.t.Fatalf("Lead after its context ended returned %v, want context.Canceled", a.err)
		}
	case <-s.ctx.Done():
		s.t.Fatal("Lead has not returned after its context ended (watchdog)")
	}
	if !errors.Is(a3.term.Err(), dlock.ErrReleased) {
		s.t.Fatalf("a's last term after Lead returned: Err = %v, want ErrReleased", a3.term.Err())
	}
	s.expectNoLeader(c, key, "after Lead returned")
	s.checkNothingLeft(key)
}
