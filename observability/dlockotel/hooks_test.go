package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/observability/dlockotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// These tests call the Hooks' functions as a Client does, in the order the
// dlock.Hooks documentation gives; clients_test.go runs them under a real
// Client.

var startLock = dlock.AcquireStartInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Limit: 1, Wait: true}

func doneLock(outcome dlock.Outcome, token uint64, err error) dlock.AcquireDoneInfo {
	return dlock.AcquireDoneInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Limit: 1,
		Outcome: outcome, Waited: 30 * time.Millisecond, Token: token, Err: err}
}

func TestHooks_acquireSpan_parentsTheBackendsSpans(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "job")

	actx := hooks.AcquireStart(ctx, startLock)
	// What a traced backend client does with the context it is given.
	_, backend := h.tp.Tracer("redis").Start(actx, "EVALSHA")
	backend.End()
	hooks.AcquireDone(actx, doneLock(dlock.OutcomeAcquired, 7, nil))
	job.End()

	acq := h.one(t, "dlock.acquire")
	if got, want := acq.Parent().SpanID(), job.SpanContext().SpanID(); got != want {
		t.Errorf("dlock.acquire's parent is %v, want the caller's span %v", got, want)
	}
	if got, want := h.one(t, "EVALSHA").Parent().SpanID(), acq.SpanContext().SpanID(); got != want {
		t.Errorf("the backend's span's parent is %v, want dlock.acquire %v", got, want)
	}
	for k, want := range map[string]string{
		"dlock.backend": "redis", "dlock.primitive": "lock", "dlock.mode": "exclusive",
		"dlock.wait": "true", "dlock.outcome": "acquired", "dlock.token": "7",
	} {
		if got := attr(t, acq, k).String(); got != want {
			t.Errorf("dlock.acquire %s = %s, want %s", k, got, want)
		}
	}
	if hasAttr(acq, "dlock.key") {
		t.Error("dlock.acquire has dlock.key without WithKeyAttribute")
	}
	if acq.Status().Code != codes.Unset {
		t.Errorf("dlock.acquire's status %v, want unset for a grant", acq.Status())
	}
}

func TestHooks_holdSpan_siblingOfAcquireLinkedToIt(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "job")
	defer job.End()

	lctx := hooks.AcquireDone(hooks.AcquireStart(ctx, startLock), doneLock(dlock.OutcomeAcquired, 7, nil))
	if n := len(h.ended("dlock.hold")); n != 0 {
		t.Fatalf("%d dlock.hold spans ended while the lease is held", n)
	}
	hooks.Renewed(lctx, dlock.RenewedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Token: 7, Latency: time.Millisecond})
	renewErr := fmt.Errorf("%w: connection refused", dlock.ErrUnavailable)
	hooks.Renewed(lctx, dlock.RenewedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Token: 7,
		Latency: 2 * time.Second, Late: 500 * time.Millisecond, Err: renewErr})
	hooks.LeaseEnded(lctx, dlock.LeaseEndedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Token: 7,
		Reason: dlock.EndDropped, Held: 90 * time.Second, Err: dlock.ErrLeaseLost})

	acq, hold := h.one(t, "dlock.acquire"), h.one(t, "dlock.hold")
	if got, want := hold.Parent().SpanID(), job.SpanContext().SpanID(); got != want {
		t.Errorf("dlock.hold's parent is %v, want the caller's span %v (dlock.acquire is %v)", got, want, acq.SpanContext().SpanID())
	}
	if links := hold.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != acq.SpanContext().SpanID() {
		t.Errorf("dlock.hold's links %v, want one to dlock.acquire %v", links, acq.SpanContext().SpanID())
	}
	for k, want := range map[string]string{
		"dlock.backend": "redis", "dlock.primitive": "lock", "dlock.mode": "exclusive", "dlock.token": "7",
		"dlock.reason": "dropped", "dlock.held": "90",
	} {
		if got := attr(t, hold, k).String(); got != want {
			t.Errorf("dlock.hold %s = %s, want %s", k, got, want)
		}
	}
	if st := hold.Status(); st.Code != codes.Error || st.Description != dlock.ErrLeaseLost.Error() {
		t.Errorf("dlock.hold's status %v, want Error with the lease's Err for a lost lease", st)
	}
	events := hold.Events()
	if len(events) != 1 || events[0].Name != "dlock.renew.failed" {
		t.Fatalf("dlock.hold's events %v, want one dlock.renew.failed (for the failed renewal only)", events)
	}
	want := map[string]string{"exception.message": renewErr.Error(), "dlock.renew.latency": "2", "dlock.renew.late": "0.5"}
	for _, kv := range events[0].Attributes {
		if w, ok := want[string(kv.Key)]; ok && kv.Value.String() == w {
			delete(want, string(kv.Key))
		}
	}
	if len(want) != 0 {
		t.Errorf("dlock.renew.failed's attributes %v lack %v", events[0].Attributes, want)
	}
}

