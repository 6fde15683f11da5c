package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// sectionsReport writes when each section ran and the machine's load
// average at its start and end.
func sectionsReport(m *md, res *results) {
	if len(res.Sections) == 0 {
		return
	}
	m.p("Sections in the order they ran, with the load average (1, 5, 15 min) at the start and end of each:")
	m.p("")
	var rows [][]string
	for _, s := range res.Sections {
		rows = append(rows, []string{s.Name, s.Start.UTC().Format("15:04:05"), s.End.Sub(s.Start).Round(time.Second).String(), s.LoadStart, s.LoadEnd})
	}
	m.table([]string{"section", "start (UTC)", "took", "load at start", "load at end"}, rows)
}

// queueReport writes the many-waiters table.
func queueReport(m *md, res *results) {
	m.p("### Many waiters on one key, at load")
	m.p("")
	if notMeasured(m, len(res.Queue), "queue") {
		return
	}
	m.p("A holder takes the key; then the waiters call `Lock` from 16 clients (each waiter one goroutine);")
	m.p("\"queued\" is until the server lists them all (for libraries without a server-side queue: 1 s); then")
	m.p("the holder releases and every waiter takes the key once and releases it at once, within %v for the", queueLimit)
	m.p("enqueue and the drain together. Memory is the server's, measured before the waiters came and once they")
	m.p("were all queued. **Load**: each run is made at a load of about %g runnable tasks on the machine", queueLoadOf(res))
	m.p("(`-queue-load`): the kernel's count of runnable tasks (`procs_running` in /proc/stat) is sampled every")
	m.p("100 ms, and CPU-spinning child processes are resumed while its recent mean is below the target and")
	m.p("stopped while it is above, so that the benchmark's own work counts towards it; the column shows the")
	m.p("mean count during the run and how many of the tasks were spinners. A run that does not drain is shown")
	m.p("**stalled**, with the waiters served and when the last was.")
	m.p("")
	var rows [][]string
	for _, q := range res.Queue {
		per := "–"
		if q.Drained > 0 {
			per = fmtDur(q.Drain / time.Duration(q.Drained))
		}
		rows = append(rows, []string{q.Lib, fmt.Sprint(q.Waiters), fmtDur(q.Enqueue), fmtDur(q.Drain), fmt.Sprint(q.Drained), fmtFloat(q.GrantsPerS()), per,
			q.Load.String(), fmtBytes(q.MemPerWait), q.MemWhat, fmt.Sprint(q.Overlaps), strings.ReplaceAll(strings.Trim(q.Err+"; "+q.Note, "; "), "|", "/")})
	}
	m.table([]string{"library", "waiters", "queued in", "drained in", "drained", "grants/s", "per hand-off", "load", "server memory per waiter", "memory measured as", "overlaps", "notes"}, rows)
}

// keysReport writes the many-keys table.
func keysReport(m *md, res *results) {
	m.p("### Many distinct keys, one client")
	m.p("")
	if notMeasured(m, len(res.Keys), "keys") {
		return
	}
	m.p("One client (one connection pool or session), %d goroutines: each takes a distinct free key with `Lock`", keysWorkers)
	m.p("and releases it at once, until every key was locked and released once (leases of 10 minutes, so that")
	m.p("no renewal runs), within %v per library. Locks/s is the keys done divided by the time from the first", keysLimit)
	m.p("`Lock` to the last release. Each round runs every library in turn, on keys of its own; the targets")
	m.p("table shows the median and range of the rounds.")
	m.p("")
	var rows [][]string
	for _, k := range res.Keys {
		rows = append(rows, []string{k.Lib, orDash(roundCell(k.Round)), fmtCount(k.Keys), fmtCount(k.Done), fmtDur(k.Elapsed), fmtFloat(k.LocksPerS()), short(k.Err)})
	}
	m.table([]string{"library", "round", "keys", "locked and released", "in", "locks/s", "error"}, rows)
}

