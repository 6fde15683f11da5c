package main

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// TestElectVariableIsNoFlag: the variable dlock elect adds to PROGRAM's
// environment must not set a flag of a dlock that PROGRAM runs (as
// TestChildVariablesAreNoFlags for run's): DLOCK_VALUE would make a
// nested dlock elect publish its parent's value.
func TestElectVariableIsNoFlag(t *testing.T) {
	for _, cmd := range visibleCommands() {
		f := flagsOf(cmd)
		if f == nil {
			continue
		}
		f.VisitAll(func(fl *flag.Flag) {
			if envName(fl.Name) == envLeaderValue {
				t.Errorf("dlock %s --%s is set by %s, which dlock elect gives PROGRAM", cmd.name, fl.Name, envLeaderValue)
			}
		})
	}
	if slices.Contains(childVariables, envLeaderValue) {
		t.Errorf("%s is already one of run's variables", envLeaderValue)
	}
}

// TestLeaderLine pins the text form of dlock leader, which docs/cli.md
// shows: what is unknown (since, an empty value) is left out.
func TestLeaderLine(t *testing.T) {
	now := time.Date(2025, 6, 1, 14, 4, 14, 0, time.Local)
	since := now.Add(-123 * time.Second)
	for _, tc := range []struct {
		info dlock.LeaderInfo
		want string
	}{
		{dlock.LeaderInfo{Key: "k"}, "k: no leader"},
		{dlock.LeaderInfo{Key: "k", Token: 7, Value: "10.0.0.7:8080", Since: since, Metadata: dlock.Metadata{Host: "build-7", PID: 42}},
			`k: led by build-7 pid 42 since 14:02:11 (2m3s ago), token 7, value "10.0.0.7:8080"`},
		{dlock.LeaderInfo{Key: "k", Token: 7, Metadata: dlock.Metadata{Host: "build-7", PID: 42}}, "k: led by build-7 pid 42, token 7"},
	} {
		if got := leaderLine("k", tc.info, now); got != tc.want {
			t.Errorf("leaderLine(%+v) = %q, want %q", tc.info, got, tc.want)
		}
	}
	j := leaderJSON("k", dlock.LeaderInfo{Key: "k"})
	if j.Leader != nil || !strings.Contains(j.Key, "k") {
		t.Errorf("no leader: %+v, want leader nil", j)
	}
}
