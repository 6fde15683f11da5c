package main

import (
	"fmt"
	"time"
)

// notifyFloor is the notification floor of lib's backend in this run.
func (res *results) notifyFloor(backend string) time.Duration {
	return res.RTT[backend+"-notify"].P50
}

// electionLatency is "p50 / p99", or why there is none.
func electionLatency(r electionRun) string {
	switch {
	case r.N > 0:
		return fmt.Sprintf("%s / %s", fmtDur(r.P50), fmtDur(r.P99))
	case r.Missing != "":
		return "not available"
	}
	return "–"
}

// electionRatios is the p50 in RTTs and ÷ the notification floor.
func electionRatios(res *results, backend string, r electionRun) string {
	if r.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", inRTT(r.P50, res.RTT[backend].P50), inRTT(r.P50, res.notifyFloor(backend)))
}

func electionReq(r electionRun) string {
	if r.Events == 0 {
		return "–"
	}
	return fmtFloat(r.reqPerEvent())
}

func electionErrText(r electionRun) string {
	var parts []string
	if r.Missing != "" {
		parts = append(parts, r.Missing)
	}
	return errParts(parts, r.Errors, r.Stuck, "clients still running 15 s after the run (closed)", r.FirstErr)
}

// electionBounds are the run's bounds, from its first library that ran,
// for the text.
func electionBounds(res *results) (b electionResult) {
	for _, r := range res.Election {
		if r.Missing == "" {
			return r
		}
	}
	return b
}

// bound is "up to N … after W not measured, within L".
func bound(r electionRun, what string) string {
	return fmt.Sprintf("up to %d %s after %d not measured, within %s", r.Max, what, r.Warm, fmtDur(r.Limit))
}

