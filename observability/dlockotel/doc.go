// Package dlockotel reports the lives of dlock's leases to OpenTelemetry:
// a span for each acquiring call and for each held lease, and metrics named
// after OpenTelemetry's database connection-pool model
// (db.client.connection.*), through the OpenTelemetry API only. The
// application chooses the SDK and the exporters.
//
//	otel, err := dlockotel.New() // the global TracerProvider and MeterProvider
//	if err != nil {
//		return err
//	}
//	client, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0", dlock.WithHooks(otel.Hooks()))
//
// docs/observability.md, section OpenTelemetry, lists every span, metric and
// attribute with its meaning.
//
// # Spans
//
// dlock.acquire runs from the start of an acquiring call (Lock, TryLock, Do,
// a Semaphore's or RWMutex's acquire, Campaign; LockAll's, one per key) to
// its end. The requests the backend makes for it are made with the context
// that holds this span, so a traced backend client (go-redis with redisotel,
// etcd's client with otelgrpc) puts its own spans under it. Its status is
// Error when the call ended in OutcomeError or OutcomeTimeout; a TryLock that
// finds the key taken, or a cancelled wait, is no error.
//
// dlock.hold runs from the grant to the end of the lease. Its parent is the
// span of the context the acquiring call was given (the caller's: the job's
// own span, typically), so that it sits beside dlock.acquire in the caller's
// trace, and it carries a link to that dlock.acquire span. It is not the
// acquire span's child, because it outlives it, and not a trace of its own,
// because the work under the lock is the caller's; this is the shape
// OpenTelemetry's messaging conventions give to a message's processing,
// related to its creation by a link. A lease held for a long time (a
// leadership of days) is one span, exported when the lease ends. Each failed
// renewal adds an event dlock.renew.failed; the status is Error when the
// lease was lost (EndExpired, EndDropped).
//
// # Keys
//
// A lock's key is left out of spans unless [WithKeyAttribute] is given: keys
// can name customers or orders, and traces are often kept where personal
// data is not allowed. Metrics never carry the key: every key would be a new
// time series.
//
// # Fencing
//
// The fencing guards live in modules of their own; their refusals are
// counted by [Instrumentation.RecordFenceRejected], called from the guard's
// hook (httpfence.OnStale) or where the application sees
// errors.Is(err, dlock.ErrStaleToken).
package dlockotel
