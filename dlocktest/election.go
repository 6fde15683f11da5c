package dlocktest

import (
	"context"
	"errors"
	"strings"

	"github.com/dlockdev/dlock"
)

// Helpers of the leader-election scenarios. An election is a queue of kind
// election: its holder is the leader, its waiters are the candidates in
// arrival order; so the scenarios order candidates and check the queue as
// those of semaphores do (see modes.go), and follow the published state
// with Election.Leader and Election.Observe.
//
// Proclaim and Observe need the optional driver interfaces
// driver.Publisher and driver.Observer. A backend that lacks them makes
// Proclaim fail with errors.ErrUnsupported: the scenarios then skip,
// saying so (needElections). Observe has no error to return; a backend
// whose Proclaim works but whose Observe closes at once fails the
// scenarios that observe.

// needElections skips the test, with the reason, when the backend cannot
// publish a leader's value (errors.ErrUnsupported from Proclaim). It
// campaigns on a key of its own and leaves nothing there.
func (s *suite) needElections(c *dlock.Client) {
	s.t.Helper()
	key := s.key()
	term, err := c.Election(key).Campaign(s.ctx, "probe", s.ttl())
	if err != nil {
		s.t.Fatalf("Campaign(%q) of a free election: %v", key, err)
	}
	perr := term.Proclaim(s.ctx, "probe")
	if err := term.Resign(s.ctx); err != nil {
		s.t.Fatalf("Resign(%q): %v", key, err)
	}
	if errors.Is(perr, errors.ErrUnsupported) {
		s.t.Skipf("backend cannot serve elections yet: %v", perr)
	}
	if perr != nil {
		s.t.Fatalf("Proclaim(%q) by the leader: %v", key, perr)
	}
}

// candidate is a Campaign running in the background.
type candidate struct {
	name  string
	done  chan struct{}     // closed when Campaign has returned
	term  *dlock.Leadership // Campaign's results, set before done is closed
	err   error
	value string
}

// campaign runs Campaign in the background with the suite's TTL, the note
// name and the value name, and returns once the server has queued it (as
// the leader or a candidate): the arrival order is the order of the
// campaign calls. A Campaign that fails at once is fatal.
func (s *suite) campaign(c *dlock.Client, key, name string) *candidate {
	s.t.Helper()
	return s.campaignCtx(s.ctx, c, key, name)
}

// campaignCtx is campaign with ctx for the Campaign, which the caller may
// cancel.
func (s *suite) campaignCtx(ctx context.Context, c *dlock.Client, key, name string) *candidate {
	s.t.Helper()
	p := &candidate{name: name, value: name, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.term, p.err = c.Election(key).Campaign(ctx, name, s.ttl(), noted(name))
	}()
	s.awaitQueued(c, key, name, p.done)
	select {
	case <-p.done:
		if p.err != nil {
			s.t.Fatalf("Campaign of %s: %v", name, p.err)
		}
	default:
	}
	return p
}

// elected waits for p's Leadership, failing the test at the watchdog or
// if p failed.
func (s *suite) elected(p *candidate) *dlock.Leadership {
	s.t.Helper()
	select {
	case <-p.done:
	case <-s.ctx.Done():
		s.t.Fatalf("%s not elected (watchdog)", p.name)
	}
	if p.err != nil {
		s.t.Fatalf("Campaign of %s: %v", p.name, p.err)
	}
	return p.term
}

// campaigning fails the test if any of ps has returned: they must still
// be candidates.
func (s *suite) campaigning(ps ...*candidate) {
	s.t.Helper()
	for _, p := range ps {
		select {
		case <-p.done:
			if p.err != nil {
				s.t.Fatalf("Campaign of %s returned while it should wait: %v", p.name, p.err)
			}
			s.t.Fatalf("%s was elected (token %d) while it should wait", p.name, p.term.Token())
		default:
		}
	}
}

// resign resigns term, which must succeed.
func (s *suite) resign(name string, term *dlock.Leadership) {
	s.t.Helper()
	if err := term.Resign(s.ctx); err != nil {
		s.t.Fatalf("Resign of %s: %v", name, err)
	}
}

// expectLeader fails the test unless Leader shows term leading with value.
func (s *suite) expectLeader(c *dlock.Client, key, when string, term *dlock.Leadership, value string) dlock.LeaderInfo {
	s.t.Helper()
	info, err := c.Election(key).Leader(s.ctx)
	if err != nil {
		s.t.Fatalf("%s: Leader: %v", when, err)
	}
	if !info.HasLeader() || info.Token != term.Token() || info.Value != value || info.Key != key {
		s.t.Fatalf("%s: Leader = %+v; want key %q, token %d, value %q", when, info, key, term.Token(), value)
	}
	return info
}

// expectNoLeader fails the test unless Leader says nobody leads.
func (s *suite) expectNoLeader(c *dlock.Client, key, when string) {
	s.t.Helper()
	info, err := c.Election(key).Leader(s.ctx)
	if !errors.Is(err, dlock.ErrNoLeader) {
		s.t.Fatalf("%s: Leader = %+v, %v; want ErrNoLeader", when, info, err)
	}
	if want := `leader "` + key + `": dlock: no leader`; err.Error() != want {
		s.t.Fatalf("%s: Leader's error reads %q, want %q", when, err, want)
	}
	if info.HasLeader() {
		s.t.Fatalf("%s: Leader returned ErrNoLeader with a leader: %+v", when, info)
	}
}

// expectNotHeld fails the test unless err, from a call on a term that has
// ended, satisfies ErrNotHeld and names the key and the sentinel once (the
// rule for messages in package driver).
func (s *suite) expectNotHeld(what, key string, err error) {
	s.t.Helper()
	if !errors.Is(err, dlock.ErrNotHeld) {
		s.t.Fatalf("%s: err = %v, want ErrNotHeld", what, err)
	}
	msg := err.Error()
	if n := strings.Count(msg, `"`+key+`"`); n != 1 {
		s.t.Fatalf("%s: error %q names the key %d times, want once", what, msg, n)
	}
	if n := strings.Count(msg, "dlock: "); n != 1 {
		s.t.Fatalf("%s: error %q says \"dlock: \" %d times, want once (each sentinel's text once)", what, msg, n)
	}
}

// campaignOf returns Campaign of key as an acquirer (for refuseKinds),
// with the value "mismatch".
func campaignOf(c *dlock.Client, key string) acquirer {
	return func(ctx context.Context, opts ...dlock.LockOption) (*dlock.Lease, error) {
		term, err := c.Election(key).Campaign(ctx, "mismatch", opts...)
		if err != nil {
			return nil, err
		}
		return term.Lease(), nil
	}
}
