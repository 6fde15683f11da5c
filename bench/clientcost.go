package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

type clientCostResult struct {
	Lib         string
	N           int
	NsPerOp     float64 // wall time per acquire+release
	CPUNsPerOp  float64 // this process's CPU time (user+sys) per acquire+release
	AllocsPerOp int64
	BytesPerOp  int64
	Err         string
}

func (r clientCostResult) String() string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	return fmt.Sprintf("%d ops, %.0f ns/op, %.0f cpu-ns/op, %d allocs/op, %d B/op", r.N, r.NsPerOp, r.CPUNsPerOp, r.AllocsPerOp, r.BytesPerOp)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchCycle is the client-cost benchmark: one client, one key, acquire and
// release in a loop. It reports cpu-ns/op besides ns/op: the client
// process's CPU per cycle, background goroutines (renewal, notifications)
// included.
func benchCycle(b *testing.B, s *servers, lib *library) {
	ctx := context.Background()
	c, err := lib.newContender(ctx, s.env, "client-cost")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		if err := c.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := c.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// runClientCost runs benchCycle through testing.Benchmark, the engine of
// go test -bench -benchmem (bench_test.go runs the same function that way).
func runClientCost(s *servers, lib *library) clientCostResult {
	r := clientCostResult{Lib: lib.Name}
	done := make(chan testing.BenchmarkResult, 1)
	go func() { done <- testing.Benchmark(func(b *testing.B) { benchCycle(b, s, lib) }) }()
	var br testing.BenchmarkResult
	select {
	case br = <-done:
	case <-time.After(60 * time.Second):
		r.Err = "did not finish in 60 s"
		return r
	}
	if br.N == 0 {
		r.Err = "benchmark failed"
		return r
	}
	r.N = br.N
	r.NsPerOp = float64(br.T.Nanoseconds()) / float64(br.N)
	r.CPUNsPerOp = br.Extra["cpu-ns/op"]
	r.AllocsPerOp = br.AllocsPerOp()
	r.BytesPerOp = br.AllocedBytesPerOp()
	return r
}
