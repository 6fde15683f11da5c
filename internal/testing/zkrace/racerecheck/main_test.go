package main

import (
	"slices"
	"strings"
	"testing"
)

const upstreamRace = `==================
WARNING: DATA RACE
Write at 0x00c0003a8a80 by goroutine 63057:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c

Previous read at 0x00c0003a8a80 by goroutine 62894:
  github.com/go-zookeeper/zk.(*Conn).sendSetWatches()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:614 +0x49d
==================
`

const ourRace = `==================
WARNING: DATA RACE
Write at 0x00c000123456 by goroutine 12:
  github.com/dlockdev/dlock/zkdlock.(*attempt).forget()
      /src/zkdlock/acquire.go:211 +0x44

Previous read at 0x00c000123456 by goroutine 9:
  github.com/go-zookeeper/zk.(*Conn).recvLoop()
      /root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c
==================
`

const raceFail = `--- FAIL: TestLease_lostLocally (3.15s)
    testing.go:1712: race detected during execution of test
FAIL
FAIL	github.com/dlockdev/dlock/zkdlock	180.938s
`

func TestRecheck(t *testing.T) {
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
