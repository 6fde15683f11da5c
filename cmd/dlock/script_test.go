package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/dlocktest"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/rogpeppe/go-internal/testscript"
)

// scriptCommands are the commands the scripts have on top of testscript's.
func scriptCommands(t *testing.T) map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		// exits CODE PROG [ARGS...]: run PROG in the foreground and
		// require exit status CODE; stdout and stderr can then be checked.
		"exits": cmdExits,
		// start NAME PROG [ARGS...]: run PROG in the background; its
		// output goes to NAME.stdout and NAME.stderr in $WORK.
		"start": cmdStart,
		// signal NAME SIG: send SIG (TERM, INT, HUP, QUIT, USR1, USR2,
		// KILL) to the background process NAME.
		"signal": cmdSignal,
		// await NAME CODE: wait for the background process NAME to exit
		// and require exit status CODE; a signal name (KILL) for CODE
		// requires that the signal killed it.
		"await": cmdAwait,
		// gone PIDFILE: wait until the process that `tick` described in
		// PIDFILE has exited.
		"gone": cmdGone,
		// waitfor FILE [REGEXP]: wait until FILE exists (and matches).
		"waitfor": cmdWaitfor,
		// queued KEY N [HOLDERS]: wait until KEY is held (by HOLDERS,
		// when given) and N others wait for it.
		"queued": cmdQueued,
		// proxy VAR: start a TCP proxy to the backend and set VAR to the
		// backend URL through it.
		"proxy": func(ts *testscript.TestScript, neg bool, args []string) { cmdProxy(t, ts, args) },
		// blackhole VAR: stop all traffic through the proxy of VAR.
		"blackhole": cmdBlackhole,
		// readvar VAR FILE: set VAR to the first line of FILE.
		"readvar": cmdReadvar,
		// jsonvalid: require that stdout is valid JSON.
		"jsonvalid": cmdJSONValid,
		// jsonfield PATH REGEXP: require that the value at PATH in the
		// JSON on stdout matches REGEXP. PATH is dot-separated object
		// keys and list indexes (holders.0.mode); a last element # is
		// the length of a list ('waiters.#', quoted: # starts a comment).
		// Strings match without their quotes, null as null, other values
		// in their JSON form.
		"jsonfield": cmdJSONField,
		// serialized FILE N: require that FILE, written by N runs of
		// `critical`, shows N critical sections one after another.
		"serialized": cmdSerialized,
		// postgres VAR: set VAR to the URL of a new, empty PostgreSQL
		// database of this script's own, on the server the scripts
		// share, which the first use starts (only scripts that need it
		// pay for it).
		"postgres": cmdPostgres,
		// scrape NAME METRIC [VALUE [LABEL=VALUE...]]: scrape the
		// /metrics that the background process NAME serves, at the
		// address it printed on its stderr, and require a series of
		// METRIC (with exactly those labels, and that value; a
		// histogram's value is its count).
		"scrape": cmdScrape,
	}
}

func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ts.Fatalf("%s was killed by %v", args[1], ws.Signal())
		}
	case err != nil:
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// proc is a background process of a script.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func procsOf(ts *testscript.TestScript) *procs { return ts.Value(procsKey{}).(*procs) }

// scriptEnv rebuilds the script's environment for processes started
// outside testscript's exec: the test process's environment without
// DLOCK_ variables, then the script's values of the variables the scripts
// use.
func scriptEnv(ts *testscript.TestScript) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_") {
			env = append(env, kv)
		}
	}
	names := []string{"PATH", "HOME", "TMPDIR", "WORK"}
	for _, flag := range []string{"backend", "ttl", "wait", "no-wait", "limit", "shared", "exclusive", "grace", "connect-timeout", "verbose", "json",
		"listen", "data-dir", "log-level", "workers", "jobs", "job-time", "no-fencing", "store", "keep-tables", "timeout"} {
		names = append(names, envName(flag))
	}
	for _, n := range names {
		if v := ts.Getenv(n); v != "" {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// scriptT is the key of the script's own *testing.T in its Values, for
// helpers that take a testing.TB.
type scriptT struct{}

func cmdPostgres(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: postgres VAR")
	}
	// The script's own test, on whose goroutine the commands run: a
	// failure to start the server fails (or, with -short, skips) this
	// script, not the others.
	t, ok := ts.Value(scriptT{}).(testing.TB)
	if !ok {
		ts.Fatalf("postgres: testscript's T is not a testing.TB here")
	}
	ts.Setenv(args[0], testserver.SharedPostgres(t).NewDatabase(t))
}

func cmdStart(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: start NAME PROG [ARGS...]")
	}
	name := args[0]
	if procsOf(ts).get(name) != nil {
		ts.Fatalf("a process named %s was started already", name)
	}
	path, err := exec.LookPath(args[1])
	ts.Check(err)
	cmd := exec.Command(path, args[2:]...)
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = scriptEnv(ts)
	stdout, err := os.Create(ts.MkAbs(name + ".stdout"))
	ts.Check(err)
	stderr, err := os.Create(ts.MkAbs(name + ".stderr"))
	ts.Check(err)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ts.Check(cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		stdout.Close()
		stderr.Close()
		close(p.done)
	}()
	procsOf(ts).add(name, p)
}