func TestHooks_holdSpan_releasedIsNoError(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	lctx := hooks.AcquireDone(hooks.AcquireStart(context.Background(), startLock), doneLock(dlock.OutcomeAcquired, 3, nil))
	hooks.LeaseEnded(lctx, dlock.LeaseEndedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Mode: dlock.Exclusive, Token: 3,
		Reason: dlock.EndReleased, Held: time.Second, Err: dlock.ErrNotHeld})

	hold := h.one(t, "dlock.hold")
	if hold.Status().Code != codes.Unset {
		t.Errorf("dlock.hold's status %v, want unset for a released lease", hold.Status())
	}
	if got := attr(t, hold, "dlock.reason").String(); got != "released" {
		t.Errorf("dlock.reason = %s, want released", got)
	}
	// Without a caller's span both are roots, of different traces, and the
	// link is what relates them.
	acq := h.one(t, "dlock.acquire")
	if hold.Parent().IsValid() || acq.Parent().IsValid() {
		t.Errorf("parents %v and %v, want none: the caller had no span", hold.Parent(), acq.Parent())
	}
	if links := hold.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != acq.SpanContext().TraceID() {
		t.Errorf("dlock.hold's links %v, want one to dlock.acquire", links)
	}
}

func TestHooks_acquireSpan_statusByOutcome(t *testing.T) {
	for _, tc := range []struct {
		outcome dlock.Outcome
		err     error
		code    codes.Code
	}{
		{dlock.OutcomeSkipped, dlock.ErrLocked, codes.Unset},
		{dlock.OutcomeCanceled, context.Canceled, codes.Unset},
		{dlock.OutcomeTimeout, context.DeadlineExceeded, codes.Error},
		{dlock.OutcomeError, dlock.ErrKindMismatch, codes.Error},
	} {
		t.Run(tc.outcome.String(), func(t *testing.T) {
			h := newHarness(t)
			hooks := h.in.Hooks()
			ctx := hooks.AcquireStart(context.Background(), startLock)
			if got := hooks.AcquireDone(ctx, doneLock(tc.outcome, 0, tc.err)); got != ctx {
				t.Error("AcquireDone of a call that was not granted returned a new context: nothing is kept for it")
			}
			acq := h.one(t, "dlock.acquire")
			if st := acq.Status(); st.Code != tc.code || (tc.code == codes.Error && st.Description != tc.err.Error()) {
				t.Errorf("status %v, want %v", st, tc.code)
			}
			if got := attr(t, acq, "dlock.outcome").String(); got != tc.outcome.String() {
				t.Errorf("dlock.outcome = %s, want %s", got, tc.outcome)
			}
			if hasAttr(acq, "dlock.token") {
				t.Error("dlock.token on a call that was not granted")
			}
			if n := len(h.spans.Started()); n != 1 {
				t.Errorf("%d spans started, want dlock.acquire alone: no hold without a grant", n)
			}
		})
	}
}

func TestWithKeyAttribute(t *testing.T) {
	h := newHarness(t, dlockotel.WithKeyAttribute())
	hooks := h.in.Hooks()
	lctx := hooks.AcquireDone(hooks.AcquireStart(context.Background(), startLock), doneLock(dlock.OutcomeAcquired, 1, nil))
	hooks.LeaseEnded(lctx, dlock.LeaseEndedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Token: 1, Reason: dlock.EndReleased})
	for _, name := range []string{"dlock.acquire", "dlock.hold"} {
		if got := attr(t, h.one(t, name), "dlock.key").String(); got != "orders/42" {
			t.Errorf("%s dlock.key = %q, want orders/42", name, got)
		}
	}
	rm := h.collect(t)
	if n, _ := histogram(t, rm, "dlock.acquire.duration", attrs{"dlock.backend": "redis", "dlock.primitive": "lock", "dlock.outcome": "acquired"}); n != 1 {
		t.Errorf("dlock.acquire.duration has %d measurements without a key, want 1: metrics never carry the key", n)
	}
}

func TestHooks_semaphoreLimit(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	ctx := hooks.AcquireStart(context.Background(), dlock.AcquireStartInfo{Backend: "etcd", Key: "s", Kind: dlock.KindSemaphore, Mode: dlock.Shared, Limit: 3})
	hooks.AcquireDone(ctx, dlock.AcquireDoneInfo{Backend: "etcd", Key: "s", Kind: dlock.KindSemaphore, Mode: dlock.Shared, Limit: 3, Outcome: dlock.OutcomeSkipped, Err: dlock.ErrLocked})
	acq := h.one(t, "dlock.acquire")
	for k, want := range map[string]string{"dlock.primitive": "semaphore", "dlock.mode": "shared", "dlock.limit": "3", "dlock.wait": "false"} {
		if got := attr(t, acq, k).String(); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
}

// Two Instrumentations on one Client, each to its own TracerProvider: each
// ends its own spans, whatever the other put in the contexts.
func TestHooks_twoInstrumentationsKeepApart(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	ha, hb := a.in.Hooks(), b.in.Hooks()
	ctx := hb.AcquireStart(ha.AcquireStart(context.Background(), startLock), startLock)
	ctx = hb.AcquireDone(ha.AcquireDone(ctx, doneLock(dlock.OutcomeAcquired, 5, nil)), doneLock(dlock.OutcomeAcquired, 5, nil))
	end := dlock.LeaseEndedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Token: 5, Reason: dlock.EndReleased}
	ha.LeaseEnded(ctx, end)
	hb.LeaseEnded(ctx, end)
	for _, h := range []*harness{a, b} {
		if n := len(h.spans.Started()); n != 2 {
			t.Errorf("%d spans started, want 2", n)
		}
		h.one(t, "dlock.acquire")
		h.one(t, "dlock.hold")
	}
}

