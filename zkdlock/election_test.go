package zkdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/zkdlock"
)

// pendingTerm is a Campaign running in the background.
type pendingTerm struct {
	done chan struct{}
	t    *dlock.Leadership
	err  error
}

func startCampaign(ctx context.Context, c *dlock.Client, key, value string) *pendingTerm {
	p := &pendingTerm{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.t, p.err = c.Election(key).Campaign(ctx, value)
	}()
	return p
}

func (p *pendingTerm) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *pendingTerm) term(t *testing.T, ctx context.Context, what string) *dlock.Leadership {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("%s: never elected (watchdog)", what)
	}
	if p.err != nil {
		t.Fatalf("%s: %v", what, p.err)
	}
	return p.t
}

// TestElection_resign_handsOverInArrivalOrder: candidates queue as
// "election.x" nodes of one queue, and each Resign elects the next one in
// arrival order, with a greater token; the key shows as an election, and
// the leader's value is what it published.
func TestElection_resign_handsOverInArrivalOrder(t *testing.T) {
	ctx := testCtx(t)
	srv, admin, opts := sharedServer(t, ctx)
	const key, n = "elect", 4
	cs := make([]*dlock.Client, n)
	for i := range cs {
		cs[i] = plainClient(t, ctx, srv.Addr(), opts)
	}
	first, err := cs[0].Election(key).Campaign(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	ps := []*pendingTerm{nil}
	for i := 1; i < n; i++ {
		ps = append(ps, startCampaign(ctx, cs[i], key, fmt.Sprintf("c%d", i)))
		waitWaiters(t, ctx, cs[0], key, i)
	}
	for _, name := range children(t, admin, zkdlock.KeyPathForTest(opts.Root, key)) {
		if !strings.HasPrefix(name, "election.x-") {
			t.Errorf("node %s: want an election.x node", name)
		}
	}
	info, err := cs[0].Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != dlock.KindElection || len(info.Holders) != 1 || len(info.Waiters) != n-1 {
		t.Fatalf("Inspect: kind %v, %d holders, %d waiters; want an election, 1 and %d", info.Kind, len(info.Holders), len(info.Waiters), n-1)
	}
	leader := first
	for i := 1; i < n; i++ {
		li, err := cs[i].Election(key).Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("c%d", i-1); li.Value != want || li.Token != leader.Token() {
			t.Fatalf("Leader = %q (token %d), want %q (token %d)", li.Value, li.Token, want, leader.Token())
		}
		if err := leader.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next := ps[i].term(t, ctx, fmt.Sprintf("candidate %d", i))
		for j := i + 1; j < n; j++ {
			if ps[j].returned() {
				t.Fatalf("candidate %d elected before candidate %d resigned: not in arrival order", j, i)
			}
		}
		if next.Token() <= leader.Token() {
			t.Fatalf("term %d has token %d after %d: want greater", i, next.Token(), leader.Token())
		}
		leader = next
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[0].Election(key).Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader after the last Resign: %v, want ErrNoLeader", err)
	}
	checkNothingLeft(t, admin, zkdlock.KeyPathForTest(opts.Root, key))
}

// TestElection_proclaim_nextCandidateNotElected pins that a leader's
// Publish is no release: the candidate behind it watches its node's data,
// which a lock's release writes (and a lock's waiter then takes the key
// without another request). Taking the Publish for a release would elect
// it while the leader leads. The candidate instead reads the leader's node
// again; the leader keeps its term (its own watch and renewals take its
// write for its own), and a Resign still elects the candidate.
func TestElection_proclaim_nextCandidateNotElected(t *testing.T) {
	ctx := testCtx(t)
	srv, _, opts := sharedServer(t, ctx)
	const key = "proclaim"
	a := newWatcher(t, ctx, srv.Addr(), "a", opts)
	b := newWatcher(t, ctx, srv.Addr(), "b", opts)
	ta, err := a.c.Election(key).Campaign(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	pb := startCampaign(ctx, b.c, key, "b")
	// b waits once its watch on a's node is set.
	awaitOrFail(t, ctx, "b watching a's node", func() bool { return b.hook.getWs.Load() >= 1 }, func() { b.settle(t) }, pb.done)
	for i := range 3 {
		getWs := b.hook.getWs.Load()
		value := fmt.Sprintf("a%d", i+2)
		if err := ta.Proclaim(ctx, value); err != nil {
			t.Fatalf("Proclaim(%q): %v", value, err)
		}
		// b learns of the write and reads a's node again; had it taken
		// the write for a release, it would be leader now.
		awaitOrFail(t, ctx, "b re-reading a's node", func() bool {
			return pb.returned() || b.hook.getWs.Load() > getWs
		}, func() { b.settle(t) }, nil)
		if pb.returned() {
			t.Fatalf("b elected by a's Proclaim(%q) while a leads (err %v)", value, pb.err)
		}
		li, err := b.c.Election(key).Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if li.Value != value || li.Token != ta.Token() {
			t.Fatalf("Leader = %q (token %d), want %q (token %d)", li.Value, li.Token, value, ta.Token())
		}
	}
	// a's renewals check its node's data version: two of them after its
	// writes must find the node still a's.
	renewals := a.hook.syncs.Load() + a.hook.checks.Load()
	awaitOrFail(t, ctx, "a renewing twice", func() bool {
		return a.hook.syncs.Load()+a.hook.checks.Load() >= renewals+2 || ta.Err() != nil
	}, func() { a.settle(t) }, nil)
	if err := ta.Err(); err != nil {
		t.Fatalf("a lost its term after its own Proclaims: %v", err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := pb.term(t, ctx, "b")
	if tb.Token() <= ta.Token() {
		t.Fatalf("b's token %d not above a's %d", tb.Token(), ta.Token())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// observation reads an Observe channel and checks each state against the
// expected sequence.
type observation struct {
	t    *testing.T
	ch   <-chan dlock.LeaderInfo
	last dlock.LeaderInfo
}

// next waits for the state that want describes (what names it), failing
// on any other state but the last one seen: every change must be seen,
// in order.
func (o *observation) next(ctx context.Context, what string, want func(dlock.LeaderInfo) bool, onSeen func()) {
	o.t.Helper()
	for {
		select {
		case li, ok := <-o.ch:
			if !ok {
				o.t.Fatalf("Observe closed before %s", what)
			}
			if want(li) {
				if onSeen != nil {
					onSeen()
				}
				o.last = li
				return
			}
			if li != o.last {
				o.t.Fatalf("Observe sent %+v while waiting for %s (last %+v)", li, what, o.last)
			}
		case <-ctx.Done():
			o.t.Fatalf("Observe never sent %s (watchdog)", what)
		}
	}
}

func leads(value string, token uint64) func(dlock.LeaderInfo) bool {
	return func(li dlock.LeaderInfo) bool { return li.HasLeader() && li.Value == value && li.Token == token }
}

func noLeader(li dlock.LeaderInfo) bool { return !li.HasLeader() }

// TestElection_observe_everyChangeInOrder: an observer on a Client of its
// own sees "no leader", leader a, a's new value, b after a resigns, and
// "no leader" after b resigns; a candidate joining changes nothing it
// reports. Then, with a's session cut off until the server expires it, the
// observer sees b elected only after a's Done has closed.
func TestElection_observe_everyChangeInOrder(t *testing.T) {
	ctx := testCtx(t)
	srv, _, opts := sharedServer(t, ctx)
	const key = "observed"
	proxy := dlocktest.NewProxy(t, srv.Addr())
	a := newClient(t, ctx, dialZK(t, ctx, proxy.Addr(), connOpts{}), opts)
	b := plainClient(t, ctx, srv.Addr(), opts)
	obs := plainClient(t, ctx, srv.Addr(), opts)
	octx, stop := context.WithCancel(ctx)
	o := &observation{t: t, ch: obs.Election(key).Observe(octx)}
	o.next(ctx, "no leader at first", noLeader, nil)

	ta, err := a.Election(key).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "a leading", leads("a", ta.Token()), nil)
	if err := ta.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "a's new value", leads("a2", ta.Token()), nil)
	pb := startCampaign(ctx, b, key, "b")
	waitWaiters(t, ctx, b, key, 1)
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := pb.term(t, ctx, "b")
	o.next(ctx, "b after a resigned", leads("b", tb.Token()), nil)
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "no leader after b resigned", noLeader, nil)

	// Expiry.
	ta, err = a.Election(key).Campaign(ctx, "a3")
	if err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "a leading again", leads("a3", ta.Token()), nil)
	pb = startCampaign(ctx, b, key, "b2")
	waitWaiters(t, ctx, b, key, 1)
	proxy.Blackhole()
	o.next(ctx, "b after a's session expired", func(li dlock.LeaderInfo) bool {
		return li.HasLeader() && li.Value == "b2"
	}, func() {
		select {
		case <-ta.Done():
		default:
			t.Fatalf("the observer saw b elected while a's term was still valid locally (deadline %v)", ta.Deadline())
		}
	})
	tb = pb.term(t, ctx, "b")
	if o.last.Token != tb.Token() || tb.Token() <= ta.Token() {
		t.Fatalf("observed token %d, b's %d, a's %d: want b's, above a's", o.last.Token, tb.Token(), ta.Token())
	}
	proxy.Restore()
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "no leader at the end", noLeader, nil)
	stop()
	for range o.ch { // closed when its ctx ends
	}
}

// TestElection_observe_idle_noRequests: an observer sends no request while
// nothing changes — here, while the leader renews its term several times
// — so Observe is driven by watches, not by polling; and it still sees the
// next change.
func TestElection_observe_idle_noRequests(t *testing.T) {
	ctx := testCtx(t)
	srv, _, opts := sharedServer(t, ctx)
	const key = "idle"
	leader := newWatcher(t, ctx, srv.Addr(), "leader", opts)
	obs := newWatcher(t, ctx, srv.Addr(), "observer", opts)
	ta, err := leader.c.Election(key).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o := &observation{t: t, ch: obs.c.Election(key).Observe(ctx)}
	o.next(ctx, "a leading", leads("a", ta.Token()), nil)
	obs.settle(t)
	before := obs.counts()
	renewals := func() int64 { return leader.hook.syncs.Load() + leader.hook.checks.Load() }
	r0 := renewals()
	awaitOrFail(t, ctx, "six renewals of the leader", func() bool { return renewals() >= r0+6 || ta.Err() != nil },
		func() { leader.settle(t) }, nil)
	if err := ta.Err(); err != nil {
		t.Fatal(err)
	}
	obs.settle(t)
	if after := obs.counts(); after != before {
		t.Fatalf("observer while idle: %+v, then %+v: want no request and no notification", before, after)
	}
	if err := ta.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "a's new value", leads("a2", ta.Token()), nil)
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	o.next(ctx, "no leader", noLeader, nil)
}
