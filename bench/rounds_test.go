package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestSpreadOf_medianAndRange(t *testing.T) {
	s := spreadOf([]float64{3, math.NaN(), 1, 2})
	if s.Med != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Fatalf("spreadOf(3, NaN, 1, 2) = %+v, want median 2, range 1–3, 3 values", s)
	}
	if s := spreadOf([]float64{4, 1}); s.Med != 2.5 {
		t.Fatalf("median of 4 and 1 = %v, want 2.5", s.Med)
	}
	if s := durSpread([]time.Duration{0, 0}); s.ok() || s.format(fmtDurF) != "–" {
		t.Fatalf("durSpread of no samples = %+v, want none", s)
	}
	if got, want := durSpread([]time.Duration{2 * time.Millisecond, time.Millisecond, 3 * time.Millisecond}).format(fmtDurF), "2.00 ms (1.00 ms–3.00 ms, 3 rounds)"; got != want {
		t.Fatalf("format = %q, want %q", got, want)
	}
}

func TestMedianRTT_takesTheMedianRound(t *testing.T) {
	rounds := []map[string]rttResult{
		{"redis": {N: 10, P50: 30, P99: 300}},
		{"redis": {N: 10, P50: 10, P99: 100}},
		{"redis": {N: 10, P50: 20, P99: 200}},
	}
	got := medianRTT(rounds)["redis"]
	if got.P50 != 20 || got.P99 != 200 || got.N != 30 {
		t.Fatalf("medianRTT = %+v, want p50 20 with its p99 200 and 30 samples", got)
	}
}

func TestInRoundOrder_rotatesWithinEachServer(t *testing.T) {
	libs := []*library{
		{Name: "dlock-r", Backend: "redis"}, {Name: "bsm", Backend: "redis"}, {Name: "redsync", Backend: "redis"},
		{Name: "dlock-z", Backend: "zookeeper"}, {Name: "gozk", Backend: "zookeeper"},
	}
	names := func(ls []*library) (s []string) {
		for _, l := range ls {
			s = append(s, l.Name)
		}
		return s
	}
	for round, want := range map[int][]string{
		1: {"dlock-r", "bsm", "redsync", "dlock-z", "gozk"},
		2: {"bsm", "redsync", "dlock-r", "gozk", "dlock-z"},
		3: {"redsync", "dlock-r", "bsm", "dlock-z", "gozk"},
	} {
		if got := names(inRoundOrder(libs, round)); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
}
