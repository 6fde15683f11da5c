package main

import (
	"fmt"
	"strings"
	"time"
)

func (res *results) mode(lib, workload string, n int) (modeResult, bool) {
	for _, r := range res.Modes {
		if r.Lib == lib && r.Workload == workload && r.N == n {
			return r, true
		}
	}
	return modeResult{}, false
}

func workloadLabel(r modeResult) string {
	switch r.Workload {
	case "semaphore":
		return fmt.Sprintf("semaphore, limit %d", r.Limit)
	case "rwmutex":
		return fmt.Sprintf("RWMutex, %.0f%% readers", 100*r.ReadP)
	}
	return "lock (reference)"
}

// occupancy is the utilization of a lock or semaphore, or what a writer
// held of an RWMutex's time.
func occupancy(r modeResult) string {
	if r.Grants == 0 {
		return "–"
	}
	if r.Workload == "rwmutex" {
		return fmt.Sprintf("writer %.0f%%", 100*r.WriterHeld)
	}
	return fmt.Sprintf("%.0f%%", 100*r.Utilization)
}

func modeErrText(r modeResult) string {
	return errParts(nil, r.Errors, r.Stuck != 0, "contenders still running 15 s after the window (clients closed)", r.FirstErr)
}

func modeWindow(res *results) (window, hold time.Duration, seed uint64) {
	for _, r := range res.Modes {
		window, hold, seed = max(window, r.Window), r.Hold, r.Seed
	}
	return window.Round(10 * time.Millisecond), hold, seed
}

