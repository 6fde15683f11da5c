package main

import (
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// The formatting of status, ls and run's messages, for each kind, from
// LockInfo values as the backends report them. The scripts check the same
// against real servers (status.txtar, semaphore.txtar, rwmutex.txtar);
// these pin the exact layout, independent of what a backend supports.

var fmtNow = time.Date(2026, 1, 2, 14, 0, 0, 0, time.Local)

func entry(token uint64, mode dlock.Mode, host string, pid int, note string) dlock.Entry {
	return dlock.Entry{Token: token, Mode: mode, Metadata: dlock.Metadata{Host: host, PID: pid, Note: note},
		Since: fmtNow.Add(-3 * time.Second), TTL: 9 * time.Second}
}

func semInfo() *dlock.LockInfo {
	return &dlock.LockInfo{Key: "exports", Kind: dlock.KindSemaphore, Limit: 2,
		Holders: []dlock.Entry{entry(7, dlock.Shared, "a", 1, "x"), entry(9, dlock.Shared, "b", 2, "y")},
		Waiters: []dlock.Entry{entry(0, dlock.Shared, "c", 3, "z")}}
}

func rwInfo() *dlock.LockInfo {
	return &dlock.LockInfo{Key: "prices", Kind: dlock.KindRWMutex, Limit: 0,
		Holders: []dlock.Entry{entry(4, dlock.Shared, "a", 1, "read"), entry(5, dlock.Shared, "b", 2, "read")},
		Waiters: []dlock.Entry{entry(0, dlock.Exclusive, "c", 3, "write"), entry(0, dlock.Shared, "d", 4, "read")}}
}

func lockInfo() *dlock.LockInfo {
	return &dlock.LockInfo{Key: "nightly", Kind: dlock.KindLock, Limit: 1,
		Holders: []dlock.Entry{entry(11, dlock.Exclusive, "a", 1, "make")},
		Waiters: []dlock.Entry{entry(0, dlock.Exclusive, "b", 2, "make")}}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}

func TestWriteStatus(t *testing.T) {
	for _, tc := range []struct {
		in   *dlock.LockInfo
		want []string
	}{
		{lockInfo(), []string{
			"nightly (lock): held by a pid 1, 1 waiting",
			"",
			"ROLE MODE HOST PID TOKEN SINCE TTL LEFT NOTE",
			"holder exclusive a 1 11 13:59:57 (3s ago) 9s make",
			"waiter 1 exclusive b 2 - 13:59:57 (3s ago) 9s make",
		}},
		{semInfo(), []string{
			"exports (semaphore of 2 permits): 2 of 2 held, 1 waiting",
			"",
			"ROLE MODE HOST PID TOKEN SINCE TTL LEFT NOTE",
			"holder shared a 1 7 13:59:57 (3s ago) 9s x",
			"holder shared b 2 9 13:59:57 (3s ago) 9s y",
			"waiter 1 shared c 3 - 13:59:57 (3s ago) 9s z",
		}},
		{rwInfo(), []string{
			"prices (read-write lock): held for reading by 2, 2 waiting",
			"",
			"ROLE MODE HOST PID TOKEN SINCE TTL LEFT NOTE",
			"holder shared a 1 4 13:59:57 (3s ago) 9s read",
			"holder shared b 2 5 13:59:57 (3s ago) 9s read",
			"waiter 1 exclusive c 3 - 13:59:57 (3s ago) 9s write",
			"waiter 2 shared d 4 - 13:59:57 (3s ago) 9s read",
		}},
		{&dlock.LockInfo{Key: "prices", Kind: dlock.KindRWMutex, Holders: []dlock.Entry{entry(6, dlock.Exclusive, "c", 3, "write")}}, []string{
			"prices (read-write lock): held for writing by c pid 3, nobody waiting",
			"",
			"ROLE MODE HOST PID TOKEN SINCE TTL LEFT NOTE",
			"holder exclusive c 3 6 13:59:57 (3s ago) 9s write",
		}},
		{&dlock.LockInfo{Key: "free", Kind: dlock.KindLock}, []string{"free: free (nobody holds it or waits for it)"}},
	} {
		var b strings.Builder
		writeStatus(&b, normalize(tc.in), fmtNow)
		if got := lines(b.String()); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.in.Key, got, tc.want)
		}
	}
}

func TestWriteList(t *testing.T) {
	var b strings.Builder
	rw := rwInfo()
	rw.Holders = rw.Holders[:1]
	writeList(&b, []*dlock.LockInfo{semInfo(), lockInfo(), rw, {Key: "q", Kind: dlock.KindLock, Limit: 1, Waiters: rw.Waiters}}, fmtNow)
	want := []string{
		"KEY KIND HOLDERS WAITERS HOLDER TOKEN HELD SINCE TTL LEFT NOTE",
		"exports semaphore/2 2 1 a pid 1 and 1 more 7 13:59:57 (3s ago) 9s x",
		"nightly lock 1 1 a pid 1 11 13:59:57 (3s ago) 9s make",
		"prices rwmutex 1 shared 2 a pid 1 4 13:59:57 (3s ago) 9s read",
		"q lock 0 2 - - - -",
	}
	if got := lines(b.String()); !slices.Equal(got, want) {
		t.Errorf("ls:\ngot  %q\nwant %q", got, want)
	}
}

