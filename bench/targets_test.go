package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// targetsFixture is a run with dlock and one peer on Redis: three rounds of
// the uncontended cycle, the round-trip floor, and a renewal section.
func targetsFixture() *results {
	res := &results{Variant: durable, Rounds: 3,
		Libraries: []libInfo{
			{Name: "dlock (redis)", Backend: "redis", IsDlock: true},
			{Name: "bsm/redislock", Backend: "redis"},
			{Name: "redsync", Backend: "redis"},
		},
		RTT: map[string]rttResult{
			"redis":        {N: 1, P50: 40 * time.Microsecond},
			"redis-write":  {N: 1, P50: 50 * time.Microsecond},
			"redis-notify": {N: 1, P50: 60 * time.Microsecond},
		},
	}
	for round, p50 := range []time.Duration{120, 110, 130} {
		res.CycleFloor = append(res.CycleFloor,
			floorResult{Backend: "redis", Round: round + 1, N: 100, P50: (p50 - 20) * time.Microsecond, RequestsPerCycle: 2})
		res.Uncontended = append(res.Uncontended,
			uncontendedResult{Lib: "dlock (redis)", Round: round + 1, N: 100, P50: p50 * time.Microsecond},
			uncontendedResult{Lib: "bsm/redislock", Round: round + 1, N: 100, P50: (p50 - 20) * time.Microsecond},
			uncontendedResult{Lib: "redsync", Round: round + 1, N: 100, P50: (p50 + 50) * time.Microsecond})
	}
	res.Renewal = []renewalResult{
		{Lib: "dlock (redis)", Backend: "redis", Locks: 1000, Window: 3 * renewalInterval, Requests: 3000},
		{Lib: "redsync", Backend: "redis", Locks: 1000, Window: 3 * renewalInterval, NA: renewalNA["redsync"]},
	}
	return res
}

func targetRow(t *testing.T, rows [][]string, prefix, backend string) []string {
	t.Helper()
	for _, r := range rows {
		if strings.HasPrefix(r[0], prefix) && r[1] == backend {
			return r
		}
	}
	t.Fatalf("no target row %q for %s in %q", prefix, backend, rows)
	return nil
}

// The uncontended row shows the medians of the rounds, the fastest peer's,
// the raw cycle's floor over the same rounds, both ratios, and a miss where
// dlock is slower than that peer but within 1.3× of the floor.
func TestTargetsTable_uncontendedAgainstFastestPeer(t *testing.T) {
	row := targetRow(t, targetsTable(targetsFixture()), "uncontended cycle p50", "redis")
	want := []string{"uncontended cycle p50", "redis", "120 µs (110 µs–130 µs, 3 rounds)", "bsm/redislock: 100 µs (90 µs–110 µs, 3 rounds)",
		"raw cycle: 100 µs (90 µs–110 µs, 3 rounds)", "≤ fastest peer", "1.20×", "1.20×", "**missed**, within 1.3× of the floor"}
	for i := range want {
		if row[i] != want[i] {
			t.Errorf("column %d = %q, want %q", i, row[i], want[i])
		}
	}
}

// Renewals: a library that does not renew by itself is no peer to beat;
// dlock's figure is judged against the fixed bound.
func TestTargetsTable_renewalsPerInterval(t *testing.T) {
	row := targetRow(t, targetsTable(targetsFixture()), "renewal requests", "redis")
	if row[2] != "1000" || row[3] != "–" || row[4] != "–" || row[8] != "**missed**" {
		t.Errorf("renewal row = %q, want dlock 1000 per interval, no peer figure, missed", row)
	}
}

// Backends that did not run say so in every row rather than a verdict.
func TestTargetsTable_backendNotRun(t *testing.T) {
	for _, r := range targetsTable(targetsFixture()) {
		if r[1] == "etcd" && (r[2] != "not available" || r[8] != "not measured") {
			t.Errorf("etcd row %q: want not available, not measured", r)
		}
	}
}

// The generated report names what each table is, never an issue number,
// and says the servers' variant.
func TestReport_noIssueNumbersAndSaysVariant(t *testing.T) {
	out := report(targetsFixture())
	if m := regexp.MustCompile(`(?i)\(issue \d+\)|issue \d+`).FindString(out); m != "" {
		t.Errorf("report cites %q", m)
	}
	if !strings.Contains(out, "## Targets (durable servers)") || !strings.Contains(out, "forceSync=yes") {
		t.Errorf("report does not say the durable variant:\n%s", out[:min(len(out), 2000)])
	}
}

// A figure short of its target is done when it is within 1.3× of the floor
// (a time) or of the ceiling (a rate) measured in the same run, and only
// then.
func TestVerdictOf_floorAndCeiling(t *testing.T) {
	for _, tc := range []struct {
		fig, floor float64
		lower      bool
		want       string
	}{
		{fig: 125, floor: 100, lower: true, want: "**missed**, within 1.3× of the floor"},
		{fig: 140, floor: 100, lower: true, want: "**missed**"},
		{fig: 800, floor: 1000, lower: false, want: "**missed**, within 1.3× of the ceiling"},
		{fig: 700, floor: 1000, lower: false, want: "**missed**"},
	} {
		if got := verdictOf(false, true, tc.fig, tc.floor, tc.lower); got != tc.want {
			t.Errorf("verdictOf(missed, %v, floor %v, lower is better %v) = %q, want %q", tc.fig, tc.floor, tc.lower, got, tc.want)
		}
	}
	if got := verdictOf(true, true, 1, 1000, true); got != "**met**" {
		t.Errorf("verdictOf(met) = %q", got)
	}
	if got := verdictOf(true, false, 1, 1, true); got != "not measured" {
		t.Errorf("verdictOf(not measured) = %q", got)
	}
}

// The keys row shows each library's median over the rounds and its range,
// and judges the medians: one round's outlier does not decide it.
func TestTargetsTable_keysMedianOfRounds(t *testing.T) {
	res := targetsFixture()
	for round, rates := range [][2]float64{{50000, 40000}, {30000, 45000}, {52000, 41000}} {
		for i, lib := range []string{"dlock (redis)", "bsm/redislock"} {
			res.Keys = append(res.Keys, keysResult{Lib: lib, Round: round + 1, Keys: 100000, Workers: keysWorkers,
				Done: 100000, Elapsed: time.Duration(100000 / rates[i] * float64(time.Second))})
		}
	}
	row := targetRow(t, targetsTable(res), "100,000 distinct keys", "redis")
	if !strings.HasPrefix(row[2], "50000/s (30000/s–52000/s, 3 rounds)") || !strings.HasPrefix(row[3], "bsm/redislock: 41000/s") || row[8] != "**met**" {
		t.Errorf("keys row = %q, want dlock's median 50000/s with its range, bsm/redislock's 41000/s, met", row)
	}
}
