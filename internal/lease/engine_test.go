package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock/driver"
)

// fakeGrant is a driver.Grant whose answers the test controls.
type fakeGrant struct {
	validFrom time.Time
	validity  time.Duration
	lost      chan error

	mu       sync.Mutex
	renewErr error
	renews   []time.Time // start of each Renew call
	released int
	renewed  chan struct{}
	delay    time.Duration // simulated round trip of every Renew
	gate     chan struct{} // if set, Renew calls after the first wait for it
}

func newFake(validity time.Duration) *fakeGrant {
	return &fakeGrant{validFrom: time.Now(), validity: validity, lost: make(chan error, 1), renewed: make(chan struct{}, 100)}
}

func (g *fakeGrant) Token() uint64           { return 7 }
func (g *fakeGrant) ValidFrom() time.Time    { return g.validFrom }
func (g *fakeGrant) Validity() time.Duration { return g.validity }
func (g *fakeGrant) Lost() <-chan error      { return g.lost }
func (g *fakeGrant) Renew(ctx context.Context) error {
	g.mu.Lock()
	g.renews = append(g.renews, time.Now())
	err, n := g.renewErr, len(g.renews)
	g.mu.Unlock()
	g.renewed <- struct{}{}
	time.Sleep(g.delay) // the simulated network, not a synchronisation
	if g.gate != nil && n > 1 {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
func (g *fakeGrant) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.released++
	return nil
}
func (g *fakeGrant) setRenewErr(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.renewErr = err
}

func waitDone(t *testing.T, e *Engine) {
	t.Helper()
	select {
	case <-e.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("lease not ended (watchdog)")
	}
}

func TestEngine_deadlineCountsFromValidFromWithMargin(t *testing.T) {
	g := newFake(time.Second)
	g.validFrom = time.Now().Add(-time.Hour) // granted long ago: already expired
	g.setRenewErr(errors.New("network down"))
	e := Start("k", g, nil, nil)
	defer e.Release(context.Background())
	want := g.validFrom.Add(time.Second - 10*time.Millisecond - DriftMargin)
	if got := e.Deadline(); !got.Equal(want) {
		t.Fatalf("deadline = %v, want ValidFrom + validity - 1%% - %v = %v", got, DriftMargin, want)
	}
	// Done is closed by the check in Done itself, before any goroutine ran.
	select {
	case <-e.Done():
	default:
		t.Fatal("Done not closed for a lease past its deadline")
	}
	if !errors.Is(e.Err(), driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", e.Err())
	}
}

func TestEngine_renewsAndMovesDeadlineFromSendTime(t *testing.T) {
	g := newFake(300 * time.Millisecond)
	g.delay = 50 * time.Millisecond
	g.gate = make(chan struct{})
	e := Start("k", g, nil, nil)
	defer e.Release(context.Background())
	defer close(g.gate)
	for range 2 {
		select {
		case <-g.renewed:
		case <-time.After(30 * time.Second):
			t.Fatal("no renewal (watchdog)")
		}
	}
	// The second renewal has started, so the first one's result is in; the
	// second is held at the gate.
	g.mu.Lock()
	sent := g.renews[0]
	g.mu.Unlock()
	d := e.Deadline()
	if d.After(e.deadlineFrom(sent)) {
		t.Fatalf("deadline %v counts from after the renewal was sent (%v): from its reply?", d, sent)
	}
	if !d.After(e.deadlineFrom(g.validFrom)) {
		t.Fatalf("deadline %v not moved by the renewal", d)
	}
	if err := e.Err(); err != nil {
		t.Fatalf("Err of a renewing lease = %v", err)
	}
}

func TestEngine_renewRefusedEndsLease(t *testing.T) {
	g := newFake(300 * time.Millisecond)
	g.setRenewErr(driver.ErrNotHeld)
	e := Start("k", g, nil, nil)
	waitDone(t, e)
	if !errors.Is(e.Err(), driver.ErrLeaseLost) || !errors.Is(e.Err(), driver.ErrNotHeld) {
		t.Fatalf("Err = %v, want ErrLeaseLost wrapping ErrNotHeld", e.Err())
	}
	if err := e.Release(context.Background()); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a lost lease = %v, want ErrNotHeld", err)
	}
	if g.released != 1 {
		t.Fatalf("driver Release called %d times, want 1 (clean up even a lost lease)", g.released)
	}
}

func TestEngine_transientFailuresExpireAtDeadline(t *testing.T) {
	g := newFake(300 * time.Millisecond)
	g.setRenewErr(errors.New("network down"))
	e := Start("k", g, nil, nil)
	deadline := e.Deadline()
	waitDone(t, e)
	if time.Now().Before(deadline) {
		t.Fatalf("lease ended before its deadline on transient errors")
	}
	if !errors.Is(e.Err(), driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", e.Err())
	}
	g.mu.Lock()
	n := len(g.renews)
	g.mu.Unlock()
	if n < 2 {
		t.Fatalf("renewal tried %d times before the deadline, want retries", n)
	}
}

