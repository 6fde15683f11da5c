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

// floorSpread is backend's floor over the rounds of fs: the median of its
// rounds' p50s, as a library's figure is.
func floorSpread(fs []floorResult, backend string) spread {
	var ds []time.Duration
	for _, f := range fs {
		if f.Backend == backend && f.Err == "" {
			ds = append(ds, f.P50)
		}
	}
	return durSpread(ds)
}

// floorRatioCell is dlock's figure divided by the floor measured in the
// same run; for a rate (per), the time per event divided by the floor.
func floorRatioCell(d, floor spread, per bool) string {
	if !d.ok() || !floor.ok() || floor.Med <= 0 || d.Med <= 0 {
		return "–"
	}
	x := d.Med
	if per {
		x = float64(time.Second) / d.Med
	}
	return fmt.Sprintf("%.2f×", x/floor.Med)
}

// floorCell names a floor and its figure, or "–" when none was measured.
func floorCell(name string, floor spread) string {
	if !floor.ok() {
		return "–"
	}
	return name + ": " + floor.format(fmtDurF)
}

// handoffFloorCell names the hand-off's two floors: one notification, which
// the verdict uses, and one behind another client's write ("–" for a run
// that did not measure it).
func handoffFloorCell(floor, behind spread) string {
	if !floor.ok() && !behind.ok() {
		return "–"
	}
	return "one notification: " + floor.format(fmtDurF) + "; behind another write: " + behind.format(fmtDurF)
}

