package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const raceFail = `--- FAIL: TestLease_lostLocally (3.15s)
    testing.go:1712: race detected during execution of test
FAIL
FAIL	github.com/dlockdev/dlock/zkdlock	180.938s
`

func TestRecheck(t *testing.T) {
	upstreamRace, ourRace := read(t, "upstream.txt"), read(t, "ours.txt")
	ok := "ok  \tgithub.com/dlockdev/dlock/memdlock\t21.086s\n"
	for _, tc := range []struct {
		name, out string
		want      []rerun // nil: refused
	}{
		{"upstream race only", ok + upstreamRace + raceFail,
			[]rerun{{"github.com/dlockdev/dlock/zkdlock", "^(TestLease_lostLocally)$"}}},
		{"a subtest", upstreamRace + "--- FAIL: TestA (1s)\n    --- FAIL: TestA/b (1s)\n        testing.go:1712: race detected during execution of test\nFAIL\nFAIL\tp\t1s\n",
			[]rerun{{"p", "^(TestA)$"}}},
		{"our race", ok + ourRace + raceFail, nil},
		{"an assertion too", upstreamRace + strings.Replace(raceFail, "FAIL\n", "    x_test.go:9: got 2 holders\nFAIL\n", 1), nil},
		{"a panic", "panic: boom\nFAIL\tp\t1s\n", nil},
		{"a build failure", "FAIL\tp [build failed]\n", nil},
		{"nothing failed", ok, nil},
	} {
		got, err := recheck(tc.out)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%s: rerun %v, want refused", tc.name, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// read returns a race report from package zkrace's testdata.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