func TestEngine_lostSignalEndsLease(t *testing.T) {
	g := newFake(time.Hour)
	e := Start("k", g, nil, nil)
	g.lost <- errors.New("session expired")
	waitDone(t, e)
	if !errors.Is(e.Err(), driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", e.Err())
	}
}

func TestEngine_releaseEndsWithErrReleased(t *testing.T) {
	g := newFake(time.Hour)
	e := Start("k", g, nil, nil)
	if err := e.Release(context.Background()); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if !errors.Is(e.Err(), ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", e.Err())
	}
	if err := e.Release(context.Background()); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
}

// doneAtRelease is a fakeGrant that records, when the server is asked to
// release, whether the lease had ended already.
type doneAtRelease struct {
	*fakeGrant
	done        <-chan struct{} // the lease's Done, taken before the release
	doneAlready bool
}

func (g *doneAtRelease) Release(ctx context.Context) error {
	select {
	case <-g.done: // the channel itself: Done would check the deadline
		g.doneAlready = true
	default:
	}
	return g.fakeGrant.Release(ctx)
}

// Done is closed, with the reason given, before the server hears of the
// release, which may hand the key to the next waiter at once: a
// Client.Close that releases leases under a running Client.Do must not
// leave the Do's context live until the server has answered.
func TestEngine_releaseWith_endsLeaseBeforeServerRelease(t *testing.T) {
	g := &doneAtRelease{fakeGrant: newFake(time.Hour)}
	e := Start("k", g, nil, nil)
	g.done = e.Done()
	closed := errors.New("closed")
	if err := e.ReleaseWith(context.Background(), closed); err != nil {
		t.Fatalf("ReleaseWith = %v", err)
	}
	if !g.doneAlready {
		t.Fatal("the grant was released on the server while Done was still open")
	}
	if !errors.Is(e.Err(), closed) {
		t.Fatalf("Err = %v, want the reason given", e.Err())
	}
}

// noLostGrant is a fakeGrant whose backend has no lost signal, as Redis.
type noLostGrant struct{ *fakeGrant }

func (noLostGrant) Lost() <-chan error { return nil }

// A lease whose grant has no Lost channel runs on timers alone: holding it
// costs no goroutine (Lock and Unlock wake no other thread), and it still
// renews and still ends at its deadline.
func TestEngine_withoutLostChannelHoldsNoGoroutine(t *testing.T) {
	const n = 200
	before := runtime.NumGoroutine()
	engines := make([]*Engine, n)
	for i := range engines {
		engines[i] = Start("k", noLostGrant{newFake(time.Hour)}, nil, nil)
	}
	if grew := runtime.NumGoroutine() - before; grew >= n/2 {
		t.Errorf("%d held leases added %d goroutines; want none", n, grew)
	}
	for _, e := range engines {
		if err := e.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	g := newFake(300 * time.Millisecond)
	e := Start("k", noLostGrant{g}, nil, nil)
	<-g.renewed // the renew timer fired
	g.setRenewErr(errors.New("transient"))
	waitDone(t, e)
	if err := e.Err(); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost at the deadline", err)
	}
}

// laggingGrant is a fakeGrant that implements driver.LaggingGrant: its
// server hears of the owner only at heard, which the test sets (as a
// ZooKeeper leader that hears of a follower's clients with the follower's
// next ping reply).
type laggingGrant struct {
	*fakeGrant
	hmu   sync.Mutex
	heard time.Time
}

func (g *laggingGrant) HeardFrom() time.Time {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	return g.heard
}

func (g *laggingGrant) setHeard(t time.Time) {
	g.hmu.Lock()
	defer g.hmu.Unlock()
	g.heard = t
}

// Renew renews like fakeGrant, and then the server has heard of the
// request before the renewal (ValidFrom for the first): the rule zkdlock
// applies when renewals are far enough apart.
func (g *laggingGrant) Renew(ctx context.Context) error {
	err := g.fakeGrant.Renew(ctx)
	g.mu.Lock()
	prev := g.validFrom
	if n := len(g.renews); n > 1 {
		prev = g.renews[n-2]
	}
	g.mu.Unlock()
	if err == nil {
		g.setHeard(prev)
	}
	return err
}

var _ driver.LaggingGrant = (*laggingGrant)(nil)

