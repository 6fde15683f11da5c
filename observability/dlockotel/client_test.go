package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
	"go.opentelemetry.io/otel/codes"
)

// These tests run the hooks under a real Client, on memdlock.

// deadline bounds every wait of these tests.
const deadline = 10 * time.Second

// signals are hooks, given after dlockotel's, that tell the test an event
// happened: the Client calls hook sets in order, so dlockotel has seen it.
type signals struct {
	started, ended, unprotected chan struct{}
}

func newSignals() *signals {
	return &signals{make(chan struct{}, 16), make(chan struct{}, 16), make(chan struct{}, 16)}
}

func (s *signals) hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: func(ctx context.Context, _ dlock.AcquireStartInfo) context.Context {
			s.started <- struct{}{}
			return ctx
		},
		LeaseEnded:  func(context.Context, dlock.LeaseEndedInfo) { s.ended <- struct{}{} },
		Unprotected: func(context.Context, dlock.UnprotectedInfo) { s.unprotected <- struct{}{} },
	}
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(deadline):
		t.Fatalf("no %s within %v", what, deadline)
	}
}

// newClient returns a memdlock Client with h's hooks and s's after them,
// and its Handle.
func newClient(t *testing.T, h *harness, s *signals) (*dlock.Client, *memdlock.Handle) {
	t.Helper()
	client, handle, err := memdlock.New(nil, dlock.WithHooks(h.in.Hooks()), dlock.WithHooks(s.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client, handle
}

var mem = attrs{"dlock.backend": "mem", "dlock.primitive": "lock"}

func TestClient_lockUnlock(t *testing.T) {
	h, s := newHarness(t), newSignals()
	client, _ := newClient(t, h, s)
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "job")
	lease, err := client.Lock(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	rm := h.collect(t)
	if got, _ := sum(t, rm, "dlock.leases.active", mem); got != 1 {
		t.Errorf("dlock.leases.active = %d while held, want 1", got)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, s.ended, "LeaseEnded")
	job.End()

	acq, hold := h.one(t, "dlock.acquire"), h.one(t, "dlock.hold")
	if acq.Parent().SpanID() != job.SpanContext().SpanID() || hold.Parent().SpanID() != job.SpanContext().SpanID() {
		t.Errorf("parents: dlock.acquire %v, dlock.hold %v; want both the caller's span %v", acq.Parent().SpanID(), hold.Parent().SpanID(), job.SpanContext().SpanID())
	}
	if links := hold.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != acq.SpanContext().SpanID() {
		t.Errorf("dlock.hold's links %v, want dlock.acquire", links)
	}
	token := int64(lease.Token())
	for _, sp := range []struct {
		name string
		want map[string]string
	}{
		{"dlock.acquire", map[string]string{"dlock.backend": "mem", "dlock.outcome": "acquired", "dlock.wait": "true"}},
		{"dlock.hold", map[string]string{"dlock.backend": "mem", "dlock.reason": "released"}},
	} {
		span := h.one(t, sp.name)
		for k, want := range sp.want {
			if got := attr(t, span, k).String(); got != want {
				t.Errorf("%s %s = %s, want %s", sp.name, k, got, want)
			}
		}
		if got := attr(t, span, "dlock.token").AsInt64(); got != token {
			t.Errorf("%s dlock.token = %d, want the lease's %d", sp.name, got, token)
		}
	}
	if hold.EndTime().Before(acq.EndTime()) {
		t.Error("dlock.hold ended before dlock.acquire")
	}

	rm = h.collect(t)
	if n, _ := histogram(t, rm, "dlock.acquire.duration", with(mem, "dlock.outcome", "acquired")); n != 1 {
		t.Errorf("dlock.acquire.duration{acquired}: %d measurements, want 1", n)
	}
	if n, _ := histogram(t, rm, "dlock.hold.duration", with(mem, "dlock.reason", "released")); n != 1 {
		t.Errorf("dlock.hold.duration{released}: %d measurements, want 1", n)
	}
	if got, _ := sum(t, rm, "dlock.leases.active", mem); got != 0 {
		t.Errorf("dlock.leases.active = %d after Unlock, want 0", got)
	}
}

func TestClient_lostLease(t *testing.T) {
	h, s := newHarness(t), newSignals()
	client, handle := newClient(t, h, s)
	ctx := context.Background()
	lease, err := client.Lock(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if !handle.LoseLease("orders/42") {
		t.Fatal("LoseLease: the client held no lease")
	}
	await(t, s.ended, "LeaseEnded")

	hold := h.one(t, "dlock.hold")
	if st := hold.Status(); st.Code != codes.Error {
		t.Errorf("dlock.hold's status %v, want Error for a lost lease", st)
	}
	if got := attr(t, hold, "dlock.reason").String(); got != "dropped" {
		t.Errorf("dlock.reason = %s, want dropped", got)
	}
	rm := h.collect(t)
	if got, _ := sum(t, rm, "dlock.lease.lost", with(mem, "dlock.reason", "dropped")); got != 1 {
		t.Errorf("dlock.lease.lost{dropped} = %d, want 1", got)
	}
	if got, _ := sum(t, rm, "dlock.leases.active", mem); got != 0 {
		t.Errorf("dlock.leases.active = %d after the loss, want 0", got)
	}
	if lease.Err() == nil {
		t.Error("the lease's Err is nil after its loss was reported")
	}
}

// A TryLock of a held key is skipped, a Lock that waits past its deadline
// times out; dlock.waiters counts the waiting Lock only while it waits.
func TestClient_skippedAndTimedOut(t *testing.T) {
	h, s := newHarness(t), newSignals()
	holder, handle := newClient(t, h, s)
	ctx := context.Background()
	if _, err := holder.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	await(t, s.started, "the holder's AcquireStart")
	other, _, err := handle.NewClient(dlock.WithHooks(h.in.Hooks()), dlock.WithHooks(s.hooks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })

	if _, err := other.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock of a held key: %v, want ErrLocked", err)
	}
	await(t, s.started, "TryLock's AcquireStart")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := other.Lock(wctx, "k")
		waited <- err
	}()
	await(t, s.started, "the waiter's AcquireStart")
	if got, _ := sum(t, h.collect(t), "dlock.waiters", mem); got != 1 {
		t.Errorf("dlock.waiters = %d while a Lock waits (and a TryLock has ended), want 1", got)
	}
	cancel()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled Lock: %v, want context.Canceled", err)
		}
	case <-time.After(deadline):
		t.Fatal("the cancelled Lock did not return")
	}

	tctx, tcancel := context.WithTimeout(ctx, time.Millisecond)
	defer tcancel()
	if _, err := other.Lock(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v, want context.DeadlineExceeded", err)
	}

	rm := h.collect(t)
	for outcome, want := range map[string]uint64{"acquired": 1, "skipped": 1, "canceled": 1, "timeout": 1} {
		if n, _ := histogram(t, rm, "dlock.acquire.duration", with(mem, "dlock.outcome", outcome)); n != want {
			t.Errorf("dlock.acquire.duration{%s}: %d measurements, want %d", outcome, n, want)
		}
	}
	if got, _ := sum(t, rm, "dlock.waiters", mem); got != 0 {
		t.Errorf("dlock.waiters = %d after every wait ended, want 0", got)
	}
	codesOf := map[string]codes.Code{}
	for _, sp := range h.ended("dlock.acquire") {
		codesOf[attr(t, sp, "dlock.outcome").String()] = sp.Status().Code
	}
	want := map[string]codes.Code{"acquired": codes.Unset, "skipped": codes.Unset, "canceled": codes.Unset, "timeout": codes.Error}
	for o, c := range want {
		if got, ok := codesOf[o]; !ok || got != c {
			t.Errorf("dlock.acquire{%s} status %v (seen %v), want %v", o, got, ok, c)
		}
	}
}

// A Do whose function runs on after its lease is lost reports how long it
// ran unprotected.
func TestClient_Do_unprotected(t *testing.T) {
	h, s := newHarness(t), newSignals()
	client, handle := newClient(t, h, s)
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "job")
	err := client.Do(ctx, "k", func(ctx context.Context) error {
		handle.LoseLease("k")
		select {
		case <-ctx.Done(): // the lease's loss cancels it
		case <-time.After(deadline):
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Do: %v, want ErrLeaseLost", err)
	}
	await(t, s.unprotected, "Unprotected")
	job.End()
	if events := h.one(t, "job").Events(); len(events) != 1 || events[0].Name != "dlock.unprotected" {
		t.Errorf("the job's span's events %v, want dlock.unprotected", events)
	}
	if n, _ := histogram(t, h.collect(t), "dlock.unprotected.duration", with(mem, "dlock.reason", "dropped")); n != 1 {
		t.Errorf("dlock.unprotected.duration{dropped}: %d measurements, want 1", n)
	}
}

// with returns a with k=v added.
func with(a attrs, k, v string) attrs {
	out := attrs{k: v}
	for k, v := range a {
		out[k] = v
	}
	return out
}
