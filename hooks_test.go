package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
)

// recorder keeps every hook call of a Client, in order.
type recorder struct {
	mu      sync.Mutex
	events  []any // the *Info values
	ctxs    []context.Context
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(ctx context.Context, ev any) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: func(ctx context.Context, i dlock.AcquireStartInfo) context.Context { r.add(ctx, i); return ctx },
		AcquireDone:  func(ctx context.Context, i dlock.AcquireDoneInfo) context.Context { r.add(ctx, i); return ctx },
		Renewed:      func(ctx context.Context, i dlock.RenewedInfo) { r.add(ctx, i) },
		LeaseEnded:   func(ctx context.Context, i dlock.LeaseEndedInfo) { r.add(ctx, i) },
		Unprotected:  func(ctx context.Context, i dlock.UnprotectedInfo) { r.add(ctx, i) },
	}
}

func (r *recorder) snapshot() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.events...)
}

// waitFor waits until an event of type T for which ok holds has been
// recorded, and returns the first; it fails the test after 10 seconds.
func waitFor[T any](t *testing.T, r *recorder, ok func(T) bool) T {
	t.Helper()
	watchdog := time.NewTimer(10 * time.Second)
	defer watchdog.Stop()
	for {
		for _, ev := range r.snapshot() {
			if v, is := ev.(T); is && (ok == nil || ok(v)) {
				return v
			}
		}
		select {
		case <-r.changed:
		case <-watchdog.C:
			var zero T
			t.Fatalf("no %T recorded (watchdog); events: %+v", zero, r.snapshot())
		}
	}
}