func TestDescribeHolders(t *testing.T) {
	sem4 := semInfo()
	sem4.Limit = 4
	sem4.Holders = append(sem4.Holders, entry(12, dlock.Shared, "d", 4, ""), entry(13, dlock.Shared, "e", 5, ""))
	sem4.Waiters = nil
	for _, tc := range []struct {
		in   *dlock.LockInfo
		want string
	}{
		// As before the kinds existed: nowait.txtar matches it.
		{lockInfo(), `held by a pid 1 running "make" for 3s (token 11), 1 waiting`},
		{semInfo(), `2 of 2 permits held, by a pid 1 running "x" (token 7) and b pid 2 running "y" (token 9), 1 waiting`},
		{sem4, `4 of 4 permits held, by a pid 1 running "x" (token 7), b pid 2 running "y" (token 9), d pid 4 (token 12) and 1 more`},
		{rwInfo(), `held for reading by a pid 1 running "read" (token 4) and b pid 2 running "read" (token 5), 2 waiting (the first to write)`},
		{&dlock.LockInfo{Key: "one", Kind: dlock.KindSemaphore, Limit: 1, Holders: []dlock.Entry{entry(3, dlock.Shared, "a", 1, "")}},
			`its permit is held by a pid 1 for 3s (token 3)`},
		{&dlock.LockInfo{Key: "none", Kind: dlock.KindSemaphore, Limit: 1, Waiters: []dlock.Entry{entry(0, dlock.Shared, "a", 1, "")}}, ``},
	} {
		if got := describeHolders(tc.in, fmtNow); got != tc.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tc.in.Key, got, tc.want)
		}
	}
}

// TestStatusJSON pins the --json schema: the fields of before (key,
// holder, waiters, and each entry's token, host, pid, note, since,
// ttl_left_ms) unchanged, and kind, limit, holders and mode added.
func TestStatusJSON(t *testing.T) {
	b, err := json.Marshal(toJSON(rwInfo(), fmtNow))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		slices.Sort(k)
		return k
	}
	if k := keys(got); !slices.Equal(k, []string{"holder", "holders", "key", "kind", "limit", "waiters"}) {
		t.Errorf("fields %q", k)
	}
	if got["kind"] != "rwmutex" || got["limit"] != 0.0 {
		t.Errorf("kind %v, limit %v", got["kind"], got["limit"])
	}
	holders, waiters := got["holders"].([]any), got["waiters"].([]any)
	if len(holders) != 2 || len(waiters) != 2 {
		t.Fatalf("%d holders, %d waiters", len(holders), len(waiters))
	}
	h0 := holders[0].(map[string]any)
	if k := keys(h0); !slices.Equal(k, []string{"host", "mode", "note", "pid", "since", "token", "ttl_left_ms"}) {
		t.Errorf("holder fields %q", k)
	}
	if h0["mode"] != "shared" || h0["token"] != 4.0 || holders[1].(map[string]any)["token"] != 5.0 {
		t.Errorf("holders %v", holders)
	}
	if holder, _ := got["holder"].(map[string]any); holder == nil || holder["token"] != 4.0 {
		t.Errorf("holder %v, want the first of holders", got["holder"])
	}
	w0 := waiters[0].(map[string]any)
	if _, ok := w0["token"]; ok || w0["mode"] != "exclusive" || waiters[1].(map[string]any)["mode"] != "shared" {
		t.Errorf("waiters %v", waiters)
	}

	free, err := json.Marshal(toJSON(normalize(&dlock.LockInfo{Key: "k"}), fmtNow))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"key":"k","kind":"lock","limit":1,"holder":null,"holders":[],"waiters":[]}`; string(free) != want {
		t.Errorf("free key: %s, want %s", free, want)
	}
}

// TestChildVariablesAreNoFlags: the variables dlock run gives PROGRAM
// must not set a flag of a dlock that PROGRAM runs. DLOCK_MODE beside a
// flag --mode would turn every nested `dlock run` into a reader.
func TestChildVariablesAreNoFlags(t *testing.T) {
	for _, cmd := range visibleCommands() {
		f := flagsOf(cmd)
		if f == nil {
			continue
		}
		f.VisitAll(func(fl *flag.Flag) {
			if slices.Contains(childVariables, envName(fl.Name)) {
				t.Errorf("dlock %s --%s is set by %s, which dlock run gives PROGRAM", cmd.name, fl.Name, envName(fl.Name))
			}
		})
	}
}
