package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// ---- the targets table: every target of the performance issue ----

// backends are the servers in the order of the tables.
var backends = []string{"redis", "zookeeper", "etcd"}

// dlockOn names dlock's library on each backend.
var dlockOn = map[string]string{"redis": "dlock (redis)", "zookeeper": "dlock (zookeeper)", "etcd": "dlock (etcd)"}

// floorGap is how far above the floor measured in the same run a figure
// may be and still count as done where the target itself is below what
// the server allows.
const floorGap = 1.3

// peersOn are the peer libraries of a backend that ran.
func (res *results) peersOn(backend string) []string {
	var out []string
	for _, l := range res.Libraries {
		if l.Backend == backend && !l.IsDlock && l.Missing == "" {
			out = append(out, l.Name)
		}
	}
	return out
}

// ran reports whether a library was part of the run and could run.
func (res *results) ran(name string) bool {
	l := res.lib(name)
	return l.Name != "" && l.Missing == ""
}

// uncontendedSpread is a library's uncontended cycle p50 over the rounds.
func (res *results) uncontendedSpread(lib string) spread {
	var ds []time.Duration
	for _, u := range res.Uncontended {
		if u.Lib == lib && u.Err == "" {
			ds = append(ds, u.P50)
		}
	}
	return durSpread(ds)
}

// contendedSpread is f of a library's contended runs over the rounds.
func (res *results) contendedSpread(lib string, n int, think bool, f func(contendedResult) float64) spread {
	var xs []float64
	for _, r := range res.Contended {
		if r.Lib == lib && r.N == n && r.Think == think {
			xs = append(xs, f(r))
		}
	}
	return spreadOf(xs)
}

func handoffP50(r contendedResult) float64 {
	if r.Handoffs == 0 {
		return math.NaN()
	}
	return float64(r.HandoffP50)
}

func handoffTail(r contendedResult) float64 {
	if r.Handoffs == 0 || r.HandoffP50 <= 0 {
		return math.NaN()
	}
	return float64(r.HandoffP99) / float64(r.HandoffP50)
}

func grantsPerS(r contendedResult) float64 {
	if r.Grants == 0 {
		return math.NaN()
	}
	return r.GrantsPerS
}

// best is the peer with the least (or, with most, the greatest) median of
// fig, skipping peers with no figure.
func best(peers []string, fig func(string) spread, most bool) (string, spread) {
	var name string
	b := spread{Med: math.NaN()}
	for _, p := range peers {
		s := fig(p)
		if !s.ok() {
			continue
		}
		if !b.ok() || (most && s.Med > b.Med) || (!most && s.Med < b.Med) {
			name, b = p, s
		}
	}
	return name, b
}

func peerCell(name string, s spread, f func(float64) string) string {
	if name == "" {
		return "–"
	}
	return fmt.Sprintf("%s: %s", name, s.format(f))
}

func ratioCell(a, b spread) string {
	if !a.ok() || !b.ok() || b.Med == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.Med/b.Med)
}

func one(x float64) spread { return spreadOf([]float64{x}) }

// verdictOf says whether a target was met, or, where it was not, whether
// the figure is within floorGap of the floor measured in the same run (for
// a rate, where higher is better, the ceiling the floor sets; NaN: none).
func verdictOf(ok bool, measured bool, fig, floor float64, lowerIsBetter bool) string {
	switch {
	case !measured:
		return "not measured"
	case ok:
		return "**met**"
	case !math.IsNaN(floor) && floor > 0 && lowerIsBetter && fig <= floorGap*floor:
		return fmt.Sprintf("**missed**, within %g× of the floor", floorGap)
	case !math.IsNaN(floor) && floor > 0 && !lowerIsBetter && fig >= floor/floorGap:
		return fmt.Sprintf("**missed**, within %g× of the ceiling", floorGap)
	}
	return "**missed**"
}

func fmtRate(x float64) string   { return fmtFloat(x) + "/s" }
func fmtAllocs(x float64) string { return fmt.Sprintf("%.0f", x) }
func fmtX(x float64) string      { return fmt.Sprintf("%.1f×", x) }

