package dlockotel_test

import (
	"context"
	"slices"
	"testing"

	"github.com/dlockdev/dlock/observability/dlockotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// harness is an Instrumentation on the SDK, recording its spans in memory
// and its metrics for a ManualReader.
type harness struct {
	in     *dlockotel.Instrumentation
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newHarness(t *testing.T, opts ...dlockotel.Option) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = h.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	in, err := dlockotel.New(append([]dlockotel.Option{
		dlockotel.WithTracerProvider(h.tp), dlockotel.WithMeterProvider(mp),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.in = in
	return h
}

// ended returns the ended spans named name, in the order they ended.
func (h *harness) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the one ended span named name.
func (h *harness) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := h.ended(name)
	if len(spans) != 1 {
		t.Fatalf("%d ended spans %q, want 1 (all ended: %v)", len(spans), name, names(h.spans.Ended()))
	}
	return spans[0]
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// attr returns the span's attribute k, failing the test when it has none.
func attr(t *testing.T, s sdktrace.ReadOnlySpan, k string) attribute.Value {
	t.Helper()
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value
		}
	}
	t.Fatalf("span %s has no attribute %s: %v", s.Name(), k, s.Attributes())
	return attribute.Value{}
}

func hasAttr(s sdktrace.ReadOnlySpan, k string) bool {
	return slices.ContainsFunc(s.Attributes(), func(kv attribute.KeyValue) bool { return string(kv.Key) == k })
}

// collect reads the metrics now.
func (h *harness) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// attrs is a metric point's attributes, as name=value pairs.
type attrs map[string]string

func (a attrs) matches(set attribute.Set) bool {
	if set.Len() != len(a) {
		return false
	}
	for k, v := range a {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.String() != v {
			return false
		}
	}
	return true
}

// histogram returns the count and sum of the histogram's point with exactly
// the attributes want; 0, 0 when there is none.
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, want attrs) (count uint64, sum float64) {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0, 0
	}
	if m.Unit != "s" {
		t.Errorf("%s: unit %q, want s", name, m.Unit)
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
	}
	for _, p := range h.DataPoints {
		if want.matches(p.Attributes) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

// sum returns the value of the counter's or up-down counter's point with
// exactly the attributes want, and whether the metric is monotonic; 0 when
// there is no such point.
func sum(t *testing.T, rm metricdata.ResourceMetrics, name string, want attrs) (value int64, monotonic bool) {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0, false
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	for _, p := range s.DataPoints {
		if want.matches(p.Attributes) {
			return p.Value, s.IsMonotonic
		}
	}
	return 0, s.IsMonotonic
}