// The deadline of a LaggingGrant counts from HeardFrom when that is earlier
// than ValidFrom, at the start and after every renewal; the renewals stay
// on the schedule of the requests. Fails on an engine that ignores
// HeardFrom (the deadline counts from ValidFrom and from each renewal's
// start).
func TestEngine_laggingGrant_countsFromHeardFrom(t *testing.T) {
	const v = 3 * time.Second
	g := &laggingGrant{fakeGrant: newFake(v)}
	g.gate = make(chan struct{})
	g.setHeard(g.validFrom.Add(-v / 2))
	e := Start("k", g, nil, nil)
	defer e.Release(context.Background())
	defer close(g.gate)
	if got, want := e.Deadline(), e.deadlineFrom(g.HeardFrom()); !got.Equal(want) {
		t.Fatalf("deadline at start = %v, want HeardFrom + validity - margins = %v", got, want)
	}
	// HeardFrom is old, so the first renewal comes a third of the validity
	// before the deadline, not a third after ValidFrom.
	select {
	case <-g.renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal (watchdog)")
	}
	g.mu.Lock()
	first := g.renews[0]
	g.mu.Unlock()
	if latest := e.deadlineFrom(g.HeardFrom()).Add(-v / 3); first.After(latest.Add(time.Second)) {
		t.Fatalf("first renewal at %v, want about %v (a third of the validity before the deadline)", first, latest)
	}
	// The renewal succeeded; the server has heard only of ValidFrom so far.
	select {
	case <-g.renewed: // the second renewal started: the first one's result is in
	case <-time.After(30 * time.Second):
		t.Fatal("no second renewal (watchdog)")
	}
	if got, want := e.Deadline(), e.deadlineFrom(g.validFrom); !got.Equal(want) {
		t.Fatalf("deadline after a renewal = %v, want HeardFrom + validity - margins = %v (not from the renewal's start %v)", got, want, first)
	}
}

// A HeardFrom later than the request it follows does not stretch the
// deadline: the engine counts from the earlier of the two.
func TestEngine_laggingGrant_heardFromNeverLaterThanRequest(t *testing.T) {
	g := &laggingGrant{fakeGrant: newFake(time.Hour)}
	g.setHeard(g.validFrom.Add(time.Minute))
	e := Start("k", g, nil, nil)
	defer e.Release(context.Background())
	if got, want := e.Deadline(), e.deadlineFrom(g.validFrom); !got.Equal(want) {
		t.Fatalf("deadline = %v, want ValidFrom + validity - margins = %v", got, want)
	}
}

// A grant counted from its requests renews a third of the validity after
// each, as before.
func TestEngine_nextRenewal_unchangedForOtherGrants(t *testing.T) {
	g := newFake(time.Hour)
	e := Start("k", g, nil, nil)
	defer e.Release(context.Background())
	e.mu.Lock()
	next := e.nextRenewal(g.validFrom)
	e.mu.Unlock()
	if want := g.validFrom.Add(20 * time.Minute); !next.Equal(want) {
		t.Fatalf("next renewal at %v, want ValidFrom + validity/3 = %v", next, want)
	}
}

// TestEngine_errorTextSaysEachThingOnce pins the messages of a lost lease:
// they said the key twice and the category three times ("dlock: lock not
// held: key "k": dlock: lease lost: key "k": the server no longer has this
// grant: dlock: lock not held: …"). Lease.Err names the key once; Release
// does not (Unlock does), and neither repeats a category.
func TestEngine_errorTextSaysEachThingOnce(t *testing.T) {
	g := newFake(300 * time.Millisecond)
	g.setRenewErr(fmt.Errorf("%w: the key expired", driver.ErrNotHeld))
	e := Start("k", g, nil, nil)
	waitDone(t, e)
	if got, want := e.Err().Error(), `lease "k": dlock: lease lost: the key expired`; got != want {
		t.Errorf("Err = %s\nwant  %s", got, want)
	}
	err := e.Release(context.Background())
	if got, want := err.Error(), `dlock: lock not held: lease lost: the key expired`; got != want {
		t.Errorf("Release = %s\nwant      %s", got, want)
	}
	if !errors.Is(err, driver.ErrNotHeld) || !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Release = %v, want ErrNotHeld and ErrLeaseLost", err)
	}
	if got, want := e.Release(context.Background()).Error(), `dlock: lock not held: already unlocked`; got != want {
		t.Errorf("second Release = %s\nwant             %s", got, want)
	}

	g = newFake(300 * time.Millisecond)
	e = Start("k", g, nil, nil)
	g.lost <- errors.New("node deleted")
	waitDone(t, e)
	if got, want := e.Err().Error(), `lease "k": dlock: lease lost: node deleted`; got != want {
		t.Errorf("Err after Lost = %s\nwant            %s", got, want)
	}
	_ = e.Release(context.Background())
}

// stuckGrant is a fakeGrant whose renewals, after the first, hang until
// the test ends, whatever their ctx says.
type stuckGrant struct {
	*fakeGrant
	stuck   chan struct{}
	renewed chan struct{}
}

func (g *stuckGrant) Renew(ctx context.Context) error {
	g.renewed <- struct{}{}
	<-g.stuck
	return nil
}

// The lease's one timer waits for the deadline while a renewal is in
// flight: a renewal that never answers does not hold Done open.
func TestEngine_renewalInFlight_deadlineStillEndsLease(t *testing.T) {
	g := &stuckGrant{fakeGrant: newFake(300 * time.Millisecond), stuck: make(chan struct{}), renewed: make(chan struct{}, 1)}
	defer close(g.stuck)
	e := Start("k", g, nil, nil)
	done := e.Done()
	select {
	case <-g.renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal (watchdog)")
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("lease not ended at its deadline while its renewal hangs (watchdog)")
	}
	if err := e.Err(); !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
}
