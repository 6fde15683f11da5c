package main

import (
	"fmt"
	"log"
	"math"
	"slices"
	"time"
)

// spread is one figure measured in several rounds: its median and range.
type spread struct {
	Med, Min, Max float64
	N             int // rounds with a value
}

// spreadOf is the median and range of xs, NaN values left out; N is 0
// when none is left.
func spreadOf(xs []float64) spread {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{Med: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{Med: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// durSpread is spreadOf for durations, 0 (no sample) counted as none.
func durSpread(ds []time.Duration) spread {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = math.NaN()
		if d > 0 {
			xs[i] = float64(d)
		}
	}
	return spreadOf(xs)
}

// ok reports whether any round gave a value.
func (s spread) ok() bool { return s.N > 0 }

// format writes the median, and the range when more than one round gave a
// value: "1.20 ms (1.10–1.31 ms, 3 rounds)".
func (s spread) format(f func(float64) string) string {
	if !s.ok() {
		return "–"
	}
	if s.N == 1 {
		return f(s.Med)
	}
	return fmt.Sprintf("%s (%s–%s, %d rounds)", f(s.Med), f(s.Min), f(s.Max), s.N)
}

func fmtDurF(x float64) string { return fmtDur(time.Duration(x)) }

// sectionRun is one section of a run, with the machine's load average (1,
// 5, 15 min) when it began and ended: a section measured on a busy machine
// says so.
type sectionRun struct {
	Name               string
	Start, End         time.Time
	LoadStart, LoadEnd string
}

// section runs f as the section name, logging and recording the load
// average at its start and end.
func (res *results) section(name string, f func()) {
	sr := sectionRun{Name: name, Start: time.Now(), LoadStart: loadavg()}
	log.Printf("== %s: load average %s", name, sr.LoadStart)
	f()
	sr.End, sr.LoadEnd = time.Now(), loadavg()
	log.Printf("== %s done in %v: load average %s", name, sr.End.Sub(sr.Start).Round(time.Second), sr.LoadEnd)
	res.Sections = append(res.Sections, sr)
}

// medianRTT is the round-trip table of several rounds: for each request,
// the round whose p50 is the median (its own p99 with it), the samples of
// every round added up.
func medianRTT(rounds []map[string]rttResult) map[string]rttResult {
	out := map[string]rttResult{}
	for _, m := range rounds {
		for k := range m {
			if _, done := out[k]; done {
				continue
			}
			var rs []rttResult
			for _, m2 := range rounds {
				if r, ok := m2[k]; ok && r.N > 0 {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				out[k] = m[k]
				continue
			}
			slices.SortFunc(rs, func(a, b rttResult) int { return int(a.P50 - b.P50) })
			med := rs[len(rs)/2]
			med.N = 0
			for _, r := range rs {
				med.N += r.N
			}
			out[k] = med
		}
	}
	return out
}

// inRoundOrder is libs in the order they run in round (1, 2, …): each
// server's libraries, which run one after another, start one place later
// each round, so that no library always runs first on a fresh server or
// last on a tired one.
func inRoundOrder(libs []*library, round int) []*library {
	out := make([]*library, 0, len(libs))
	for i := 0; i < len(libs); {
		j := i
		for j < len(libs) && libs[j].Backend == libs[i].Backend {
			j++
		}
		group := libs[i:j]
		k := (round - 1) % len(group)
		out = append(out, group[k:]...)
		out = append(out, group[:k]...)
		i = j
	}
	return out
}
