package redistrace_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/observability/dlockotel"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The commands redisdlock sends to take a lock are go-redis's spans, under
// the dlock.acquire span of the Lock that sent them; the lease's release is
// under none of them.
func TestRedis_acquireSpan_parentsGoRedisSpans(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)); err != nil {
		t.Fatal(err)
	}
	otel, err := dlockotel.New(dlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	client, err := redisdlock.New(ctx, rdb, &redisdlock.Options{ClientOptions: []dlock.Option{dlock.WithHooks(otel.Hooks())}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })

	lease, err := client.Lock(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	var acquire sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "dlock.acquire" {
			acquire = s
		}
	}
	if acquire == nil {
		t.Fatalf("no dlock.acquire span among %d", len(spans.Ended()))
	}
	var under []string
	for _, s := range spans.Ended() {
		if s.InstrumentationScope().Name != dlockotel.ScopeName && s.Parent().SpanID() == acquire.SpanContext().SpanID() {
			under = append(under, s.Name())
		}
	}
	if len(under) == 0 {
		var all []string
		for _, s := range spans.Ended() {
			all = append(all, s.Name()+" (scope "+s.InstrumentationScope().Name+", parent "+s.Parent().SpanID().String()+")")
		}
		t.Fatalf("no go-redis span is a child of dlock.acquire (%s); ended: %v", acquire.SpanContext().SpanID(), all)
	}
	t.Logf("go-redis spans under dlock.acquire: %v", under)
}
