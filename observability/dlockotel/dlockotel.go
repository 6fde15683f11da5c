package dlockotel

import (
	"context"
	"errors"

	"github.com/dlockdev/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter: the
// module's import path.
const ScopeName = "github.com/dlockdev/dlock/observability/dlockotel"

// The attributes of the spans and metrics (docs/observability.md).
const (
	attrBackend      = attribute.Key("dlock.backend")
	attrPrimitive    = attribute.Key("dlock.primitive")
	attrMode         = attribute.Key("dlock.mode")
	attrKey          = attribute.Key("dlock.key")
	attrLimit        = attribute.Key("dlock.limit")
	attrWait         = attribute.Key("dlock.wait")
	attrOutcome      = attribute.Key("dlock.outcome")
	attrToken        = attribute.Key("dlock.token")
	attrReason       = attribute.Key("dlock.reason")
	attrHeld         = attribute.Key("dlock.held")
	attrRenewOutcome = attribute.Key("dlock.renew.outcome")
	attrLate         = attribute.Key("dlock.renew.late")
	attrLatency      = attribute.Key("dlock.renew.latency")
	attrUnprotected  = attribute.Key("dlock.unprotected")
	attrGuard        = attribute.Key("dlock.fence.guard")
	attrFence        = attribute.Key("dlock.fence.name")
	attrRecorded     = attribute.Key("dlock.fence.recorded")
	attrErrorMessage = attribute.Key("exception.message")
)

// The span and event names.
const (
	spanAcquire      = "dlock.acquire"
	spanHold         = "dlock.hold"
	eventRenewFailed = "dlock.renew.failed"
	eventUnprotected = "dlock.unprotected"
	eventFence       = "dlock.fence.rejected"
)

// Instrumentation makes dlock's spans and metrics. Give its Hooks to the
// clients with dlock.WithHooks; one Instrumentation serves any number of
// clients. It is safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	keys   bool
	m      *instruments
}

// New returns an Instrumentation that makes its spans with the
// TracerProvider and records its metrics with the MeterProvider the options
// give, by default the global ones (otel.GetTracerProvider,
// otel.GetMeterProvider). It creates the metrics' instruments at once.
//
// May return ErrInvalidOption or ErrInstrument.
func New(opts ...Option) (*Instrumentation, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m, err := newInstruments(c.meters.Meter(ScopeName))
	if err != nil {
		return nil, err
	}
	return &Instrumentation{tracer: c.tracers.Tracer(ScopeName), keys: c.keys, m: m}, nil
}

// Hooks returns the hooks that report to in, for dlock.WithHooks.
func (in *Instrumentation) Hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: in.acquireStart,
		AcquireDone:  in.acquireDone,
		Renewed:      in.renewed,
		LeaseEnded:   in.leaseEnded,
		Unprotected:  in.unprotected,
	}
}

// acquireKey and holdKey find in's state in the contexts the Client passes
// to the hooks; in is part of the key, so that two Instrumentations on one
// Client keep apart.
type (
	acquireKey struct{ in *Instrumentation }
	holdKey    struct{ in *Instrumentation }
)

// acquire is the state of an acquiring call, from AcquireStart to
// AcquireDone.
type acquire struct {
	span trace.Span
	// caller is the span of the context the call was given: the parent of
	// the hold span (a no-op span when there was none).
	caller trace.Span
	wait   bool
}

func (in *Instrumentation) acquireStart(ctx context.Context, info dlock.AcquireStartInfo) context.Context {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs,
		attrBackend.String(info.Backend),
		attrPrimitive.String(info.Kind.String()),
		attrMode.String(info.Mode.String()),
		attrWait.Bool(info.Wait))
	if info.Kind == dlock.KindSemaphore {
		attrs = append(attrs, attrLimit.Int(info.Limit))
	}
	if in.keys {
		attrs = append(attrs, attrKey.String(info.Key))
	}
	a := &acquire{caller: trace.SpanFromContext(ctx), wait: info.Wait}
	ctx, a.span = in.tracer.Start(ctx, spanAcquire, trace.WithAttributes(attrs...))
	if info.Wait {
		in.m.waiters.Add(ctx, 1, in.m.set(info.Backend, info.Kind, "", "").add...)
	}
	return context.WithValue(ctx, acquireKey{in}, a)
}