func signalByName(name string) (syscall.Signal, bool) {
	sigs := map[string]syscall.Signal{
		"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT,
		"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "KILL": syscall.SIGKILL,
	}
	s, ok := sigs[strings.TrimPrefix(name, "SIG")]
	return s, ok
}

func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: signal NAME SIG")
	}
	p := procsOf(ts).get(args[0])
	if p == nil {
		ts.Fatalf("no background process %s", args[0])
	}
	sig, ok := signalByName(args[1])
	if !ok {
		ts.Fatalf("unknown signal %s", args[1])
	}
	ts.Check(p.cmd.Process.Signal(sig))
}

func cmdAwait(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: await NAME CODE")
	}
	p := procsOf(ts).get(args[0])
	if p == nil {
		ts.Fatalf("no background process %s", args[0])
	}
	wantSig, bySignal := signalByName(args[1])
	want, err := strconv.Atoi(args[1])
	if !bySignal {
		ts.Check(err)
	}
	select {
	case <-p.done:
	case <-time.After(waitBound):
		_ = p.cmd.Process.Kill()
		<-p.done
		ts.Logf("%s.stderr:\n%s", args[0], ts.ReadFile(args[0]+".stderr"))
		ts.Fatalf("%s still ran after %v", args[0], waitBound)
	}
	ts.Logf("%s.stderr:\n%s", args[0], ts.ReadFile(args[0]+".stderr"))
	got := p.cmd.ProcessState.ExitCode()
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case bySignal && (!ws.Signaled() || ws.Signal() != wantSig):
		ts.Fatalf("%s ended with %v, want killed by %v", args[0], p.cmd.ProcessState, wantSig)
	case bySignal:
		return
	case ws.Signaled():
		ts.Fatalf("%s was killed by %v", args[0], ws.Signal())
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[0], got, want)
	}
}

func cmdGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: gone PIDFILE")
	}
	var pid int
	var start string
	_, err := fmt.Sscan(ts.ReadFile(args[0]), &pid, &start)
	ts.Check(err)
	if !waitUntil(waitBound, func() bool { return processGone(pid, start) }) {
		ts.Fatalf("process %d (%s) still runs after %v", pid, args[0], waitBound)
	}
}

// processGone reports whether the process pid, which started at start
// (the starttime of /proc/PID/stat), has exited. A zombie has: only its
// parent's wait is missing, and who that is depends on the machine's init.
func processGone(pid int, start string) bool {
	st, ok := procStat(pid)
	return !ok || st.state == "Z" || st.state == "X" || st.start != start
}

type procStatus struct{ state, start string }

// procStat reads the state and start time of a process from /proc.
func procStat(pid int) (procStatus, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStatus{}, false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 20 {
		return procStatus{}, false
	}
	return procStatus{state: f[0], start: f[19]}, true // fields 3 and 22
}

func cmdWaitfor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfor FILE [REGEXP]")
	}
	var re *regexp.Regexp
	if len(args) == 2 {
		var err error
		re, err = regexp.Compile("(?m)" + args[1])
		ts.Check(err)
	}
	path := ts.MkAbs(args[0])
	ok := waitUntil(waitBound, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && (re == nil || re.Match(b))
	})
	if !ok {
		b, _ := os.ReadFile(path)
		ts.Fatalf("after %v, %s does not exist or does not match; it holds:\n%s", waitBound, args[0], b)
	}
}

