package main

import (
	"errors"
	"flag"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// TestParseInterspersed pins where flags end: nowhere before "--", and
// for dlock run (stopAt 2) at PROGRAM.
func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stopAt int
		pos    []string
		json   bool
		ttl    string
	}{
		{args: []string{"k", "--json"}, pos: []string{"k"}, json: true},
		{args: []string{"--json", "k"}, pos: []string{"k"}, json: true},
		{args: []string{"a", "--ttl", "3s", "b", "-json"}, pos: []string{"a", "b"}, json: true, ttl: "3s"},
		{args: []string{"a", "--ttl=3s", "--", "--json", "-"}, pos: []string{"a", "--json", "-"}, ttl: "3s"},
		{args: []string{"--ttl", "--json"}, ttl: "--json"}, // a value is a value
		{args: []string{"k", "prog", "--json"}, stopAt: 2, pos: []string{"k", "prog", "--json"}},
		{args: []string{"--json", "k", "--ttl", "1s", "prog", "--ttl", "2s"}, stopAt: 2, pos: []string{"k", "prog", "--ttl", "2s"}, json: true, ttl: "1s"},
		{args: []string{"--", "k", "--json"}, stopAt: 2, pos: []string{"k", "--json"}},
		{args: []string{"-", "--json"}, pos: []string{"-"}, json: true}, // "-" is an argument
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		asJSON := fs.Bool("json", false, "")
		ttl := fs.String("ttl", "", "")
		pos, err := parseInterspersed(fs, tc.args, tc.stopAt)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !slices.Equal(pos, tc.pos) || *asJSON != tc.json || *ttl != tc.ttl {
			t.Errorf("%q: positional %q, json %v, ttl %q; want %q, %v, %q", tc.args, pos, *asJSON, *ttl, tc.pos, tc.json, tc.ttl)
		}
	}
}

func TestParseInterspersedErrors(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("json", false, "")
	fs.Duration("ttl", 0, "")
	var unknown *unknownFlagError
	if _, err := parseInterspersed(fs, []string{"k", "--jsn"}, 0); !errors.As(err, &unknown) || unknown.suggestion != "--json" {
		t.Errorf("--jsn: %v, want an unknown flag suggesting --json", err)
	}
	for _, help := range []string{"-h", "--help", "-help"} {
		if _, err := parseInterspersed(fs, []string{"k", help}, 0); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", help, err)
		}
	}
	if _, err := parseInterspersed(fs, []string{"k", "--ttl"}, 0); err == nil || !strings.Contains(err.Error(), "needs an argument") {
		t.Errorf("--ttl at the end: %v", err)
	}
	if _, err := parseInterspersed(fs, []string{"k", "--ttl", "soon"}, 0); err == nil || !strings.Contains(err.Error(), "invalid value") {
		t.Errorf("--ttl soon: %v", err)
	}
	if _, err := parseInterspersed(fs, []string{"---json"}, 0); err == nil {
		t.Errorf("---json: no error")
	}
}

func TestSuggest(t *testing.T) {
	names := commandNames()
	for typed, want := range map[string]string{
		"stauts": "status", "statsu": "status", "stat": "status", "s": "", "sl": "ls",
		"rn": "run", "srve": "serve", "frobnicate": "", "x": "", "verison": "version",
		"compl": "completion",
	} {
		if got := suggest(typed, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", typed, got, want)
		}
	}
}

func TestVersionFrom(t *testing.T) {
	v := versionFrom(&debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/dlockdev/dlock/cmd/dlock", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.modified", Value: "true"},
			{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
		},
	})
	var b strings.Builder
	v.write(&b)
	for _, want := range []string{"dlock v1.2.3\n", "module:   github.com/dlockdev/dlock/cmd/dlock\n", "revision: 0123abcd (modified)\n", "time:     2025-01-02T03:04:05Z\n", "go:       go1.26.0 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, b.String())
		}
	}
	if v := versionFrom(&debug.BuildInfo{GoVersion: "go1.26.0"}); v.Version != "(devel)" || v.Revision != "" {
		t.Errorf("no module version: %+v", v)
	}
}

// TestUsageDocumentsEveryFlag keeps the hand-written usage texts in step
// with the table and the FlagSets that completion reads: every visible
// command appears in dlock's usage, every flag in its command's usage.
func TestUsageDocumentsEveryFlag(t *testing.T) {
	for _, cmd := range visibleCommands() {
		if !strings.Contains(usageMain, "dlock "+cmd.name+" ") {
			t.Errorf("dlock's usage does not list %q", cmd.name)
		}
		if cmd.usage == "" || cmd.summary == "" {
			t.Errorf("%s: no usage or summary", cmd.name)
		}
		f := flagsOf(cmd)
		if f == nil {
			t.Errorf("%s: builds no FlagSet", cmd.name)
			continue
		}
		f.VisitAll(func(fl *flag.Flag) {
			if !documentedFlag(cmd.usage, fl.Name) {
				t.Errorf("%s --help does not document %s", cmd.name, flagSpelling(fl.Name))
			}
		})
	}
}
