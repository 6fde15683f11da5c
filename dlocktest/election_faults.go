package dlocktest

import (
	"errors"
	"time"

	"github.com/dlockdev/dlock"
)

// A leader cut off from the server (dead, paused, partitioned) is
// replaced after its TTL, its Done closed before the successor's Campaign
// returns; observers follow; the stale leader, back, cannot Proclaim nor
// Resign the successor's term.
func testElection_cutOffLeaderReplacedAfterTTL(s *suite) {
	a, link := s.faulty()
	c := s.client()
	s.needElections(c)
	key := s.key()
	obs := s.observe(s.client(), key)
	s.expectState(obs, key, "first state", nobody)
	la := s.elected(s.campaign(a, key, "a"))
	s.expectState(obs, key, "a elected", leading(la, "a"))
	pb := s.campaign(s.client(), key, "b")
	s.campaigning(pb)

	link.Blackhole() // a is as good as dead to the server: no renewals
	b := s.elected(pb)
	// The central safety property: by the time the successor is elected,
	// the old leader's term has ended locally.
	select {
	case <-la.Done():
	default:
		s.t.Fatalf("b was elected while a's term was still valid locally (deadline %v, now %v)",
			la.Deadline().Format(time.StampMicro), time.Now().Format(time.StampMicro))
	}
	if !errors.Is(la.Err(), dlock.ErrLeaseLost) {
		s.t.Fatalf("a.Err() = %v, want ErrLeaseLost", la.Err())
	}
	if b.Token() <= la.Token() {
		s.t.Fatalf("token went from %d to %d, want strictly increasing", la.Token(), b.Token())
	}
	// The observer sees b; "no leader" may come between, when the
	// server learnt of a's expiry before electing b.
	for {
		info := s.nextState(obs, key, "after a was cut off")
		if got := stateOf(info); got == leading(b, "b") {
			break
		} else if got != nobody {
			s.t.Fatalf("after a was cut off: observed %v, want no leader or %v", got, leading(b, "b"))
		}
	}
	s.expectLeader(c, key, "b elected", b, "b")

	// a comes back: its Proclaim and Resign must not touch b's term.
	link.Restore()
	s.expectNotHeld("Proclaim of the cut-off leader", key, la.Proclaim(s.ctx, "a is back"))
	if err := la.Resign(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("Resign of the cut-off leader: err = %v, want ErrNotHeld", err)
	}
	s.expectLeader(c, key, "after the stale leader's Proclaim and Resign", b, "b")
	if err := b.Err(); err != nil {
		s.t.Fatalf("b's term ended after the stale leader's calls: %v", err)
	}
	// Only b's own changes reach the observer.
	if err := b.Proclaim(s.ctx, "b1"); err != nil {
		s.t.Fatalf("Proclaim: %v", err)
	}
	s.expectState(obs, key, "b proclaimed", leading(b, "b1"))
	s.resign("b", b)
	s.expectState(obs, key, "b resigned", nobody)
	s.checkNothingLeft(key)
}

// Client.Close ends the client's terms as it releases its leases: the
// next candidate is elected, and the closed client's term refuses
// Proclaim and Resign.
func testElection_clientCloseResigns(s *suite) {
	key := s.key()
	a, c := s.client(), s.client()
	s.needElections(c)
	la := s.elected(s.campaign(a, key, "a"))
	pb := s.campaign(s.client(), key, "b")
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if !errors.Is(la.Err(), dlock.ErrClosed) {
		s.t.Fatalf("Err of a term after Client.Close = %v, want ErrClosed", la.Err())
	}
	b := s.elected(pb)
	s.expectNotHeld("Proclaim after Client.Close", key, la.Proclaim(s.ctx, "a"))
	if err := la.Resign(s.ctx); !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("Resign after Client.Close: err = %v, want ErrNotHeld", err)
	}
	s.expectLeader(c, key, "after the closed client's calls", b, "b")
	// Observe of a closed client sends nothing.
	if info, ok := <-a.Election(key).Observe(s.ctx); ok {
		s.t.Fatalf("Observe of a closed client sent %+v, want its channel closed", info)
	}
	s.resign("b", b)
	s.checkNothingLeft(key)
}
