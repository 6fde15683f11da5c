package dlocktest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlockdev/dlock"
)

// Scenarios of Election.Observe: the current state first, then every change
// in order, "no leader" included; a slow observer gets the latest state,
// never an older one after a newer one.

// state is what an observer expects: a leader's token and value, or
// nobody (token 0).
type state struct {
	token uint64
	value string
}

func (st state) String() string {
	if st.token == 0 {
		return "no leader"
	}
	return fmt.Sprintf("token %d, value %q", st.token, st.value)
}

func leading(term *dlock.Leadership, value string) state { return state{term.Token(), value} }

var nobody = state{}

func stateOf(info dlock.LeaderInfo) state {
	if !info.HasLeader() {
		return nobody
	}
	return state{info.Token, info.Value}
}

// observe starts Observe of key on c, ending when the test does.
func (s *suite) observe(c *dlock.Client, key string) <-chan dlock.LeaderInfo {
	ctx, cancel := context.WithCancel(s.ctx)
	s.t.Cleanup(cancel)
	return c.Election(key).Observe(ctx)
}

// nextState returns the next state ch sends, failing the test if ch is
// closed first or at the watchdog.
func (s *suite) nextState(ch <-chan dlock.LeaderInfo, key, when string) dlock.LeaderInfo {
	s.t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			s.t.Fatalf("%s: Observe's channel closed", when)
		}
		if info.Key != key {
			s.t.Fatalf("%s: Observe sent a state of key %q, want %q", when, info.Key, key)
		}
		return info
	case <-s.ctx.Done():
		s.t.Fatalf("%s: nothing observed (watchdog)", when)
	}
	panic("unreachable")
}

// expectState fails the test unless the next state ch sends is want.
func (s *suite) expectState(ch <-chan dlock.LeaderInfo, key, when string, want state) {
	s.t.Helper()
	if got := stateOf(s.nextState(ch, key, when)); got != want {
		s.t.Fatalf("%s: observed %v, want %v", when, got, want)
	}
}

// An observer that keeps up sees the current state first, then every
// change in order, and nothing else: each step below waits for the
// observers to see it before the next, so no state may be skipped.
func testElection_observeEveryChangeInOrder(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	early := s.observe(s.client(), key)
	s.expectState(early, key, "first state of a fresh key", nobody)
	var seen []state // what early has seen, for the late observer
	step := func(when string, want state, observers ...<-chan dlock.LeaderInfo) {
		s.t.Helper()
		for _, o := range observers {
			s.expectState(o, key, when, want)
		}
		seen = append(seen, want)
	}

	a := s.elected(s.campaign(s.client(), key, "a"))
	step("a elected", leading(a, "a"), early)
	late := s.observe(s.client(), key)
	step("first state of an observer that starts while a leads", leading(a, "a"), late)
	all := []<-chan dlock.LeaderInfo{early, late}
	for i := range 3 {
		v := fmt.Sprintf("a%d", i)
		if err := a.Proclaim(s.ctx, v); err != nil {
			s.t.Fatalf("Proclaim(%q): %v", v, err)
		}
		step("a proclaimed "+v, leading(a, v), all...)
	}
	// A hand-over is one change: from a to b, with nobody in between.
	pb := s.campaign(s.client(), key, "b")
	s.resign("a", a)
	b := s.elected(pb)
	step("a resigned to b", leading(b, "b"), all...)
	s.resign("b", b)
	step("b resigned, nobody campaigns", nobody, all...)
	d := s.elected(s.campaign(s.client(), key, "d"))
	step("d elected", leading(d, "d"), all...)
	if err := d.Proclaim(s.ctx, "d1"); err != nil {
		s.t.Fatalf("Proclaim: %v", err)
	}
	step("d proclaimed d1", leading(d, "d1"), all...)
	s.resign("d", d)
	step("d resigned", nobody, all...)

	// Both observers end with their context.
	ctx, cancel := context.WithCancel(s.ctx)
	ended := s.client().Election(key).Observe(ctx)
	s.expectState(ended, key, "first state", nobody)
	cancel()
	for range 2 { // at most one state may have been sent before the cancel took
		select {
		case _, ok := <-ended:
			if !ok {
				s.checkNothingLeft(key)
				return
			}
		case <-s.ctx.Done():
			s.t.Fatal("Observe's channel not closed after its context ended (watchdog)")
		}
	}
	s.t.Fatal("Observe's channel still sends after its context ended")
}

// An observer that does not read while the value changes many times gets
// the states in order, never an older after a newer, and in the end the
// latest one.
func testElection_observeSlowReaderGetsLatest(s *suite) {
	key := s.key()
	c := s.client()
	s.needElections(c)
	slow := s.observe(s.client(), key)
	const changes = 30
	a := s.elected(s.campaign(s.client(), key, "v0"))
	for i := 1; i <= changes; i++ {
		if err := a.Proclaim(s.ctx, "v"+strconv.Itoa(i)); err != nil {
			s.t.Fatalf("Proclaim: %v", err)
		}
	}
	final := "v" + strconv.Itoa(changes)
	s.expectLeader(c, key, "after the changes", a, final)

	// Now read: "no leader" (the state when Observe started) may come
	// first, then values in increasing order, up to the final one.
	last := -1
	received := 0
	for last != changes {
		info := s.nextState(slow, key, fmt.Sprintf("after %d states read, the last v%d", received, last))
		received++
		if !info.HasLeader() {
			if last >= 0 {
				s.t.Fatalf("observed no leader after v%d: an older state after a newer one", last)
			}
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(info.Value, "v"))
		if err != nil || info.Token != a.Token() {
			s.t.Fatalf("observed %+v, want the token %d and a value v0…%s", info, a.Token(), final)
		}
		if n <= last {
			s.t.Fatalf("observed v%d after v%d: an older (or the same) state after a newer one", n, last)
		}
		last = n
	}
	s.t.Logf("a slow observer read %d states of %d", received, changes+2)
	s.resign("a", a)
	s.expectState(slow, key, "after Resign", nobody)
	s.checkNothingLeft(key)
}
