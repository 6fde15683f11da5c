package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method, or 0 for no samples.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(rank, 1)
	return s[rank-1]
}

// fmtDur prints a duration in µs or ms with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtBytes(n float64) string {
	switch {
	case math.Abs(n) >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case math.Abs(n) >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case math.Abs(n) >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", n)
	}
}

func fmtFloat(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "–"
	case f == 0:
		return "0"
	case math.Abs(f) >= 100:
		return fmt.Sprintf("%.0f", f)
	case math.Abs(f) >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}