func TestHooks_unprotectedEventOnTheCallersSpan(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "job")
	// The Client passes the lease's context, whose hold span has ended.
	lctx := hooks.AcquireDone(hooks.AcquireStart(ctx, startLock), doneLock(dlock.OutcomeAcquired, 9, nil))
	hooks.LeaseEnded(lctx, dlock.LeaseEndedInfo{Backend: "redis", Key: "orders/42", Kind: dlock.KindLock, Token: 9, Reason: dlock.EndExpired})
	hooks.Unprotected(lctx, dlock.UnprotectedInfo{Backend: "mem", Key: "k", Kind: dlock.KindLock, Token: 9,
		Reason: dlock.EndExpired, Unprotected: 3 * time.Second})
	job.End()
	events := h.one(t, "job").Events()
	if len(events) != 1 || events[0].Name != "dlock.unprotected" {
		t.Fatalf("the caller's span's events %v, want dlock.unprotected", events)
	}
	n, s := histogram(t, h.collect(t), "dlock.unprotected.duration", attrs{"dlock.backend": "mem", "dlock.primitive": "lock", "dlock.reason": "expired"})
	if n != 1 || s != 3 {
		t.Errorf("dlock.unprotected.duration: %d measurements, sum %v; want 1, 3", n, s)
	}
}

func TestRecordFenceRejected(t *testing.T) {
	h := newHarness(t)
	ctx, job := h.tp.Tracer("app").Start(context.Background(), "write")
	stale := &dlock.StaleTokenError{Fence: "close-orders", Token: 4, Recorded: 6}
	h.in.RecordFenceRejected(ctx, "httpfence", fmt.Errorf("post: %w", stale))
	h.in.RecordFenceRejected(context.Background(), "httpfence", stale)
	h.in.RecordFenceRejected(context.Background(), "sqlfence", dlock.ErrStaleToken)
	job.End()

	rm := h.collect(t)
	for guard, want := range map[string]int64{"httpfence": 2, "sqlfence": 1} {
		if got, mono := sum(t, rm, "dlock.fence.rejected", attrs{"dlock.fence.guard": guard}); got != want || !mono {
			t.Errorf("dlock.fence.rejected{guard=%s} = %d (monotonic %v), want %d, a counter", guard, got, mono, want)
		}
	}
	events := h.one(t, "write").Events()
	if len(events) != 1 || events[0].Name != "dlock.fence.rejected" {
		t.Fatalf("the writer's span's events %v, want one dlock.fence.rejected", events)
	}
	got := map[string]string{}
	for _, kv := range events[0].Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	for k, want := range map[string]string{"dlock.fence.guard": "httpfence", "dlock.fence.name": "close-orders", "dlock.token": "4", "dlock.fence.recorded": "6"} {
		if got[k] != want {
			t.Errorf("event attribute %s = %q, want %q", k, got[k], want)
		}
	}
}

func TestNew_nilProviderIsInvalid(t *testing.T) {
	for name, opt := range map[string]dlockotel.Option{
		"tracer": dlockotel.WithTracerProvider(nil),
		"meter":  dlockotel.WithMeterProvider(nil),
	} {
		if _, err := dlockotel.New(opt); !errors.Is(err, dlockotel.ErrInvalidOption) {
			t.Errorf("%s: New(nil provider) = %v, want ErrInvalidOption", name, err)
		}
	}
}

// Without options the spans go to the global TracerProvider, as set when
// New is called.
func TestNew_globalProviders(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	in, err := dlockotel.New()
	if err != nil {
		t.Fatal(err)
	}
	hooks := in.Hooks()
	hooks.AcquireDone(hooks.AcquireStart(context.Background(), startLock), doneLock(dlock.OutcomeSkipped, 0, dlock.ErrLocked))
	if ended := spans.Ended(); len(ended) != 1 || ended[0].Name() != "dlock.acquire" {
		t.Errorf("the global provider recorded %v, want dlock.acquire", names(ended))
	}
	if got := ended0Scope(spans); got != dlockotel.ScopeName {
		t.Errorf("scope %q, want %q", got, dlockotel.ScopeName)
	}
}

func ended0Scope(r *tracetest.SpanRecorder) string {
	if e := r.Ended(); len(e) > 0 {
		return e[0].InstrumentationScope().Name
	}
	return ""
}