// handoffRatioCell is dlock's hand-off over each of its two floors.
func handoffRatioCell(d, floor, behind spread) string {
	if !floor.ok() && !behind.ok() {
		return floorRatioCell(d, floor, false)
	}
	return floorRatioCell(d, floor, false) + " (behind another write: " + floorRatioCell(d, behind, false) + ")"
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
		floor := floorSpread(res.CycleFloor, b)
		rows = append(rows, []string{"uncontended cycle p50", b, orNA(ok, d.format(fmtDurF)), peerCell(pn, ps, fmtDurF), floorCell("raw cycle", floor),
			"≤ fastest peer", ratioCell(d, ps), floorRatioCell(d, floor, false),
			verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, floor.Med, true)})
	}
	// Many distinct keys on one client.
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread {
			var xs []float64
			for _, k := range res.Keys {
				if k.Lib == lib && k.Elapsed > 0 {
					xs = append(xs, k.LocksPerS())
				}
			}
			return spreadOf(xs)
		}
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, true)
		rows = append(rows, []string{fmt.Sprintf("%s distinct keys locked and released, %d goroutines on one client: locks/s", fmtCount(res.keysCount()), keysWorkers), b,
			orNA(ok, d.format(fmtRate)), peerCell(pn, ps, fmtRate), "–", "≥ fastest peer", ratioCell(d, ps), "–",
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
			"≤ best peer", ratioCell(d, ps), "–", verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, math.NaN(), true)})
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
			orNA(ok, d.format(fmtFloat)), peerCell(pn, ps, fmtFloat), "–", "≤ 10 (batched or shared)", ratioCell(d, ps), "–",
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
			"≤ best peer", ratioCell(d, ps), "–", verdictOf(d.ok() && ps.ok() && d.Med <= ps.Med, ok && d.ok() && ps.ok(), d.Med, math.NaN(), true)})
	}
	// Hand-off p50, 8 contenders.
	const handoffN = 8
	for _, b := range backends {
		name, ok := head(b)
		fig := func(lib string) spread { return res.contendedSpread(lib, handoffN, false, handoffP50) }
		d := fig(name)
		pn, ps := best(res.peersOn(b), fig, false)
		rtt, floor := res.RTT[b].P50, floorSpread(res.HandoffFloor, b)
		behind := floorSpread(res.HandoffFloorBehind, b)
		target := 3 * rtt
		// The verdict is judged on one notification, the floor the
		// target names; the floor behind a write is shown beside it.
		rows = append(rows, []string{fmt.Sprintf("hand-off p50 to a waiting contender (%d contenders)", handoffN), b,
			orNA(ok, d.format(fmtDurF)+" = "+inRTT(time.Duration(d.Med), rtt)+" RTT"), peerCell(pn, ps, fmtDurF),
			handoffFloorCell(floor, behind), fmt.Sprintf("≤ 3 RTT = 3 × %s = %s", fmtDur(rtt), fmtDur(target)), ratioCell(d, ps),
			handoffRatioCell(d, floor, behind),
			verdictOf(d.ok() && rtt > 0 && d.Med <= float64(target), ok && d.ok() && rtt > 0, d.Med, floor.Med, true)})
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
			orNA(ok, d.format(fmtX)+"; p99 "+p99.format(fmtDurF)), peerCell(pn, ps, fmtX), "–", "≤ 10×", ratioCell(d, ps), "–",
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
		floor := floorSpread(res.HandoffFloor, b)
		ceiling, ceilingRate := "–", math.NaN()
		if floor.ok() && floor.Med > 0 {
			ceilingRate = float64(time.Second) / floor.Med
			ceiling = fmt.Sprintf("≤ %s (1 ÷ one notification of %s)", fmtRate(ceilingRate), fmtDurF(floor.Med))
		}
		if !fifo {
			// The ceiling is that of FIFO hand-offs: a run that barged
			// is no figure to hold against it.
			ceilingRate = math.NaN()
		}
		fifoText := "FIFO in every round"
		if !fifo {
			fifoText = "**not FIFO** in some round (see the checks below)"
		}
		rows = append(rows, []string{fmt.Sprintf("grants/s at %d contenders, strictly FIFO", grantsN), b,
			orNA(ok, d.format(fmtRate)+"; "+fifoText), peerCell(gp.peer, ps, fmtRate), ceiling,
			fmt.Sprintf("≥ %g× %s", gp.factor, gp.peer), ratioCell(d, ps), floorRatioCell(d, floor, true),
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
		// A drain at a lighter load than the target's proves nothing; a
		// stall at any load is a miss.
		atLoad := q.Load.Mean >= 2.5
		met := drained && atLoad
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
			"–", target, "–", "–", verdictOf(met, ok && found && (atLoad || !drained), 0, math.NaN(), false)})
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
			orNA(ok, d.format(fmtFloat)), "no Go peer offers a semaphore on this server", "–", fmt.Sprintf("≥ 2.4 (of %d)", permitsWorkload.Limit), "–", "–",
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

// targetsReport writes the targets table and the floors it judges by.
func targetsReport(m *md, res *results) {
	m.p("## Targets (%s)", res.Variant.label())
	m.p("")
	m.p("Each target of the performance issue, per backend, measured in this run beside the peers on the same")
	m.p("servers. Figures measured in several rounds show the median and the range (each round runs every library")
	m.p("in turn). *Best peer* is the peer with the best median on the same server. *Floor* is the least time the")
	m.p("server allows, measured in the same run the same way as the figure it bounds (section Floors below): the")
	m.p("uncontended cycle's is a cycle of the fewest requests a lock needs, sent raw through the same client")
	m.p("library among the libraries' runs; the hand-off's is one notification, timed in each round of the")
	m.p("contended runs. A target missed with dlock within %g× of its floor counts as done when the analysis", floorGap)
	m.p("says why the peer is faster (\"missed, within %g× of the floor\"; for grants/s, of the ceiling of one", floorGap)
	m.p("notification per hand-off, and only for a FIFO run). *dlock ÷ floor* is dlock's figure over the floor")
	m.p("(for grants/s, the time per grant over the floor); rows with no floor say \"–\". RTT is the round trip of")
	m.p("the smallest request (Redis PING, ZooKeeper exists, etcd linearizable Get).")
	m.p("The hand-off rows show a second floor beside the first: one notification *behind another client's")
	m.p("write*, the delete sent once a third client's write of a re-join's kind is on the wire, as each release")
	m.p("in a contended run meets the previous holder's re-join; dlock's figure over it is in brackets. The")
	m.p("verdict is judged on the first floor, one notification.")
	m.p("")
	m.table([]string{"target", "backend", "dlock", "best peer", "floor (same run)", "target", "dlock ÷ best peer", "dlock ÷ floor", "verdict"}, targetsTable(res))
	floorsReport(m, res)
}

// floorsReport writes every round's floors, if the run measured them.
func floorsReport(m *md, res *results) {
	if len(res.CycleFloor)+len(res.HandoffFloor)+len(res.HandoffFloorBehind) == 0 {
		return
	}
	m.p("## Floors (%s)", res.Variant.label())
	m.p("")
	m.p("The floors of the targets table, each round's, each measured in as many stretches as its server has")
	m.p("libraries, one just before each library's runs, so that its samples meet the conditions of all of them.")
	m.p("*Uncontended cycle*: the raw requests timed as a library's uncontended cycle is (the same warm-up, and in")
	m.p("all the same number of cycles and time limit); the server's count of requests per cycle checks that it")
	m.p("sends what it names. *Hand-off*: from one client starting the write that frees a key to another client's")
	m.p("goroutine receiving the server's notice of it, after a contended run's warm-up and, in all, for as long")
	m.p("as its window. *Hand-off behind another client's write*: the same, each delete sent once a third client's")
	m.p("write (what a re-join writes: a ZooKeeper ephemeral sequential node under the same parent, an etcd put")
	m.p("with a lease under the same prefix, a Redis SET script) has been written to its own connection, each")
	m.p("stretch just after the one-notification stretch; a sample whose delete the server ran first, or whose")
	m.p("other write was answered before the delete was sent, is left out (counted in *left out*), and the other")
	m.p("client's key is removed after each sample, untimed. *p50 of each stretch*, in the order of the libraries")
	m.p("they preceded, shows how much the server's conditions moved during the round.")
	m.p("")
	var rows [][]string
	for _, g := range []struct {
		kind   string
		fs     []floorResult
		behind bool
	}{{"uncontended cycle", res.CycleFloor, false}, {"hand-off (one notification)", res.HandoffFloor, false},
		{"hand-off behind another client's write", res.HandoffFloorBehind, true}} {
		for _, f := range g.fs {
			req := "–"
			if f.RequestsPerCycle > 0 {
				req = fmtFloat(f.RequestsPerCycle)
			}
			left := "–"
			if g.behind {
				left = fmt.Sprintf("%d of %d", f.Unordered, f.N+f.Unordered)
			}
			var each []string
			for _, d := range f.StretchP50 {
				each = append(each, fmtDur(d))
			}
			rows = append(rows, []string{g.kind, f.Backend, f.Op, fmt.Sprint(f.Round), fmt.Sprint(f.N), fmtDur(f.P50), fmtDur(f.P99),
				orDash(strings.Join(each, " / ")), req, left, short(f.Err)})
		}
	}
	m.table([]string{"floor", "server", "requests", "round", "samples", "p50", "p99", "p50 of each stretch", "requests per cycle", "left out (not behind the write)", "error"}, rows)
}
