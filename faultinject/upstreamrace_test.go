package faultinject_test

import (
	"strings"
	"testing"
)

// raceReportsBeyondUpstream returns the race detector's reports in a
// holder's stderr, less the one known race inside go-zookeeper v1.0.4 (the
// newest): on a reconnect, Conn.loop's sendSetWatches reads lastZxid while
// the new connection's recvLoop already writes it (upstream issues
// samuel/go-zookeeper#178 and #260, go-zookeeper/zk PR #35). The fault
// proxies force many reconnects, so the holders hit it now and then; it is
// not dlock's, and nothing in dlock can order those two goroutines. A
// report is tolerated only when both of its accesses are exactly those two
// functions; any other report is returned.
func raceReportsBeyondUpstream(stderr string) []string {
	const begin = "WARNING: DATA RACE"
	var others []string
	for _, part := range strings.Split(stderr, begin)[1:] {
		report, _, _ := strings.Cut(part, "==================")
		if !isUpstreamZKRace(report) {
			others = append(others, begin+report)
		}
	}
	return others
}

// isUpstreamZKRace reports whether a race report is go-zookeeper's lastZxid
// race: a write by recvLoop against a read by sendSetWatches (either order).
func isUpstreamZKRace(report string) bool {
	first, second, ok := strings.Cut(report, "Previous ")
	if !ok {
		return false
	}
	// The top frame of each access is the first function line after it.
	top := func(s string) string {
		for _, line := range strings.Split(s, "\n") {
			if line = strings.TrimSpace(line); strings.HasPrefix(line, "github.com/") || strings.HasPrefix(line, "main.") {
				return line
			}
		}
		return ""
	}
	a, b := top(first), top(second)
	const recv, setWatches = "github.com/go-zookeeper/zk.(*Conn).recvLoop(", "github.com/go-zookeeper/zk.(*Conn).sendSetWatches("
	return (strings.HasPrefix(a, recv) && strings.HasPrefix(b, setWatches)) ||
		(strings.HasPrefix(a, setWatches) && strings.HasPrefix(b, recv))
}

// raceExitCode is the exit status of a process whose race detector fired.
const raceExitCode = 66

// The filter drops only go-zookeeper's lastZxid race (a report as the race
// detector printed it in a holder), and keeps any other.
func TestRaceReportsBeyondUpstream(t *testing.T) {
	const upstream = `==================
WARNING: DATA RACE
Write at 0x00c0002ed080 by goroutine 138:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
  github.com/go-zookeeper/zk.(*Conn).loop.func2()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:474 +0x1c4

Previous read at 0x00c0002ed080 by goroutine 117:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x49d
  github.com/go-zookeeper/zk.(*Conn).loop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:484 +0x54b
==================
`
	const ours = `==================
WARNING: DATA RACE
Write at 0x00c000123456 by goroutine 12:
  github.com/dlockdev/dlock/zkdlock.(*attempt).forget()
      /src/zkdlock/acquire.go:211 +0x44

Previous read at 0x00c000123456 by goroutine 9:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
==================
`
	if got := raceReportsBeyondUpstream(upstream); len(got) != 0 {
		t.Errorf("the upstream race was kept: %q", got)
	}
	if got := raceReportsBeyondUpstream(upstream + ours + upstream); len(got) != 1 {
		t.Errorf("kept %d reports of upstream+ours+upstream, want 1 (ours)", len(got))
	}
	if got := raceReportsBeyondUpstream("plain stderr, no race"); len(got) != 0 {
		t.Errorf("kept %q from stderr without a race", got)
	}
}
