package dlockotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/memdlock"
	"github.com/dlockdev/dlock/observability/dlockotel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A job's span holds the lock's two spans: the acquire, and the hold that
// links to it.
func Example() {
	exp := tracetest.NewInMemoryExporter() // a real program: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	otel, err := dlockotel.New(dlockotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	client, _, err := memdlock.New(nil, dlock.WithHooks(otel.Hooks()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, job := tp.Tracer("app").Start(context.Background(), "close-expired-orders")
	lease, err := client.Lock(ctx, "orders/close-expired")
	if err != nil {
		log.Fatal(err)
	}
	// … the job's work, under the lock …
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	job.End()

	spans := exp.GetSpans()
	name := map[string]string{}
	for _, s := range spans {
		name[s.SpanContext.SpanID().String()] = s.Name
	}
	for _, s := range spans {
		fmt.Print(s.Name)
		if s.Parent.IsValid() {
			fmt.Print(", child of ", name[s.Parent.SpanID().String()])
		}
		for _, l := range s.Links {
			fmt.Print(", linked to ", name[l.SpanContext.SpanID().String()])
		}
		fmt.Println()
	}
	// Output:
	// dlock.acquire, child of close-expired-orders
	// dlock.hold, child of close-expired-orders, linked to dlock.acquire
	// close-expired-orders
}
