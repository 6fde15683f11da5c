package main

import (
	"strings"
	"testing"
	"time"
)

// The gateway section puts each backend's run through the gateway beside
// the library's, with the ratio of their grants/s and hand-off p50s, and
// says when it was not measured.
func TestGatewayReport(t *testing.T) {
	run := func(backend, path string, grants float64, p50 time.Duration) gatewayResult {
		return gatewayResult{Backend: backend, Path: path, contendedResult: contendedResult{
			Lib: "dlock (" + backend + ")", N: 8, Window: 2 * time.Second, GrantsPerS: grants, HandoffP50: p50, HandoffP99: 2 * p50}}
	}
	res := &results{Gateway: []gatewayResult{
		run("redis", "library", 10000, 100*time.Microsecond),
		run("redis", "gateway", 2500, 400*time.Microsecond),
	}}
	var m md
	gatewayReport(&m, res)
	out := m.String()
	for _, want := range []string{
		"8 contenders loop Lock, an empty critical section, Unlock on one key for 2s",
		"| redis | library | 8 | 10000 | 100 µs | 200 µs | 0 |  |  |",
		"| redis | gateway | 8 | 2500 | 400 µs | 800 µs | 0 | 0.25× the library's grants/s, 4.0× its p50 |  |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var none md
	gatewayReport(&none, &results{})
	if strings.Contains(none.String(), "| redis") {
		t.Errorf("a run without the section shows rows:\n%s", none.String())
	}
}