// cycleFloor is the least time an uncontended cycle can take on a backend:
// the round trips of the requests its protocol must make, each of the kind
// measured in the same run (writes are durable on durable servers). Redis
// and etcd: two writes (take, release); ZooKeeper: two writes and a read
// (create the node, list the children, delete the node).
func (res *results) cycleFloor(backend string) (time.Duration, string) {
	w, r := res.RTT[backend+"-write"].P50, res.RTT[backend].P50
	if w <= 0 {
		return 0, "–"
	}
	if backend == "zookeeper" {
		if r <= 0 {
			return 0, "–"
		}
		return 2*w + r, fmt.Sprintf("2 writes + 1 read = 2 × %s + %s = %s", fmtDur(w), fmtDur(r), fmtDur(2*w+r))
	}
	return 2 * w, fmt.Sprintf("2 writes = 2 × %s = %s", fmtDur(w), fmtDur(2*w))
}

// targetsTable is one row per target of the performance issue and backend:
// dlock's figure, the best peer's, the floor measured in the same run where
// the target names one, and whether it was met.
func targetsTable(res *results) [][]string {
	var rows [][]string
	head := func(b string) (string, bool) {
		name := dlockOn[b]
		return name, res.ran(name)
	}
	// Uncontended cycle p50.
	for _, b := range backends {
		name, ok := head(b)
		d := res.uncontendedSpread(name)
		pn, ps := best(res.peersOn(b), res.uncontendedSpread, false)
		floor, floorText := res.cycleFloor(b)
		rows = append(rows, []string{"uncontended cycle p50", b, orNA(ok, d.format(fmtDurF)), peerCell(pn, ps, fmtDurF), floorText,
			"≤ fastest peer", ratioCell(d, ps), verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, float64(floor), true)})
	}
	// Many distinct keys on one client.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread {
			for _, k := range res.Keys {
				if k.Lib == lib && k.Elapsed > 0 {
					return one(k.LocksPerS())
				}
			}
			return spread{Med: math.NaN()}
		}
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, true)
		rows = append(rows, []string{fmt.Sprintf("%s distinct keys locked and released, %d goroutines on one client: locks/s", fmtCount(res.keysCount()), keysWorkers), b,
			orNA(ok, d.format(fmtRate)), peerCell(pn, ps, fmtRate), "–", "≥ fastest peer", ratioCell(d, ps),
			verdictOf(d.ok() && ps.ok() && d.Med >= ps.Med, ok && d.ok() && ps.ok(), d.Med, math.NaN(), false)})
	}
	// Client allocations per uncontended cycle.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread {
			for _, c := range res.ClientCost {
				if c.Lib == lib && c.Err == "" && c.N > 0 {
					return one(float64(c.AllocsPerOp))
				}
			}
			return spread{Med: math.NaN()}
		}
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		rows = append(rows, []string{"client allocations per uncontended cycle", b, orNA(ok, d.format(fmtAllocs)), peerCell(pn, ps, fmtAllocs), "–",
			"≤ best peer", ratioCell(d, ps), verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, math.NaN(), true)})
	}
	// Renewal requests holding 1,000 locks.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread {
			for _, r := range res.Renewal {
				if r.Lib == lib && r.Err == "" && r.NA == "" && r.Window > 0 {
					return one(r.PerInterval())
				}
			}
			return spread{Med: math.NaN()}
		}
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		held := renewalLocks
		for _, r := range res.Renewal {
			if r.Lib == name {
				held = r.Locks
			}
		}
		rows = append(rows, []string{fmt.Sprintf("renewal requests per client per renewal interval (TTL/3), holding %s locks", fmtCount(held)), b,
			orNA(ok, d.format(fmtFloat)), peerCell(pn, ps, fmtFloat), "1 (one request renews them all)", "≤ 10", ratioCell(d, ps),
			verdictOf(d.ok() && d.Med <= 10, ok && d.ok(), d.Med, math.NaN(), true)})
	}
	// Server memory per held lock.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread {
			for _, m := range res.Memory {
				if m.Lib == lib && m.Missing == "" && m.Locked > 0 {
					return one(m.heldBytesPerLock())
				}
			}
			return spread{Med: math.NaN()}
		}
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		rows = append(rows, []string{"server memory per held lock", b, orNA(ok, d.format(fmtBytes)), peerCell(pn, ps, fmtBytes), "–",
			"≤ best peer", ratioCell(d, ps), verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, math.NaN(), true)})
	}
	// Hand-off p50, 8 contenders.
	const handoffN = 8
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread { return res.contendedSpread(lib, handoffN, false, handoffP50) }
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		rtt, notify := res.RTT[b].P50, res.RTT[b+"-notify"].P50
		target := 3 * rtt
		rows = append(rows, []string{fmt.Sprintf("hand-off p50 to a waiting contender (%d contenders)", handoffN), b,
			orNA(ok, d.format(fmtDurF)+" = "+inRTT(time.Duration(d.Med), rtt)+" RTT"), peerCell(pn, ps, fmtDurF),
			"one notification: " + fmtDur(notify), fmt.Sprintf("≤ 3 RTT = 3 × %s = %s", fmtDur(rtt), fmtDur(target)), ratioCell(d, ps),
			verdictOf(d.ok() && rtt > 0 && d.Med <= float64(target), ok && d.ok() && rtt > 0, d.Med, float64(notify), true)})
	}
	// Hand-off p99 / p50.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread { return res.contendedSpread(lib, handoffN, false, handoffTail) }
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		p99 := res.contendedSpread(name, handoffN, false, func(r contendedResult) float64 {
			if r.Handoffs == 0 {
				return math.NaN()
			}
			return float64(r.HandoffP99)
		})
		rows = append(rows, []string{fmt.Sprintf("hand-off p99 ÷ p50 (%d contenders)", handoffN), b,
			orNA(ok, d.format(fmtX)+"; p99 "+p99.format(fmtDurF)), peerCell(pn, ps, fmtX), "–", "≤ 10×", ratioCell(d, ps),
			verdictOf(d.ok() && d.Med <= 10, ok && d.ok(), d.Med, math.NaN(), true)})
	}
	// Grants/s at 32 contenders, strictly FIFO.
	const grantsN = 32
	grantsPeer := map[string]struct {
		peer   string
		factor float64
	}{"redis": {"bsm/redislock", 1}, "zookeeper": {"go-zookeeper Lock", 1.2}, "etcd": {"etcd Mutex", 3}}
	for _, b := range backends {
		name, ok := head(b)
		gp := grantsPeer[b]
		d := res.contendedSpread(name, grantsN, false, grantsPerS)
		ps := res.contendedSpread(gp.peer, grantsN, false, grantsPerS)
		fifo, runs := true, 0
		for _, r := range res.Contended {
			if r.Lib == name && r.N == grantsN && !r.Think {
				runs++
				fifo = fifo && fifoConsistent(r)
			}
		}
		notify := res.RTT[b+"-notify"].P50
		ceiling, ceilingRate := "–", math.NaN()
		if notify > 0 {
			ceilingRate = 1 / notify.Seconds()
			ceiling = fmt.Sprintf("≤ %s (1 ÷ one notification)", fmtRate(1/notify.Seconds()))
		}
		fifoText := "FIFO in every round"
		if !fifo {
			fifoText = "**not FIFO** in some round (see the checks below)"
		}
		rows = append(rows, []string{fmt.Sprintf("grants/s at %d contenders, strictly FIFO", grantsN), b,
			orNA(ok, d.format(fmtRate)+"; "+fifoText), peerCell(gp.peer, ps, fmtRate), ceiling,
			fmt.Sprintf("≥ %g× %s", gp.factor, gp.peer), ratioCell(d, ps),
			verdictOf(d.ok() && ps.ok() && fifo && d.Med >= gp.factor*ps.Med, ok && d.ok() && ps.ok() && runs > 0, d.Med, ceilingRate, false)})
	}
	// Many waiters on one key, at load.
	for _, b := range backends {
		name, ok := head(b)
		var q queueResult
		found := false
		for _, x := range res.Queue {
			if x.Lib == name {
				q, found = x, true
			}
		}
		var peerParts []string
		for _, p := range res.peersOn(b) {
			for _, x := range res.Queue {
				if x.Lib == p {
					peerParts = append(peerParts, fmt.Sprintf("%s: %s of %s, %s", p, fmtCount(x.Drained), fmtCount(x.Waiters), fmtRate(x.GrantsPerS())))
				}
			}
		}
		waiters := 10000
		if found {
			waiters = q.Waiters
		}
		fig, target := "–", "drained at load 3"
		drained := found && q.Waiters > 0 && q.Drained == q.Waiters
		met := drained && q.Load.Mean >= 2.5
		if b == "redis" {
			target += ", ≥ 1,000 grants/s"
			met = met && q.GrantsPerS() >= 1000
		}
		if found {
			state := "drained"
			if !drained {
				state = fmt.Sprintf("**stalled**: %s of %s, the last grant %s after the release", fmtCount(q.Drained), fmtCount(q.Waiters), fmtDur(q.LastGrant))
			}
			fig = fmt.Sprintf("%s waiters %s, %s; load: %s", fmtCount(q.Waiters), state, fmtRate(q.GrantsPerS()), q.Load)
		}
		rows = append(rows, []string{fmt.Sprintf("%s waiters on one key", fmtCount(waiters)), b, orNA(ok, fig), orDash(strings.Join(peerParts, "; ")),
			"–", target, "–", verdictOf(met, ok && found, 0, math.NaN(), false)})
	}
	// Semaphore, limit 3, 12 clients, 2 ms holds.
	for _, b := range backends {
		name, ok := head(b)
		var xs []float64
		for _, r := range res.Permits {
			if r.Lib == name && r.Grants > 0 {
				xs = append(xs, r.MeanHolders)
			}
		}
		d := spreadOf(xs)
		rows = append(rows, []string{fmt.Sprintf("semaphore, limit %d, %d clients, %s holds: time-weighted mean holders", permitsWorkload.Limit, permitsClients, fmtDur(permitsHold)), b,
			orNA(ok, d.format(fmtFloat)), "no Go peer offers a semaphore on this server", fmt.Sprintf("%d (the limit)", permitsWorkload.Limit), "≥ 2.4", "–",
			verdictOf(d.ok() && d.Med >= 2.4, ok && d.ok(), d.Med, math.NaN(), false)})
	}
	return rows
}