// modesReport writes the modes section: the semaphore and the
// RWMutex, with dlock's lock beside them.
func modesReport(m *md, res *results) {
	m.p("## Semaphore and read-write lock (%s)", res.Variant.label())
	m.p("")
	if notMeasured(m, len(res.Modes), "modes") {
		return
	}
	window, hold, seed := modeWindow(res)
	m.p("Measured by `%s`, in the same run and on the same servers as every other table here; the", res.Command)
	m.p("section alone: `cd bench && ./run.sh -only modes` (or `-only semaphore`, `-only rwmutex`; add `-quick` for")
	m.p("short windows). No Go peer offers a fair, crash-safe semaphore on these servers, so the reference is")
	m.p("dlock's own lock, run by the same harness with the same hold time and contenders: its row compares with")
	m.p("the others one for one (its hold-free figures are in the contended tables above).")
	m.p("")
	m.p("Each contender is its own `dlock.Client`; each run has a fresh key and fresh clients. A contender")
	m.p("loops: acquire (`Lock`, `Semaphore(key, 4).Acquire`, or for the RWMutex `RLock` with probability 0.9")
	m.p("and `Lock` otherwise, drawn from a PRNG per contender seeded with %d and its number), hold the lease", seed)
	m.p("for %s (a sleep standing for the work a permit guards), `Unlock`, and again at once. The window", fmtDur(hold))
	m.p("is %s after a warm-up, cut short after %s grants; requests per grant use the counters of the", fmtDur(window), fmtCount(modeMaxGrants))
	m.p("contended tables (Redis: requests counted by the clients, a script call once; ZooKeeper:")
	m.p("`zk_packets_received`; etcd: gRPC messages received).")
	m.p("")
	m.p("- **Held**: a lease counts as held from its acquire call returning to its `Unlock` being called. That")
	m.p("  interval lies inside the server's grant (granted before the reply, released after the call), so a")
	m.p("  correct backend never shows more holders than it admits. *Mean held* is the time-averaged number of")
	m.p("  leases held over the window, *max* the most at once. **Utilization** is mean held ÷ the limit (1 for")
	m.p("  the lock, 4 for the semaphore): a semaphore that hands out one permit at a time shows at most 25%%.")
	m.p("  For the RWMutex the mean held is the mean number of concurrent holders, and *writer* is the fraction")
	m.p("  of the window during which a writer held.")
	m.p("- **Hand-off**: from the start of the release (`Unlock` called) that let a waiting contender in, to")
	m.p("  that contender's acquire call returning, for grants to contenders that were already waiting when")
	m.p("  that release began; one monotonic clock in-process. The release that let it in is, for the lock and")
	m.p("  an RWMutex writer, the last release of any lease that began after it called `Lock` (every lease")
	m.p("  granted before it had to go); for an RWMutex reader, the last release of a writer that began after")
	m.p("  it called `RLock` (only writers block readers); for a semaphore, releases and waiters are paired first")
	m.p("  come, first served: a release that began while more contenders held or waited for a permit than")
	m.p("  there are permits is paired with the first later grant of a contender that was already waiting when")
	m.p("  it began, and not paired again. A grant with no such release (a free permit, a reader with no writer")
	m.p("  ahead) is not a hand-off: with 2 contenders and 4 permits there are none. In RTTs: divided by the")
	m.p("  backend's round-trip p50 of this run (section Round-trip floor).")
	m.p("- **Violations**: leases that began while the leases held (as above) did not admit them — more than")
	m.p("  the limit, or a writer beside anybody. Any other figure than 0 is a bug.")
	m.p("")

	m.p("### At 32 contenders")
	m.p("")
	var rows [][]string
	for _, l := range res.Libraries {
		if !l.IsDlock {
			continue
		}
		if l.Missing != "" {
			rows = append(rows, []string{l.Name, l.Missing, "", "", "", "", "", "", "", ""})
			continue
		}
		lock, _ := res.mode(l.Name, "lock", 32)
		for _, w := range modeWorkloads {
			r, ok := res.mode(l.Name, w.Name, 32)
			if !ok {
				continue
			}
			ratio := "–"
			if w.Name != "lock" && lock.GrantsPerS > 0 {
				ratio = fmt.Sprintf("%.2f×", r.GrantsPerS/lock.GrantsPerS)
			}
			var req []string
			for _, n := range modeContenders {
				rn, _ := res.mode(l.Name, w.Name, n)
				req = append(req, fmtFloat(perGrant(rn.Delta.Requests, rn.Grants)))
			}
			rows = append(rows, []string{l.Name, workloadLabel(r), fmtFloat(r.GrantsPerS), ratio,
				fmt.Sprintf("%s / %d", fmtFloat(r.MeanHolders), r.MaxHolders), occupancy(r),
				fmt.Sprintf("%s / %s", fmtDur(r.HandoffP50), fmtDur(r.HandoffP99)), inRTT(r.HandoffP50, res.rtt(l.Name)),
				strings.Join(req, " / "), fmt.Sprint(r.Violations)})
		}
	}
	m.table([]string{"backend", "workload", "grants/s", "÷ lock", "held: mean / max", "utilization (RWMutex: writer holds)",
		"hand-off p50 / p99", "p50 in RTTs", "requests/grant at " + joinInts(modeContenders, " / "), "violations"}, rows)

	m.p("### Every run")
	m.p("")
	m.p("Reads/writes: the grants of each mode. For the RWMutex the hand-off columns split into readers' and")
	m.p("writers'. Server CPU as in the contended tables.")
	m.p("")
	rows = nil
	for _, l := range res.Libraries {
		for _, w := range modeWorkloads {
			for _, n := range modeContenders {
				r, ok := res.mode(l.Name, w.Name, n)
				if !ok {
					continue
				}
				req, cpu := serverWorkCells(l.Backend, r.Delta, r.Grants)
				mix := "–"
				rw := "–"
				if r.Workload == "rwmutex" {
					mix = fmt.Sprintf("%d / %d", r.SharedGrants, r.ExclGrants)
					rw = fmt.Sprintf("%s / %s (%d); %s / %s (%d)", fmtDur(r.ReadHandoffP50), fmtDur(r.ReadHandoffP99), r.ReadHandoffs,
						fmtDur(r.WriteHandoffP50), fmtDur(r.WriteHandoffP99), r.WriteHandoffs)
				}
				rows = append(rows, []string{r.Lib, workloadLabel(r), fmt.Sprint(r.N), fmtFloat(r.GrantsPerS), mix,
					fmt.Sprintf("%s / %d", fmtFloat(r.MeanHolders), r.MaxHolders), occupancy(r),
					fmtDur(r.HandoffP50), fmtDur(r.HandoffP99), fmt.Sprint(r.Handoffs), inRTT(r.HandoffP50, res.rtt(r.Lib)), rw,
					req, cpu, fmt.Sprint(r.Violations), modeErrText(r)})
			}
		}
	}
	m.table([]string{"library", "workload", "contenders", "grants/s", "reads / writes", "held: mean / max", "utilization (RWMutex: writer holds)",
		"hand-off p50", "hand-off p99", "hand-offs", "p50 in RTTs", "RWMutex hand-off p50 / p99 (count): readers; writers",
		"requests/grant (Redis: script calls; all commands incl. inside scripts)", "server CPU µs/grant", "violations", "errors"}, rows)
}

func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, sep)
}

// fmtCount prints n with thousands separators.
func fmtCount(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