func cmdQueued(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: queued KEY N [HOLDERS]")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	holders := -1 // any number but 0
	if len(args) == 3 {
		holders, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	c, err := dlock.Open(ctx, ts.Getenv("DLOCK_BACKEND"))
	ts.Check(err)
	defer c.Close()
	var last *dlock.LockInfo
	ok := waitUntil(waitBound, func() bool {
		info, err := c.Inspect(ctx, args[0])
		if err != nil {
			return false
		}
		last = info
		held := len(info.Holders) != 0 && (holders < 0 || len(info.Holders) == holders)
		return held && len(info.Waiters) == n
	})
	if !ok {
		ts.Fatalf("after %v, %s is not held (by %s) with %d waiting: %+v", waitBound, args[0], args[2:], n, last)
	}
}

func cmdProxy(t *testing.T, ts *testscript.TestScript, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: proxy VAR")
	}
	b := ts.Value(backendKey{}).(*backend)
	p := dlocktest.NewProxy(t, b.addr)
	ts.Defer(p.Close)
	ts.Setenv(args[0], b.scheme+"://"+p.Addr()+b.path)
	ts.Setenv(args[0]+"_proxy", p.Addr())
	ps := procsOf(ts)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.proxies == nil {
		ps.proxies = map[string]*dlocktest.Proxy{}
	}
	ps.proxies[args[0]] = p
}

func cmdBlackhole(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: blackhole VAR")
	}
	ps := procsOf(ts)
	ps.mu.Lock()
	p := ps.proxies[args[0]]
	ps.mu.Unlock()
	if p == nil {
		ts.Fatalf("no proxy %s", args[0])
	}
	p.Blackhole()
}

func cmdReadvar(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: readvar VAR FILE")
	}
	line, _, _ := strings.Cut(ts.ReadFile(args[1]), "\n")
	ts.Setenv(args[0], line)
}

func cmdJSONValid(ts *testscript.TestScript, neg bool, args []string) {
	var v any
	err := json.Unmarshal([]byte(ts.ReadFile("stdout")), &v)
	if (err == nil) == neg {
		ts.Fatalf("stdout is valid JSON: %v; want %v", err == nil, !neg)
	}
}

func cmdJSONField(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: jsonfield PATH REGEXP")
	}
	var v any
	ts.Check(json.Unmarshal([]byte(ts.ReadFile("stdout")), &v))
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	for _, p := range strings.Split(args[0], ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				ts.Fatalf("%s: no field %q in %v", args[0], p, x)
			}
		case []any:
			if p == "#" {
				v = float64(len(x))
				continue
			}
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				ts.Fatalf("%s: no element %q in a list of %d", args[0], p, len(x))
			}
			v = x[i]
		default:
			ts.Fatalf("%s: %q is inside %v, which has no fields", args[0], p, x)
		}
	}
	got, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		ts.Check(err)
		got = string(b)
	}
	if re.MatchString(got) == neg {
		ts.Fatalf("%s is %q; want it to match %q: %v", args[0], got, args[1], !neg)
	}
}

func cmdSerialized(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: serialized FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	lines := strings.Fields(strings.ReplaceAll(ts.ReadFile(args[0]), " ", "="))
	if len(lines) != 2*n {
		ts.Fatalf("%s has %d lines, want %d:\n%s", args[0], len(lines), 2*n, ts.ReadFile(args[0]))
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		start, end := lines[i], lines[i+1]
		tok, ok := strings.CutPrefix(start, "start=")
		if !ok || end != "end="+tok {
			ts.Fatalf("%s: critical sections overlap at line %d:\n%s", args[0], i+1, ts.ReadFile(args[0]))
		}
		t, err := strconv.ParseUint(tok, 10, 64)
		ts.Check(err)
		if t <= last {
			ts.Fatalf("%s: token %d after token %d: tokens must grow", args[0], t, last)
		}
		last = t
	}
}