// all returns the recorded events of type T.
func all[T any](r *recorder) []T {
	var out []T
	for _, ev := range r.snapshot() {
		if v, ok := ev.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// hooked returns a memdlock Client that reports to a new recorder, and
// its Handle.
func hooked(t *testing.T, opts *memdlock.Options, copts ...dlock.Option) (*dlock.Client, *memdlock.Handle, *recorder) {
	t.Helper()
	r := newRecorder()
	c, h, err := memdlock.New(opts, append([]dlock.Option{dlock.WithHooks(r.hooks())}, copts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, h, r
}

// endedOnce waits for the lease's LeaseEnded, checks that it is the only
// one and that it describes l, and returns it.
func endedOnce(t *testing.T, r *recorder, l *dlock.Lease, want dlock.EndReason) dlock.LeaseEndedInfo {
	t.Helper()
	got := waitFor[dlock.LeaseEndedInfo](t, r, nil)
	<-l.Done()
	if got.Reason != want || got.Token != l.Token() || got.Key != l.Key() || got.Backend != "mem" || got.Mode != l.Mode() {
		t.Errorf("LeaseEnded = %+v, want reason %v for %q, token %d, backend mem", got, want, l.Key(), l.Token())
	}
	if !errors.Is(got.Err, l.Err()) && got.Err != l.Err() {
		t.Errorf("LeaseEnded.Err = %v, want the lease's Err %v", got.Err, l.Err())
	}
	if got.Held < 0 {
		t.Errorf("LeaseEnded.Held = %v, want ≥ 0", got.Held)
	}
	if n := len(all[dlock.LeaseEndedInfo](r)); n != 1 {
		t.Errorf("%d LeaseEnded calls, want 1: %+v", n, r.snapshot())
	}
	return got
}

// TestHooks_acquiredThenReleased: a Lock reports its start and its grant
// with the lease's token, and its Unlock one end, released.
func TestHooks_acquiredThenReleased(t *testing.T) {
	c, _, r := hooked(t, nil)
	ctx := context.Background()
	l, err := c.Lock(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	evs := r.snapshot()
	if len(evs) != 2 {
		t.Fatalf("events after Lock: %+v, want AcquireStart and AcquireDone", evs)
	}
	start, ok := evs[0].(dlock.AcquireStartInfo)
	if want := (dlock.AcquireStartInfo{Backend: "mem", Key: "jobs/a", Kind: dlock.KindLock, Mode: dlock.Exclusive, Limit: 1, Wait: true}); !ok || start != want {
		t.Errorf("first event %+v, want %+v", evs[0], want)
	}
	done, ok := evs[1].(dlock.AcquireDoneInfo)
	if !ok || done.Outcome != dlock.OutcomeAcquired || done.Token != l.Token() || done.Err != nil || done.Backend != "mem" ||
		done.Key != "jobs/a" || done.Kind != dlock.KindLock || done.Limit != 1 || done.Waited <= 0 {
		t.Errorf("second event %+v, want AcquireDone acquired with token %d", evs[1], l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := endedOnce(t, r, l, dlock.EndReleased)
	if !errors.Is(got.Err, dlock.ErrReleased) {
		t.Errorf("LeaseEnded.Err = %v, want ErrReleased", got.Err)
	}
}

// TestHooks_outcomes: each way an acquire ends is reported as its
// outcome, with the error the call returned and no token, and bad input
// is reported too (AcquireStart comes before any check).
func TestHooks_outcomes(t *testing.T) {
	c, h, r := hooked(t, nil)
	ctx := context.Background()
	other, _, err := h.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)

	expired, cancelExpired := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancelExpired()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	closed, _, err := memdlock.New(nil, dlock.WithHooks(r.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()

	cases := []struct {
		name     string
		call     func() error
		key      string
		wait     bool
		want     dlock.Outcome
		wantErr  error
		wantKind dlock.Kind
	}{
		{"TryLock", func() error { _, err := c.TryLock(ctx, "held"); return err }, "held", false, dlock.OutcomeSkipped, dlock.ErrLocked, dlock.KindLock},
		{"NoWait", func() error { _, err := c.Lock(ctx, "held", dlock.NoWait()); return err }, "held", false, dlock.OutcomeSkipped, dlock.ErrLocked, dlock.KindLock},
		{"deadline", func() error { _, err := c.Lock(expired, "held"); return err }, "held", true, dlock.OutcomeTimeout, context.DeadlineExceeded, dlock.KindLock},
		{"canceled", func() error { _, err := c.Lock(canceled, "held"); return err }, "held", true, dlock.OutcomeCanceled, context.Canceled, dlock.KindLock},
		{"closed", func() error { _, err := closed.Lock(ctx, "free"); return err }, "free", true, dlock.OutcomeCanceled, dlock.ErrClosed, dlock.KindLock},
		{"bad key", func() error { _, err := c.Lock(ctx, ""); return err }, "", true, dlock.OutcomeError, dlock.ErrInvalidKey, dlock.KindLock},
		{"kind mismatch", func() error { _, err := c.Semaphore("held", 2).Acquire(ctx); return err }, "held", true, dlock.OutcomeError, dlock.ErrKindMismatch, dlock.KindSemaphore},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(r.snapshot())
			err := tc.call()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			evs := r.snapshot()[before:]
			if len(evs) != 2 {
				t.Fatalf("events: %+v, want AcquireStart and AcquireDone", evs)
			}
			start, ok := evs[0].(dlock.AcquireStartInfo)
			if !ok || start.Key != tc.key || start.Wait != tc.wait || start.Kind != tc.wantKind {
				t.Errorf("first event %+v, want AcquireStart of %q, kind %v, Wait %v", evs[0], tc.key, tc.wantKind, tc.wait)
			}
			done, ok := evs[1].(dlock.AcquireDoneInfo)
			if !ok || done.Outcome != tc.want || done.Err != err || done.Token != 0 || done.Key != tc.key {
				t.Errorf("second event %+v, want AcquireDone %v with the call's error %v and no token", evs[1], tc.want, err)
			}
		})
	}
}

// TestHooks_renewed: each renewal is reported with the lease's token and
// its latency and lateness; a frozen client's failed ones with their
// error, until the lease expires at its local deadline (the fake clock,
// never advanced, keeps the space from dropping it first).
func TestHooks_renewedThenExpired(t *testing.T) {
	c, h, r := hooked(t, &memdlock.Options{Clock: memdlock.NewClock(time.Now())})
	// A second leaves a renewal (due after a third of it) two thirds of
	// it to be late by on a loaded machine before the lease expires.
	l, err := c.Lock(context.Background(), "renewed", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ok := waitFor(t, r, func(i dlock.RenewedInfo) bool { return i.Err == nil })
	if ok.Token != l.Token() || ok.Key != "renewed" || ok.Backend != "mem" || ok.Kind != dlock.KindLock || ok.Mode != dlock.Exclusive || ok.Latency < 0 || ok.Late < 0 {
		t.Errorf("Renewed = %+v, want the lease's, with latency and lateness ≥ 0", ok)
	}
	h.Freeze()
	failed := waitFor(t, r, func(i dlock.RenewedInfo) bool { return i.Err != nil })
	if !errors.Is(failed.Err, dlock.ErrUnavailable) || failed.Token != l.Token() {
		t.Errorf("failed Renewed = %+v, want ErrUnavailable for token %d", failed, l.Token())
	}
	got := endedOnce(t, r, l, dlock.EndExpired)
	if !errors.Is(got.Err, dlock.ErrLeaseLost) {
		t.Errorf("LeaseEnded.Err = %v, want ErrLeaseLost", got.Err)
	}
	evs := r.snapshot()
	if _, last := evs[len(evs)-1].(dlock.LeaseEndedInfo); !last {
		t.Errorf("events after LeaseEnded: %+v", evs)
	}
}

// TestHooks_dropped: a lease the server drops ends once, dropped.
func TestHooks_dropped(t *testing.T) {
	c, h, r := hooked(t, nil)
	l, err := c.Lock(context.Background(), "dropped")
	if err != nil {
		t.Fatal(err)
	}
	h.LoseLease("dropped")
	got := endedOnce(t, r, l, dlock.EndDropped)
	if !errors.Is(got.Err, dlock.ErrLeaseLost) {
		t.Errorf("LeaseEnded.Err = %v, want ErrLeaseLost", got.Err)
	}
	_ = l.Unlock(context.Background()) // ErrNotHeld, and no second end
	if n := len(all[dlock.LeaseEndedInfo](r)); n != 1 {
		t.Errorf("%d LeaseEnded calls after Unlock, want 1", n)
	}
}

// TestHooks_holdLimit: a lease released at its HoldAtMost ends once, at
// the limit, and a job still running then is reported as unprotected.
func TestHooks_holdLimit(t *testing.T) {
	c, _, r := hooked(t, nil)
	ctx := context.Background()
	var lease *dlock.Lease
	err := c.Do(ctx, "limited", func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		<-ctx.Done() // the limit cancels it
		return nil
	}, dlock.HoldAtMost(dlock.MinTTL))
	if !errors.Is(err, dlock.ErrHoldLimit) {
		t.Fatalf("Do = %v, want ErrHoldLimit", err)
	}
	got := endedOnce(t, r, lease, dlock.EndHoldLimit)
	if got.Held < dlock.MinTTL {
		t.Errorf("LeaseEnded.Held = %v, want at least the maximum hold %v", got.Held, dlock.MinTTL)
	}
	u := waitFor[dlock.UnprotectedInfo](t, r, nil)
	if u.Reason != dlock.EndHoldLimit || u.Token != lease.Token() || u.Key != "limited" || u.Backend != "mem" || u.Unprotected < 0 {
		t.Errorf("Unprotected = %+v, want hold_limit for token %d", u, lease.Token())
	}
}

// TestHooks_unprotectedAfterLoss: Do's function that returns after its
// lease was lost is reported with how long it ran on; one that returns
// while the lease is held is not.
func TestHooks_unprotectedAfterLoss(t *testing.T) {
	c, h, r := hooked(t, nil)
	ctx := context.Background()
	if err := c.Do(ctx, "fine", func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var lease *dlock.Lease
	err := c.Do(ctx, "lost", func(ctx context.Context) error {
		lease, _ = dlock.LeaseFromContext(ctx)
		h.LoseLease("lost")
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Do = %v, want ErrLeaseLost", err)
	}
	us := all[dlock.UnprotectedInfo](r)
	if len(us) != 1 {
		t.Fatalf("Unprotected calls: %+v, want one, for the lost lease", us)
	}
	if u := us[0]; u.Reason != dlock.EndDropped || u.Token != lease.Token() || u.Key != "lost" || u.Kind != dlock.KindLock || u.Unprotected < 0 {
		t.Errorf("Unprotected = %+v, want dropped for token %d", u, lease.Token())
	}
}

// TestHooks_closed: Close ends a held lease once, closed; one in its
// minimum hold too, which it abandons.
func TestHooks_closed(t *testing.T) {
	c, _, r := hooked(t, nil)
	ctx := context.Background()
	l, err := c.Lock(ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	endedOnce(t, r, l, dlock.EndClosed)

	c, _, r = hooked(t, nil)
	l, err = c.Lock(ctx, "abandoned", dlock.HoldAtLeast(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil { // deferred to the end of the hold
		t.Fatal(err)
	}
	_ = c.Close()
	endedOnce(t, r, l, dlock.EndClosed)
}

// TestHooks_holdAtLeastDeferredRelease: an Unlock within the minimum hold
// ends the lease once, released, when the hold has passed.
func TestHooks_holdAtLeastDeferredRelease(t *testing.T) {
	c, _, r := hooked(t, nil)
	ctx := context.Background()
	const hold = 300 * time.Millisecond
	l, err := c.Lock(ctx, "deferred", dlock.HoldAtLeast(hold))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := endedOnce(t, r, l, dlock.EndReleased)
	if got.Held < hold {
		t.Errorf("LeaseEnded.Held = %v, want at least the minimum hold %v", got.Held, hold)
	}
}

type ctxKey string

// TestHooks_severalSetsInOrder: given WithHooks more than once, the
// Client calls every set in order (an empty one changes nothing), passing
// each the context the one before returned; AcquireDone's last one is kept
// for the lease's later hooks.
func TestHooks_severalSetsInOrder(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	tag := func(name string) dlock.Hooks {
		return dlock.Hooks{
			AcquireStart: func(ctx context.Context, i dlock.AcquireStartInfo) context.Context {
				note(fmt.Sprintf("%s start %v", name, ctx.Value(ctxKey("start"))))
				return context.WithValue(ctx, ctxKey("start"), name)
			},
			AcquireDone: func(ctx context.Context, i dlock.AcquireDoneInfo) context.Context {
				note(fmt.Sprintf("%s done %v %v", name, ctx.Value(ctxKey("start")), ctx.Value(ctxKey("done"))))
				return context.WithValue(ctx, ctxKey("done"), name)
			},
			LeaseEnded: func(ctx context.Context, i dlock.LeaseEndedInfo) {
				note(fmt.Sprintf("%s ended %v", name, ctx.Value(ctxKey("done"))))
			},
		}
	}
	c, _, err := memdlock.New(nil, dlock.WithHooks(tag("one")), dlock.WithHooks(dlock.Hooks{}), dlock.WithHooks(tag("two")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.Lock(ctx, "ordered")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	want := []string{"one start <nil>", "two start one", "one done two <nil>", "two done two one", "one ended two", "two ended two"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("calls:\n%q\nwant\n%q", calls, want)
	}
}

// TestHooks_contextReachesBackend: the context AcquireStart returns is
// the one the acquire works with: cancelled there, the Lock fails.
func TestHooks_contextReachesBackend(t *testing.T) {
	c, h, err := memdlock.New(nil, dlock.WithHooks(dlock.Hooks{
		AcquireStart: func(ctx context.Context, i dlock.AcquireStartInfo) context.Context {
			ctx, cancel := context.WithCancelCause(ctx)
			cancel(errors.New("from the hook"))
			return ctx
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, _, err := h.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	watchdog, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Lock(watchdog, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v, want context.Canceled from the hook's context", err)
	}
}

// TestHooks_election: a won campaign is an acquire of KindElection, its
// resignation the end of the lease; a campaign that gives up while another
// leads is reported with its outcome.
func TestHooks_election(t *testing.T) {
	c, h, r := hooked(t, nil)
	ctx := context.Background()
	term, err := c.Election("leader").Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	done := waitFor(t, r, func(i dlock.AcquireDoneInfo) bool { return i.Outcome == dlock.OutcomeAcquired })
	if done.Kind != dlock.KindElection || done.Token != term.Token() || done.Key != "leader" {
		t.Errorf("AcquireDone = %+v, want an election won with token %d", done, term.Token())
	}

	other, _, err := h.NewClient(dlock.WithHooks(r.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Election("leader").Campaign(ctx, "you", dlock.NoWait()); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("second Campaign = %v, want ErrLocked", err)
	}
	lost := waitFor(t, r, func(i dlock.AcquireDoneInfo) bool { return i.Outcome != dlock.OutcomeAcquired })
	if lost.Kind != dlock.KindElection || lost.Outcome != dlock.OutcomeSkipped {
		t.Errorf("AcquireDone = %+v, want an election skipped", lost)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	got := endedOnce(t, r, term.Lease(), dlock.EndReleased)
	if got.Kind != dlock.KindElection {
		t.Errorf("LeaseEnded = %+v, want KindElection", got)
	}
}
