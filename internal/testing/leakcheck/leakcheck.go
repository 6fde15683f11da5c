// Package leakcheck finds goroutines that a package's tests left running:
// every client, lease and waiter must stop its goroutines when closed,
// released or cancelled.
//
// It does what go.uber.org/goleak's Find does for dlock's backend tests, with
// the standard library alone. The backend modules must require nothing but
// dlock and their server's client, since a library user's go.sum lists even
// the test-only requirements of the modules it imports; the modules that are
// not libraries (cmd/dlock, faultinject, bench) use goleak itself.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Wait is how long Find waits for goroutines that are about to exit (a
// connection's reader after Close, a timer's function) before it reports
// them.
const Wait = 5 * time.Second

// standard are functions whose goroutines the runtime or the testing package
// keeps for the life of the process.
var standard = []string{
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*M).startAlarm",
	"testing.(*M).Run",
	"testing.RunTests",
	"runtime/trace.Start",
	"runtime.ReadTrace",
}

// Find returns an error listing the stacks of the goroutines other than the
// caller's that are still running after Wait, leaving out the standard ones
// and those with a frame whose function name starts with one of ignore
// (e.g. "go.opencensus.io/stats/view.(*worker).start"). It returns nil when
// there are none.
func Find(ignore ...string) error {
	deadline := time.Now().Add(Wait)
	delay := time.Millisecond
	for {
		leaked := others(append(ignore, standard...))
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("found %d unexpected goroutines:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// Exit ends a TestMain: when code, m.Run's result, is 0, it checks with
// Find that the tests left no goroutine running and makes the exit code 1
// if they did; then it exits with the code.
func Exit(code int, ignore ...string) {
	if code == 0 {
		if err := Find(ignore...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// others returns the stacks of every goroutine but the caller's and those
// with a frame in ignore.
func others(ignore []string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's own
		if !hasFrame(s, ignore) {
			out = append(out, s)
		}
	}
	return out
}

// hasFrame says whether one of the stack's function lines (those not
// indented with a tab: file:line lines are) starts with one of prefixes.
func hasFrame(stack string, prefixes []string) bool {
	for _, line := range strings.Split(stack, "\n")[1:] {
		if strings.HasPrefix(line, "\t") {
			continue
		}
		line = strings.TrimPrefix(line, "created by ")
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return true
			}
		}
	}
	return false
}
