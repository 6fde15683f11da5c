// Command racerecheck reads the output of a failed `go test -race` run of
// many packages and says whether every failure is a test failed only by
// go-zookeeper's known race (package zkrace): each failed test's only
// message is the race detector's, and each race report in its package is
// that race. If so, it prints the tests to run again, a package and a -run
// pattern a line (tab-separated), and exits 0; test.sh runs them again, and
// they must pass. Any other failure (an assertion, a panic, a build error,
// another race) exits 1, naming it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/dlockdev/dlock/internal/testing/zkrace"
)

func main() {
	out, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "racerecheck:", err)
		os.Exit(1)
	}
	reruns, err := recheck(string(out))
	if err != nil {
		fmt.Fprintln(os.Stderr, "racerecheck:", err)
		os.Exit(1)
	}
	for _, r := range reruns {
		fmt.Printf("%s\t%s\n", r.pkg, r.run)
	}
}

// rerun is the failed tests of one package, to run again.
type rerun struct{ pkg, run string }

var (
	summary  = regexp.MustCompile(`^(ok  |FAIL|\?   )\t(\S+)`)
	failLine = regexp.MustCompile(`^(\s*)--- FAIL: (\S+) \(`)
	raceMsg  = regexp.MustCompile(`^\s+testing\.go:\d+: race detected during execution of test$`)
)

// recheck returns the tests to run again, or why the run's failures are
// not all go-zookeeper's race.
func recheck(out string) ([]rerun, error) {
	var reruns []rerun
	var block []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m := summary.FindStringSubmatch(line)
		if m == nil {
			block = append(block, line)
			continue
		}
		if m[1] == "FAIL" {
			tests, err := failedByRaceOnly(block)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m[2], err)
			}
			reruns = append(reruns, rerun{m[2], "^(" + strings.Join(tests, "|") + ")$"})
		}
		block = nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(reruns) == 0 {
		return nil, fmt.Errorf("no failed package to recheck (a failure outside the tests?)")
	}
	return reruns, nil
}

// failedByRaceOnly returns the top-level tests that failed in one
// package's output, provided that each failed only by the race detector
// and every race reported is go-zookeeper's.
func failedByRaceOnly(block []string) ([]string, error) {
	text := strings.Join(block, "\n")
	if others := zkrace.Others(text); len(others) > 0 {
		return nil, fmt.Errorf("a data race other than go-zookeeper's:\n%s", others[0])
	}
	var tests []string
	inReport, inFailed := false, false
	for _, line := range block {
		switch {
		case line == "==================":
			inReport = !inReport
			continue
		case inReport:
			continue
		}
		if m := failLine.FindStringSubmatch(line); m != nil {
			inFailed = true
			if m[1] == "" {
				tests = append(tests, regexp.QuoteMeta(m[2]))
			}
			continue
		}
		switch {
		case line == "" || line == "FAIL" || strings.HasPrefix(strings.TrimSpace(line), "=== "):
		case inFailed && raceMsg.MatchString(line):
		default:
			return nil, fmt.Errorf("a failure beyond go-zookeeper's race: %q", line)
		}
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("failed without a failed test")
	}
	return tests, nil
}
