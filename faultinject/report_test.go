package faultinject_test

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// A figure is one measured result for docs/reliability.md.
type figure struct {
	Scenario string
	Backend  string
	Variant  string // "dlock", or the weakening
	Figure   string // what was measured
	Verdict  string // pass / fail for dlock; caught / MISSED for a weakening
}

var figures struct {
	mu   sync.Mutex
	list []figure
	took map[string]time.Duration
}

// record notes a figure; the test reports it in its log too.
func record(t *testing.T, scenario, backend, variant, verdict, format string, args ...any) {
	t.Helper()
	f := figure{Scenario: scenario, Backend: backend, Variant: variant, Figure: fmt.Sprintf(format, args...), Verdict: verdict}
	t.Logf("FIGURE %s | %s | %s | %s | %s", f.Scenario, f.Backend, f.Variant, f.Figure, f.Verdict)
	figures.mu.Lock()
	defer figures.mu.Unlock()
	figures.list = append(figures.list, f)
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

func caught(ok bool) string {
	if ok {
		return "caught"
	}
	return "MISSED"
}

// writeReport writes the figures as a Markdown table to the file named by
// DLOCK_REPORT, if set.
func writeReport() error {
	path := os.Getenv("DLOCK_REPORT")
	if path == "" {
		return nil
	}
	figures.mu.Lock()
	defer figures.mu.Unlock()
	list := append([]figure(nil), figures.list...)
	sort.SliceStable(list, func(i, j int) bool { return list[i].Scenario < list[j].Scenario })
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | backend | variant | measured | verdict |\n| --- | --- | --- | --- | --- |\n")
	for _, f := range list {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", f.Scenario, f.Backend, f.Variant, f.Figure, f.Verdict)
	}
	if weak.took > 0 {
		fmt.Fprintf(&b, "\nBuilding the weak holder took %v.\n", weak.took.Round(time.Second))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