// sigchildMain is the PROGRAM of the signal tests. Usage:
//
//	sigchild [-ignore-term] DIR
//
// It writes DLOCK_KEY, DLOCK_TOKEN, DLOCK_MODE and its parent's pid to DIR/ready,
// appends the name of every signal it gets to DIR/signals, and exits with
// 128+N on SIGINT, SIGTERM, SIGHUP or SIGQUIT, as if the signal had killed
// it (with -ignore-term it only logs SIGTERM).
func sigchildMain() {
	args := os.Args[1:]
	ignoreTerm := len(args) > 0 && args[0] == "-ignore-term"
	if ignoreTerm {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sigchild [-ignore-term] DIR")
		os.Exit(2)
	}
	dir := args[0]
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)
	ready := fmt.Sprintf("key=%s\ntoken=%s\nmode=%s\nppid=%d\n", os.Getenv("DLOCK_KEY"), os.Getenv("DLOCK_TOKEN"), os.Getenv("DLOCK_MODE"), os.Getppid())
	must(os.WriteFile(filepath.Join(dir, "ready.tmp"), []byte(ready), 0o644))
	must(os.Rename(filepath.Join(dir, "ready.tmp"), filepath.Join(dir, "ready")))
	for s := range sigs {
		sig := s.(syscall.Signal)
		f, err := os.OpenFile(filepath.Join(dir, "signals"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		must(err)
		_, err = fmt.Fprintln(f, signalName(sig))
		must(err)
		must(f.Close())
		exitOnSignal(sig, ignoreTerm)
	}
}

// exitOnSignal exits with 128+sig for SIGINT, SIGHUP, SIGQUIT and, unless
// ignoreTerm, SIGTERM, as a shell's job would.
func exitOnSignal(sig syscall.Signal, ignoreTerm bool) {
	switch sig {
	case syscall.SIGTERM:
		if !ignoreTerm {
			os.Exit(128 + int(sig))
		}
	case syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		os.Exit(128 + int(sig))
	}
}

// tickMain is the grandchild of the process-group tests, the work that
// must not outlive the lock. Usage:
//
//	tick [-ignore-term] DIR
//
// It writes its pid and start time to DIR/pid, appends the name of every
// signal it gets to DIR/signals, and appends a line to DIR/ticks every
// 10 ms (a job that writes to shared storage). It exits with 128+N on
// SIGINT, SIGTERM, SIGHUP or SIGQUIT (with -ignore-term it only logs
// SIGTERM). It writes "ready" to stdout once DIR/pid exists.
func tickMain() {
	args := os.Args[1:]
	ignoreTerm := len(args) > 0 && args[0] == "-ignore-term"
	if ignoreTerm {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: tick [-ignore-term] DIR")
		os.Exit(2)
	}
	dir := args[0]
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwardedSignals()...)
	st, ok := procStat(os.Getpid())
	if !ok {
		fmt.Fprintln(os.Stderr, "tick: cannot read /proc/self/stat")
		os.Exit(2)
	}
	must(os.WriteFile(filepath.Join(dir, "pid.tmp"), []byte(fmt.Sprintf("%d %s\n", os.Getpid(), st.start)), 0o644))
	must(os.Rename(filepath.Join(dir, "pid.tmp"), filepath.Join(dir, "pid")))
	fmt.Println("ready")
	// The ticks are the work, not a synchronisation.
	tick := time.NewTicker(10 * time.Millisecond)
	for n := 0; ; n++ {
		select {
		case <-tick.C:
			appendLine(filepath.Join(dir, "ticks"), strconv.Itoa(n))
		case s := <-sigs:
			sig := s.(syscall.Signal)
			appendLine(filepath.Join(dir, "signals"), signalName(sig))
			exitOnSignal(sig, ignoreTerm)
		}
	}
}

// spawnMain is a PROGRAM that starts `tick` and exits at once, leaving it
// running in its process group. Usage:
//
//	spawn [-ignore-term] DIR
func spawnMain() {
	cmd := exec.Command("tick", os.Args[1:]...)
	out, err := cmd.StdoutPipe()
	must(err)
	cmd.Stderr = os.Stderr
	must(cmd.Start())
	// Exit once tick is ready, so that dlock sees the leftover for sure.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		fmt.Fprintln(os.Stderr, "spawn: tick did not start:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// criticalMain is the PROGRAM of the serialization test. Usage:
//
//	critical FILE
//
// It appends "start $DLOCK_TOKEN" to FILE, stays a moment, and appends
// "end $DLOCK_TOKEN". A marker file next to FILE catches an overlap even
// if the two writes happen to interleave cleanly: it exits 99 then.
func criticalMain() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: critical FILE")
		os.Exit(2)
	}
	file, token := os.Args[1], os.Getenv("DLOCK_TOKEN")
	marker, err := os.OpenFile(file+".inside", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "critical: another holder is inside:", err)
		os.Exit(99)
	}
	marker.Close()
	appendLine(file, "start "+token)
	// Stay inside long enough that a second holder, if the lock let one
	// in, would arrive while we are here. Correctness does not depend on it.
	time.Sleep(50 * time.Millisecond)
	appendLine(file, "end "+token)
	must(os.Remove(file + ".inside"))
}

func appendLine(file, line string) {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	w := bufio.NewWriter(f)
	_, _ = w.WriteString(line + "\n")
	must(w.Flush())
	must(f.Close())
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
