package main

import (
	"math"
	"testing"
	"time"
)

// A series is named by its target's legendFormat, {{label}} by label.
func TestLegend(t *testing.T) {
	labels := map[string]string{"backend": "redis", "kind": "lock"}
	if got := legend(target{LegendFormat: "p99 {{backend}} {{ kind }}"}, labels); got != "p99 redis lock" {
		t.Errorf("legend = %q, want %q", got, "p99 redis lock")
	}
	if got := legend(target{}, labels); got != `{backend="redis", kind="lock"}` {
		t.Errorf("legend without a format = %q", got)
	}
}

// A line breaks where the value is NaN and where Prometheus returned no
// point for a step (a target that was not scraped), as Grafana's does.
func TestSegments_breakOnNaNAndGaps(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s int, v float64) point { return point{start.Add(time.Duration(s) * time.Second), v} }
	pts := []point{at(0, 1), at(1, 2), at(2, math.NaN()), at(3, 3), at(4, 4), at(8, 5), at(9, 0)}
	segs := segments(pts, start, time.Second, false)
	if len(segs) != 3 || len(segs[0]) != 2 || len(segs[1]) != 2 || len(segs[2]) != 2 {
		t.Fatalf("segments = %v, want [0 1] [3 4] [8 9]", segs)
	}
	if segs[2][0].X != 8 {
		t.Errorf("the third segment starts at %vs, want 8s", segs[2][0].X)
	}
	// On a log scale, 0 has no place either.
	if segs := segments(pts, start, time.Second, true); len(segs[len(segs)-1]) != 1 {
		t.Errorf("log-scale segments = %v, want the 0 at 9s left out", segs)
	}
}
