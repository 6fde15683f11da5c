package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A floor's samples are shared among its server's libraries that run, one
// stretch before each: in all as many as one library's, the remainder to
// the first stretches, the time limit in equal parts.
func TestStretches_shareAmongLibraries(t *testing.T) {
	libs := []*library{
		{Name: "a", Backend: "redis"}, {Name: "b", Backend: "redis"}, {Name: "gone", Backend: "redis", Missing: "no"},
		{Name: "c", Backend: "redis"}, {Name: "z", Backend: "zookeeper"},
	}
	st := newStretches(libs)
	var got []int
	var firsts []bool
	for _, l := range libs {
		first, n, within, ok := st.next(l, 301, 3*time.Second)
		if l.Missing != "" {
			if ok {
				t.Errorf("library %s that does not run got a stretch", l.Name)
			}
			continue
		}
		if l.Backend == "redis" && within != time.Second {
			t.Errorf("stretch before %s: %v, want 1s", l.Name, within)
		}
		got, firsts = append(got, n), append(firsts, first)
	}
	want, wantFirst := []int{101, 100, 100, 301}, []bool{true, false, false, true}
	for i := range want {
		if got[i] != want[i] || firsts[i] != wantFirst[i] {
			t.Fatalf("stretches = %v (first %v), want %v (first %v)", got, firsts, want, wantFirst)
		}
	}
}

// loopNotifier notices its own fire at once: it exercises the sampling
// loop, not a server.
func loopNotifier() (*notifier, *int) {
	fires := 0
	ch := make(chan time.Time, 1)
	return &notifier{
		op:   "loop",
		arm:  func(context.Context) (<-chan time.Time, error) { return ch, nil },
		fire: func(context.Context) error { fires++; ch <- time.Now(); return nil },
	}, &fires
}

// A warm-up keeps no sample and runs for its count even when its time is
// up; a measurement stops at its count, or when its time is up.
func TestSampleNotify_warmupAndMeasurement(t *testing.T) {
	ctx := context.Background()
	nt, fires := loopNotifier()
	ds, _, err := sampleNotify(ctx, nt, true, 7, 0, nil)
	if err != nil || len(ds) != 0 || *fires != 7 {
		t.Errorf("warm-up of 7: kept %d, fired %d, err %v; want 0 kept, 7 fired", len(ds), *fires, err)
	}
	*fires = 0
	ds, _, err = sampleNotify(ctx, nt, false, 5, time.Minute, make([]time.Duration, 0, 5))
	if err != nil || len(ds) != 5 || *fires != 5 {
		t.Errorf("measurement of 5: kept %d, fired %d, err %v; want 5 and 5", len(ds), *fires, err)
	}
	*fires = 0
	ds, _, err = sampleNotify(ctx, nt, false, 1000, 0, ds)
	if err != nil || len(ds) != 5 || *fires != 0 {
		t.Errorf("measurement with no time left: kept %d (of 5 before), fired %d, err %v; want 5 and 0", len(ds), *fires, err)
	}
}

// The report lists every round's floors with each stretch's p50, and a run
// older than the floors has no such section.
func TestReport_floorsSection(t *testing.T) {
	res := targetsFixture()
	res.CycleFloor[0].StretchP50 = []time.Duration{90 * time.Microsecond, 110 * time.Microsecond}
	out := report(res)
	if !strings.Contains(out, "## Floors (durable servers)") || !strings.Contains(out, "| 90 µs / 110 µs |") {
		t.Errorf("report has no floors section with the stretches' p50s:\n%s", out[strings.Index(out, "## Targets"):][:3000])
	}
	res.CycleFloor = nil
	if out := report(res); strings.Contains(out, "## Floors") {
		t.Error("a run with no floors has a floors section")
	}
}

// The floor behind another client's write has rows of its own in the
// floors section, with the samples left out as not behind the write; a run
// older than it has none, and its other floors' rows say "–" there.
func TestReport_floorsSection_behindAnotherWrite(t *testing.T) {
	res := targetsFixture()
	res.HandoffFloor = []floorResult{{Backend: "redis", Op: notifyOps["redis"], Round: 1, N: 100, P50: 60 * time.Microsecond}}
	out := report(res)
	if strings.Contains(out, "| hand-off behind another client's write |") || !strings.Contains(out, "| hand-off (one notification) | redis | "+notifyOps["redis"]+" | 1 | 100 | 60 µs | – | – | – | – |") {
		t.Errorf("run with no floor behind a write: want no such row and \"–\" in the left-out column:\n%s", floorsSection(out))
	}
	res.HandoffFloorBehind = []floorResult{{Backend: "redis", Op: notifyBehindOps["redis"], Round: 1, N: 100, P50: 70 * time.Microsecond, Unordered: 3}}
	out = report(res)
	if !strings.Contains(out, "| hand-off behind another client's write | redis | "+notifyBehindOps["redis"]+" | 1 | 100 | 70 µs | – | – | – | 3 of 103 |") {
		t.Errorf("floor behind a write: no row with 3 of 103 samples left out:\n%s", floorsSection(out))
	}
}

func floorsSection(out string) string {
	i := strings.Index(out, "## Floors")
	if i < 0 {
		return "(no floors section)"
	}
	return out[i:min(len(out), i+4000)]
}
