// Package zkrace recognises the one data race known in go-zookeeper v1.0.4
// (the newest): on a reconnect, Conn.loop's sendSetWatches reads lastZxid
// while the new connection's recvLoop already writes it (upstream issues
// samuel/go-zookeeper#178 and #260, go-zookeeper/zk PR #35). Tests that cut
// ZooKeeper connections hit it now and then; it is not dlock's, and nothing
// in dlock can order those two goroutines. The race detector's reports of
// it are told apart here, and only a report whose two accesses are exactly
// those two functions is.
package zkrace

import "strings"

// Begin starts every report of the race detector.
const Begin = "WARNING: DATA RACE"

// Others returns the race reports in out, less go-zookeeper's known race.
func Others(out string) []string {
	var others []string
	for _, part := range strings.Split(out, Begin)[1:] {
		report, _, _ := strings.Cut(part, "==================")
		if !IsUpstream(report) {
			others = append(others, Begin+report)
		}
	}
	return others
}

// IsUpstream reports whether one race report is go-zookeeper's lastZxid
// race: a write by recvLoop against a read by sendSetWatches (either order).
func IsUpstream(report string) bool {
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
