package main

import "fmt"

// gatewayReport writes the gateway section: grants/s and hand-off latency
// through the gateway beside the library used directly, same backend, same
// run.
func gatewayReport(m *md, res *results) {
	m.p("### Through the gateway, against the library used directly")
	m.p("")
	if notMeasured(m, len(res.Gateway), "gateway") {
		return
	}
	m.p("%d contenders loop Lock, an empty critical section, Unlock on one key for %v after a warm-up, as in the", res.Gateway[0].N, res.Gateway[0].Window)
	m.p("contended runs: first each with a `dlock.Client` of its own (*library*), then each an HTTP client with")
	m.p("a connection of its own to one gateway (package `gateway`) served in the benchmark process on loopback")
	m.p("over one `dlock.Client` (*gateway*): `POST /v1/acquire` with `wait_ms` 30,000, a long poll that keeps")
	m.p("its ticket from poll to poll, and `DELETE /v1/leases/{id}`. A hand-off runs from the holder starting")
	m.p("its release to the next waiter's grant arriving; through the gateway it includes two HTTP requests and")
	m.p("the JSON both ways. The gateway's leases are renewed by its one Client, the library's by each.")
	m.p("")
	var rows [][]string
	lib := map[string]gatewayResult{}
	for _, r := range res.Gateway {
		if r.Path == "library" {
			lib[r.Backend] = r
		}
	}
	for _, r := range res.Gateway {
		ratio := ""
		if d, ok := lib[r.Backend]; ok && r.Path == "gateway" && d.GrantsPerS > 0 && r.GrantsPerS > 0 {
			ratio = fmt.Sprintf("%.2f× the library's grants/s, %.1f× its p50", r.GrantsPerS/d.GrantsPerS, float64(r.HandoffP50)/float64(max(d.HandoffP50, 1)))
		}
		rows = append(rows, []string{r.Backend, r.Path, fmt.Sprint(r.N), fmt.Sprintf("%.0f", r.GrantsPerS),
			fmtDur(r.HandoffP50), fmtDur(r.HandoffP99), fmt.Sprint(r.Overlaps), ratio, errText(r.contendedResult)})
	}
	m.table([]string{"backend", "path", "contenders", "grants/s", "hand-off p50", "hand-off p99", "overlaps", "gateway vs library", "errors"}, rows)
}