func orNA(ok bool, s string) string {
	if !ok {
		return "not available"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// keysCount is the number of keys the keys section set out to do.
func (res *results) keysCount() int {
	n := 0
	for _, k := range res.Keys {
		n = max(n, k.Keys)
	}
	if n == 0 {
		return keysSize(false)
	}
	return n
}

// targetsReport writes the targets table.
func targetsReport(m *md, res *results) {
	m.p("## Targets (%s)", res.Variant.label())
	m.p("")
	m.p("Each target of the performance issue, per backend, measured in this run beside the peers on the same")
	m.p("servers. Figures measured in several rounds show the median and the range (each round runs every library")
	m.p("in turn). *Best peer* is the peer with the best median on the same server. *Floor* is the least the")
	m.p("server allows, measured in the same run (the round-trip floor below): where a target is below it, a")
	m.p("figure within %g× of the floor counts as done (\"missed, within %g× of the floor\"; for grants/s, the", floorGap, floorGap)
	m.p("ceiling of one notification per hand-off). RTT is the round trip of the smallest request (Redis PING,")
	m.p("ZooKeeper exists, etcd linearizable Get); a write's round trip includes the server's fsync on durable")
	m.p("servers.")
	m.p("")
	m.table([]string{"target", "backend", "dlock", "best peer", "floor (same run)", "target", "dlock ÷ best peer", "verdict"}, targetsTable(res))
}
