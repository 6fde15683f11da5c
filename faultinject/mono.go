package faultinject

import (
	"time"

	"golang.org/x/sys/unix"
)

// Mono returns CLOCK_MONOTONIC in nanoseconds. Every process on the machine
// reads the same clock, so timestamps taken by the harness, the holders and
// the proxy can be compared with each other; the wall clock could step.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faultinject: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// MonoOf converts a time.Time that carries a monotonic reading (one derived
// from time.Now) to the Mono clock.
func MonoOf(t time.Time) int64 {
	return Mono() + int64(time.Until(t))
}

// MonoDur formats a Mono difference for reports.
func MonoDur(ns int64) time.Duration { return time.Duration(ns) }
