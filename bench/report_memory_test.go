package main

import (
	"strings"
	"testing"
)

// The memory section divides each growth over the empty server by the keys
// locked, says what a released key leaves, and shows a library that did
// not run, or locked nothing, without NaN.
func TestMemoryReport(t *testing.T) {
	res := &results{
		Command: "cd bench && ./run.sh -only memory",
		Memory: []memoryResult{
			{Lib: "dlock (redis)", Backend: "redis", Keys: 100000, Locked: 100000,
				Base:     memSample{Bytes: 1_000_000, Keys: 0},
				Held:     memSample{Bytes: 1_000_000 + 54_600_000, Keys: 200000},
				Released: memSample{Bytes: 1_000_000 + 10_500_000, Keys: 100000},
				MemWhat:  "Redis used_memory less mem_clients_normal", KeysWhat: "DBSIZE"},
			{Lib: "redsync", Backend: "redis", Keys: 100000, Locked: 100000,
				Base:     memSample{Bytes: 900_000, Keys: 0},
				Held:     memSample{Bytes: 900_000 + 15_000_000, Keys: 100000},
				Released: memSample{Bytes: 900_000, Keys: 0},
				MemWhat:  "Redis used_memory less mem_clients_normal", KeysWhat: "DBSIZE"},
			{Lib: "dlock (etcd)", Backend: "etcd", Missing: "not available: the etcddlock package did not build when this report was made"},
			{Lib: "etcd Mutex", Backend: "etcd", Keys: 20000, Err: "dial tcp: connection refused"},
		},
	}
	var m md
	memoryReport(&m, res)
	out := m.String()
	for _, want := range []string{
		"`cd bench && ./run.sh -only memory`",
		"| dlock (redis) | 100000 of 100000 | – | – | 976.6 KiB, 0 | 546 B, 2.00 | 105 B, 1.00 | 100000 | Redis used_memory less mem_clients_normal; DBSIZE |  |",
		"| redsync | 100000 of 100000 | – | – | 878.9 KiB, 0 | 150 B, 1.00 | 0 B, 0 | 0 |",
		"| dlock (etcd) | not available: the etcddlock package did not build",
		"| etcd Mutex | 0 of 20000 | – | – | – | – | – | – |  | dial tcp: connection refused |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NaN") {
		t.Errorf("report shows NaN:\n%s", out)
	}

	if whole := report(res); !strings.Contains(whole, out) {
		t.Errorf("the whole report lacks the memory section:\n%s", whole)
	}

	m = md{}
	memoryReport(&m, &results{})
	if !strings.Contains(m.String(), "Not measured in this run (`cd bench && ./run.sh -only memory` runs just this section).") {
		t.Errorf("report of a run without the section:\n%s", m.String())
	}
}
