package main

import (
	"fmt"
	"log"
	"time"
)

// ---- the permits section: how full a semaphore is kept ----

// permitsWorkload is the semaphore the targets table judges: limit 3, 12
// clients, each holding its permit 2 ms. A semaphore that leaves a permit
// idle after each release while callers wait shows a time-weighted mean of
// holders well under 3.
var permitsWorkload = modeWorkload{Name: "semaphore", Limit: 3}

const (
	permitsClients = 12
	permitsHold    = 2 * time.Millisecond
)

// runPermitsSection runs the permits workload on every dlock backend, one
// run per round, the backends in turn within each round.
func runPermitsSection(s *servers, libs []*library, cfg config) []modeResult {
	var out []modeResult
	for round := 1; round <= cfg.rounds; round++ {
		for _, l := range libs {
			if !l.IsDlock || l.Missing != "" {
				continue
			}
			key := fmt.Sprintf("permits-%d", round)
			t0 := time.Now()
			cs, err := newContenders(s, l, permitsClients, key)
			if err != nil {
				log.Printf("permits %s: %v", l.Name, err)
				out = append(out, modeResult{Lib: l.Name, Workload: "permits", Limit: permitsWorkload.Limit, N: permitsClients, Round: round, FirstErr: err.Error()})
				continue
			}
			r := runModesOn(s, l, cs, key, permitsWorkload, permitsHold, cfg.warmup, cfg.window, modeMaxGrants)
			r.Workload, r.Round, r.Setup = "permits", round, time.Since(t0)
			log.Printf("permits %-18s round %d: mean held %.2f of %d (max %d) grants/s %.0f handoff p50 %v violations %d errs %d %s",
				l.Name, round, r.MeanHolders, r.Limit, r.MaxHolders, r.GrantsPerS, r.HandoffP50, r.Violations, r.Errors, r.FirstErr)
			out = append(out, r)
			closeAll(cs)
		}
	}
	return out
}