func (in *Instrumentation) acquireDone(ctx context.Context, info dlock.AcquireDoneInfo) context.Context {
	in.m.acquire.Record(ctx, info.Waited.Seconds(), in.m.set(info.Backend, info.Kind, attrOutcome, info.Outcome.String()).record...)
	if info.Outcome == dlock.OutcomeAcquired {
		in.m.active.Add(ctx, 1, in.m.set(info.Backend, info.Kind, "", "").add...)
	}
	a, _ := ctx.Value(acquireKey{in}).(*acquire)
	if a == nil {
		// Not started by in's AcquireStart: a Client that calls
		// AcquireDone alone. The metrics above are all that can be said.
		return ctx
	}
	if a.wait {
		in.m.waiters.Add(ctx, -1, in.m.set(info.Backend, info.Kind, "", "").add...)
	}
	if a.span.IsRecording() {
		a.span.SetAttributes(attrOutcome.String(info.Outcome.String()))
		if info.Outcome == dlock.OutcomeAcquired {
			a.span.SetAttributes(attrToken.Int64(int64(info.Token)))
		}
	}
	switch info.Outcome {
	case dlock.OutcomeError, dlock.OutcomeTimeout:
		if info.Err != nil {
			a.span.RecordError(info.Err)
			a.span.SetStatus(codes.Error, info.Err.Error())
		} else {
			a.span.SetStatus(codes.Error, info.Outcome.String())
		}
	}
	a.span.End()
	if info.Outcome != dlock.OutcomeAcquired {
		return ctx
	}

	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs,
		attrBackend.String(info.Backend),
		attrPrimitive.String(info.Kind.String()),
		attrMode.String(info.Mode.String()),
		attrToken.Int64(int64(info.Token)))
	if in.keys {
		attrs = append(attrs, attrKey.String(info.Key))
	}
	// The hold span's parent is the caller's span, not the acquire span
	// that ctx holds: see the package documentation, section Spans.
	_, hold := in.tracer.Start(trace.ContextWithSpan(ctx, a.caller), spanHold,
		trace.WithAttributes(attrs...),
		trace.WithLinks(trace.Link{SpanContext: a.span.SpanContext()}))
	return context.WithValue(trace.ContextWithSpan(ctx, hold), holdKey{in}, hold)
}

func (in *Instrumentation) renewed(ctx context.Context, info dlock.RenewedInfo) {
	outcome := "renewed"
	if info.Err != nil {
		outcome = "failed"
	}
	in.m.renew.Record(ctx, info.Latency.Seconds(), in.m.set(info.Backend, info.Kind, attrRenewOutcome, outcome).record...)
	if info.Err == nil {
		return
	}
	if hold, _ := ctx.Value(holdKey{in}).(trace.Span); hold != nil {
		hold.AddEvent(eventRenewFailed, trace.WithAttributes(
			attrErrorMessage.String(info.Err.Error()),
			attrLatency.Float64(info.Latency.Seconds()),
			attrLate.Float64(info.Late.Seconds())))
	}
}

func (in *Instrumentation) leaseEnded(ctx context.Context, info dlock.LeaseEndedInfo) {
	in.m.hold.Record(ctx, info.Held.Seconds(), in.m.set(info.Backend, info.Kind, attrReason, info.Reason.String()).record...)
	in.m.active.Add(ctx, -1, in.m.set(info.Backend, info.Kind, "", "").add...)
	if info.Reason.Lost() {
		in.m.lost.Add(ctx, 1, in.m.set(info.Backend, info.Kind, attrReason, info.Reason.String()).add...)
	}
	hold, _ := ctx.Value(holdKey{in}).(trace.Span)
	if hold == nil {
		return
	}
	if !hold.IsRecording() {
		hold.End()
		return
	}
	hold.SetAttributes(attrReason.String(info.Reason.String()), attrHeld.Float64(info.Held.Seconds()))
	if info.Reason.Lost() {
		msg := "lease " + info.Reason.String()
		if info.Err != nil {
			msg = info.Err.Error()
		}
		hold.SetStatus(codes.Error, msg)
	}
	hold.End()
}

func (in *Instrumentation) unprotected(ctx context.Context, info dlock.UnprotectedInfo) {
	in.m.unprotected.Record(ctx, info.Unprotected.Seconds(), in.m.set(info.Backend, info.Kind, attrReason, info.Reason.String()).record...)
	// The event goes to the caller's span, the job that ran on without the
	// lock: ctx is the lease's, whose hold span has ended.
	span := trace.SpanFromContext(ctx)
	if a, _ := ctx.Value(acquireKey{in}).(*acquire); a != nil {
		span = a.caller
	}
	if span.IsRecording() {
		span.AddEvent(eventUnprotected, trace.WithAttributes(
			attrReason.String(info.Reason.String()),
			attrUnprotected.Float64(info.Unprotected.Seconds()),
			attrToken.Int64(int64(info.Token))))
	}
}

// RecordFenceRejected counts a write that a fencing guard refused because
// its token was stale (dlock.fence.rejected, with dlock.fence.guard=guard),
// and adds an event dlock.fence.rejected to the span of ctx, with the
// fence's name and the tokens when err is a *dlock.StaleTokenError. guard
// names the kind of guard ("sqlfence", "httpfence", "redis", "etcd",
// "zookeeper"): it is a metric attribute, so it must be one of a few
// values, never a fence's name. The guards live in modules of their own
// and call nothing themselves; call it from httpfence's OnStale:
//
//	fences := httpfence.New(httpfence.OnStale(func(r *http.Request, err *dlock.StaleTokenError) {
//		otel.RecordFenceRejected(r.Context(), "httpfence", err)
//	}))
//
// or where a guard's error satisfies errors.Is(err, dlock.ErrStaleToken).
func (in *Instrumentation) RecordFenceRejected(ctx context.Context, guard string, err error) {
	in.m.fence.Add(ctx, 1, metric.WithAttributes(attrGuard.String(guard)))
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrGuard.String(guard)}
	var stale *dlock.StaleTokenError
	if errors.As(err, &stale) {
		attrs = append(attrs,
			attrFence.String(stale.Fence),
			attrToken.Int64(int64(stale.Token)),
			attrRecorded.Int64(int64(stale.Recorded)))
	}
	if err != nil {
		attrs = append(attrs, attrErrorMessage.String(err.Error()))
	}
	span.AddEvent(eventFence, trace.WithAttributes(attrs...))
}
