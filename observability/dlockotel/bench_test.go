package dlockotel_test

import (
	"context"
	"testing"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
	"github.com/dlockdev/dlock/observability/dlockotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A Lock and an Unlock on memdlock, whose own cost is small, so that what
// the hooks add shows: bare, and with dlockotel on the SDK sampling and
// recording every span (to an in-memory exporter, reset as it fills) and
// every metric.
func BenchmarkLockUnlock(b *testing.B) {
	b.Run("bare", func(b *testing.B) { benchLockUnlock(b, func(int) {}) })
	b.Run("dlockotel", func(b *testing.B) { benchOtel(b, sdktrace.AlwaysSample()) })
	// Spans not sampled: the metrics, and what dlockotel does besides.
	b.Run("dlockotel-unsampled", func(b *testing.B) { benchOtel(b, sdktrace.NeverSample()) })
}

// benchOtel runs benchLockUnlock with dlockotel on an SDK whose spans
// sampler samples.
func benchOtel(b *testing.B, sampler sdktrace.Sampler) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	in, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	benchLockUnlock(b, func(i int) {
		if i%1024 == 0 {
			exp.Reset()
		}
	}, dlock.WithHooks(in.Hooks()))
}

// benchLockUnlock locks and unlocks a key on a Client with opts, calling
// each after the i-th cycle.
func benchLockUnlock(b *testing.B, each func(i int), opts ...dlock.Option) {
	client, _, err := memdlock.New(nil, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		lease, err := client.Lock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		each(i)
		i++
	}
}