// renewalReport writes the renewal table.
func renewalReport(m *md, res *results) {
	m.p("### Renewal requests while many locks are held")
	m.p("")
	if notMeasured(m, len(res.Renewal), "renewal") {
		return
	}
	m.p("One client holds distinct locks, every library with leases of %v; after one renewal interval (TTL/3 =", renewalTTL)
	m.p("%v, dlock's) the server's count of requests is read before and after a window of %d intervals in which", renewalInterval, renewalIntervals)
	m.p("nothing but the holding goes on. Redis: requests as sent by the client (a script call once; the server's")
	m.p("commandstats, which count the commands inside scripts too, are in the last column); ZooKeeper:")
	m.p("`zk_packets_received` (a session's pings included); etcd: gRPC messages received (`grpc_server_msg_received_total`:")
	m.p("keep-alives are messages on one stream, which `grpc_server_handled_total` would count once).")
	m.p("")
	var rows [][]string
	for _, r := range res.Renewal {
		per := fmtFloat(r.PerInterval())
		if r.NA != "" {
			per = "n/a: " + r.NA
		}
		type kv struct {
			k string
			v float64
		}
		var ops []kv
		for k, v := range r.ByOp {
			if v > 0 {
				ops = append(ops, kv{k, v})
			}
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i].v > ops[j].v || ops[i].v == ops[j].v && ops[i].k < ops[j].k })
		var parts []string
		for _, o := range ops {
			parts = append(parts, fmt.Sprintf("%s %s", o.k, fmtFloat(o.v)))
		}
		rows = append(rows, []string{r.Lib, fmtCount(r.Locks), fmtDur(r.Window), fmtFloat(r.Requests), per, orDash(strings.Join(parts, ", ")), short(r.Err)})
	}
	m.table([]string{"library", "locks held", "window", "requests in the window", "per TTL/3", "server operations in the window", "error"}, rows)
}

// permitsReport writes the permits section: how full the semaphore of the
// targets is kept.
func permitsReport(m *md, res *results) {
	m.p("## Semaphore permits in use: limit %d, %d clients, %s holds (%s)", permitsWorkload.Limit, permitsClients, fmtDur(permitsHold), res.Variant.label())
	m.p("")
	if notMeasured(m, len(res.Permits), "permits") {
		return
	}
	m.p("The harness of the semaphore section below (`Semaphore(key, %d).Acquire`, hold, `Unlock`, again at", permitsWorkload.Limit)
	m.p("once), with %d contenders, each its own `dlock.Client`, holding %s, one run per round and backend.", permitsClients, fmtDur(permitsHold))
	m.p("*Mean held* is the time-weighted mean of leases held over the window: with 12 callers for 3 permits,")
	m.p("a semaphore that hands each freed permit on at once keeps it near 3. No Go peer offers a semaphore on")
	m.p("these servers.")
	m.p("")
	var rows [][]string
	for _, r := range res.Permits {
		rows = append(rows, []string{r.Lib, fmt.Sprint(r.Round), fmtDur(r.Window), fmt.Sprint(r.Grants), fmtFloat(r.GrantsPerS),
			fmtFloat(r.MeanHolders), fmt.Sprint(r.MaxHolders), fmtDur(r.HandoffP50), fmtDur(r.HandoffP99), fmt.Sprint(r.Violations), modeErrText(r)})
	}
	m.table([]string{"library", "round", "window", "grants", "grants/s", "mean held", "max held", "hand-off p50", "hand-off p99", "violations", "errors"}, rows)
}

// queueLoadOf is the load target of the run's many-waiters section.
func queueLoadOf(res *results) float64 {
	for _, q := range res.Queue {
		if q.Load.Target > 0 {
			return q.Load.Target
		}
	}
	return 0
}

// roundCell is a round's number, or "" for a run older than rounds.
func roundCell(round int) string {
	if round == 0 {
		return ""
	}
	return fmt.Sprint(round)
}