// electionReport writes the election section: election hand-over and
// Observe latency on dlock's backends beside etcd's concurrency.Election.
func electionReport(m *md, res *results) {
	m.p("## Leader election (%s)", res.Variant.label())
	m.p("")
	if notMeasured(m, len(res.Election), "election") {
		return
	}
	b := electionBounds(res)
	m.p("Measured by `%s`, in the same run and on the same servers as every other table here; the", res.Command)
	m.p("section alone: `cd bench && ./run.sh -only election` (add `-quick` for short runs: about 10 s of")
	m.p("measuring). dlock's `Client.Election` on each backend (`Campaign`, `Leadership.Resign` and `Proclaim`,")
	m.p("`Observe`), beside")
	m.p("etcd's `concurrency.Election` (`go.etcd.io/etcd/client/v3` %s: `Campaign`, `Resign`, `Proclaim`,", res.Versions["go.etcd.io/etcd/client/v3"])
	m.p("`Observe`) on the same etcd server. Every candidate and observer is a client of its own (dlock: its own")
	m.p("`dlock.Client`; etcd: its own client and session, TTL 10 s); each run has fresh clients and a fresh key.")
	m.p("Times are taken in-process with one monotonic clock.")
	m.p("")
	m.p("- **Hand-over**: %d candidates take turns: `Campaign` (with a value unique to the candidate and the", b.Candidates)
	m.p("  term), lead for %s (a sleep standing for the leader's work), `Resign`, then `Campaign` again at the", fmtDur(b.Hold))
	m.p("  end of the line. Measured from the leader's `Resign` call starting to the next candidate's `Campaign`")
	m.p("  returning. With three candidates the one elected has been waiting for a whole term, so it is queued")
	m.p("  on the server when the leader resigns. This run: %s.", bound(b.Handover, "hand-overs"))
	m.p("- **Observe, new leader**: the same, with a fourth client observing the election (`Observe`); each")
	m.p("  leader waits until the observer has received its value before it leads on, so that changes come one")
	m.p("  at a time and each finds the observer idle. Measured from the `Resign` call starting to the observer's")
	m.p("  goroutine receiving the successor's value from `Observe`'s channel (dlock may first send \"no leader\"")
	m.p("  or nothing between: the figure is to the successor). This run: %s.", bound(b.ObservedLeader, "changes"))
	m.p("- **Observe, Proclaim**: one leader and one observer; the leader `Proclaim`s a new value each time the")
	m.p("  observer has received the one before. Measured from the `Proclaim` call starting to the observer")
	m.p("  receiving the new value; *call* is the `Proclaim` call alone, start to return. This run: %s.", bound(b.Proclaim, "`Proclaim`s"))
	m.p("- **In RTTs (÷ notify)**: the p50 divided by the backend's round-trip p50 of this run, and in")
	m.p("  parentheses by its notification floor (section Round-trip floor: a write on one client to another")
	m.p("  client's receipt of the server's notice), the least a change learnt from a notice can take.")
	m.p("- **Requests per hand-over / per change**: the server's requests between two counter snapshots, divided")
	m.p("  by the hand-overs (or `Proclaim`s) between them. The snapshots are read while a leader leads and the")
	m.p("  others wait, so every hand-over's requests (the resign, the grant and its notice, the resigner's new")
	m.p("  campaign) fall wholly inside or outside; keep-alives fall where they fall. Counted as in the contended")
	m.p("  tables (Redis: requests sent by the clients, a script call once; ZooKeeper: `zk_packets_received`,")
	m.p("  the sessions' pings included; etcd: gRPC messages received, lease keep-alives included). The observed")
	m.p("  runs count the observer's requests too (dlock's `Observe` reads the state after each notice).")
	m.p("- **Overlaps**: a candidate's `Campaign` returned while another still led, as the clients saw it (a")
	m.p("  term counts from `Campaign` returning to `Resign` being called, which lies within the server's grant).")
	m.p("  Anything but 0 is a bug.")
	m.p("- **not available**: the backend does not do it in the code measured (dlock's `Observe` closes its")
	m.p("  channel at once where the driver has no `driver.Observer`; `Proclaim` fails with")
	m.p("  `errors.ErrUnsupported` where its grant has no `driver.Publisher`).")
	m.p("- **etcd Election's tail**: its `Campaign` waits for the deletion of the key just before its own with a")
	m.p("  watch from the revision of the `Get` that found that key (`WithRev`); the server serves such a watch")
	m.p("  as one to catch up (\"unsynced\") until its next resync, every 100 ms (`watchResyncPeriod` in")
	m.p("  `go.etcd.io/etcd/server/v3/storage/mvcc`), so a deletion that comes before that resync reaches the")
	m.p("  candidate only at it. etcd's `Mutex` waits the same way (see the contended tables).")
	m.p("")

	var rows [][]string
	for _, r := range res.Election {
		if r.Missing != "" {
			rows = append(rows, []string{r.Lib, r.Missing, "", "", "", "", "", "", "", "", ""})
			continue
		}
		call := "–"
		if r.Proclaim.CallP50 > 0 {
			call = fmt.Sprintf("%s / %s", fmtDur(r.Proclaim.CallP50), fmtDur(r.Proclaim.CallP99))
		}
		rows = append(rows, []string{r.Lib,
			electionLatency(r.Handover), electionRatios(res, r.Backend, r.Handover), electionReq(r.Handover),
			electionLatency(r.ObservedLeader), electionRatios(res, r.Backend, r.ObservedLeader), electionReq(r.ObservedLeader),
			electionLatency(r.Proclaim), electionRatios(res, r.Backend, r.Proclaim), call,
			fmt.Sprint(r.Handover.Overlaps + r.ObservedLeader.Overlaps)})
	}
	m.table([]string{"library", "hand-over p50 / p99", "p50 in RTTs (÷ notify)", "requests per hand-over",
		"Observe, new leader: p50 / p99", "p50 in RTTs (÷ notify)", "requests per hand-over, observed",
		"Observe, Proclaim: p50 / p99", "p50 in RTTs (÷ notify)", "Proclaim call p50 / p99", "overlaps"}, rows)

	m.p("### Every run")
	m.p("")
	m.p("Measured: latencies recorded; events: hand-overs or `Proclaim`s between the counter snapshots, over the")
	m.p("window between them. Server CPU as in the contended tables.")
	m.p("")
	rows = nil
	for _, r := range res.Election {
		if r.Missing != "" {
			continue
		}
		for _, run := range []struct {
			name string
			r    electionRun
		}{{"hand-over", r.Handover}, {"Observe, new leader", r.ObservedLeader}, {"Observe, Proclaim", r.Proclaim}} {
			x := run.r
			req := electionReq(x)
			if r.Backend == "redis" && x.Events > 0 {
				req = fmt.Sprintf("%s (%s scripts; %s cmds)", req, fmtFloat(perGrant(x.Delta.Scripts, x.Events)), fmtFloat(perGrant(x.Delta.Commands, x.Events)))
			}
			cpu := "–"
			if x.Events > 0 {
				cpu = fmt.Sprintf("%.0f", x.Delta.CPU*1e6/float64(x.Events))
			}
			window := "–"
			if x.Window > 0 {
				window = fmtDur(x.Window)
			}
			measured, events := fmt.Sprint(x.N), fmt.Sprint(x.Events)
			if x.Missing != "" && x.N == 0 {
				measured, events = "not available", "–"
			}
			rows = append(rows, []string{r.Lib, run.name, measured, events, window,
				fmtDur(x.P50), fmtDur(x.P99), inRTT(x.P50, res.RTT[r.Backend].P50), inRTT(x.P50, res.notifyFloor(r.Backend)),
				req, cpu, fmt.Sprint(x.Overlaps), electionErrText(x)})
		}
	}
	m.table([]string{"library", "run", "measured", "events", "window", "p50", "p99", "p50 in RTTs", "p50 ÷ notify floor",
		"requests per event (Redis: script calls; all commands incl. inside scripts)", "server CPU µs/event", "overlaps", "errors, not available"}, rows)
}
