package faultinject_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// soakDuration is how long scenario 8 runs per backend: DLOCK_SOAK (a Go
// duration such as 5m) or 8 s in the default run.
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("DLOCK_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("DLOCK_SOAK=%q: %v", s, err)
		}
		return d
	}
	return 8 * time.Second
}

// Scenario 8. Three holder processes loop acquire → fenced write → hold →
// release for the soak duration, each through its own proxy, while the test
// injects a random mix of the faults above: reply latency, connection
// resets, dropped replies to acquire/release/renew, blackholes shorter and
// longer than a TTL, SIGSTOP of a holder for one to two TTLs, and a kill -9
// and restart of the server (Redis with appendonly/appendfsync always). The
// whole history, with the resource's decisions, must be linearizable for
// the fenced-mutex model (porcupine): Ok, never Illegal. Double grants, token
// regressions and stale writes accepted are counted too.
//
// Negative control: the naive recipes, whose tokens are per-client sequence
// numbers, running the same loop without faults, must be Illegal.
func TestScenario8_Soak(t *testing.T) {
	t.Parallel()
	dur := soakDuration(t)
	for _, kind := range []string{"redis", "zk", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				r := newSoakRig(t, kind, "dlock")
				c := startChurn(t, r, 3, dur, 40*time.Millisecond, false, true)
				faults := injectFaults(t, r, c)
				leases := c.wait(t)
				a := analyse(t, leases, c.checked, c.unchkd, true)
				ok := a.linear == porcupine.Ok && a.overlaps == 0 && a.regressions == 0 && a.staleOK == 0
				v, known := verdict(ok), ""
				if !ok && knownBugs[kind] != "" && a.staleOK == 0 {
					// Is the known bug the whole story? Without the grants
					// it delivers late, the history must be clean.
					rest, late := withoutLateGrants(leases)
					b := analyse(t, rest, c.checked, c.unchkd, true)
					if late > 0 && b.linear == porcupine.Ok && b.overlaps == 0 && b.regressions == 0 {
						v = "KNOWN BUG"
						known = fmt.Sprintf(" — all of it from %d grant(s) delivered late (the known bug); without them porcupine says Ok", late)
					}
				}
				record(t, "8 soak + linearizability", kind, "dlock", v,
					"%v, %d leases, faults: %s; porcupine: %s; double grants %d, token regressions %d, stale writes accepted %d (unchecked resource: %d)%s",
					dur, a.leases, faults, resultName(a.linear), a.overlaps, a.regressions, a.staleOK, a.stale, known)
				switch {
				case v == "KNOWN BUG":
					knownBug(t, kind, "soak history %s, double grants %d", resultName(a.linear), a.overlaps)
				case !ok:
					t.Errorf("scenario 8 failed: %+v", a)
				}
			})
			t.Run("naive", func(t *testing.T) {
				r := newKindRig(t, kind, "naive")
				c := startChurn(t, r, 3, 3*time.Second, 20*time.Millisecond, false, false)
				a := analyse(t, c.wait(t), c.checked, c.unchkd, true)
				record(t, "8 soak + linearizability", kind, "naive recipe: sequence number as token", caught(a.linear == porcupine.Illegal),
					"3s without faults, %d leases; porcupine: %s; token regressions %d", a.leases, resultName(a.linear), a.regressions)
				if a.linear != porcupine.Illegal {
					t.Errorf("negative control missed: porcupine said %v", a.linear)
				}
			})
		})
	}
}

func resultName(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "Ok"
	case porcupine.Illegal:
		return "Illegal"
	}
	return "Unknown (timed out)"
}

func newSoakRig(t *testing.T, kind, recipe string) *rig {
	t.Helper()
	switch kind {
	case "redis":
		return newRedisRig(t, recipe, time.Second, "--appendonly", "yes", "--appendfsync", "always")
	case "zk":
		// A server of its own, which the soak restarts.
		e := startZKEnsemble(t, 1)
		r := newRig(t, "zk", recipe, 1500*time.Millisecond)
		r.ens, r.addrs, r.proto = e, e.clients, faultproxy.ZooKeeper
		r.zkc = dialZK(t, e.clients, 10*time.Second)
		return r
	}
	return newEtcdRig(t, recipe, etcdTTL)
}

// injectFaults applies random faults, one after another, while the churn
// runs, and returns a summary of what it did. The pauses between and during
// faults are the schedule of the experiment, not synchronisation.
func injectFaults(t *testing.T, r *rig, c *churn) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8))
	counts := map[string]int{}
	lastRestart := time.Now()
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	// Every kind of fault once per round, in a random order.
	var order []int
	for c.running() {
		if len(order) == 0 {
			order = rng.Perm(6)
		}
		fault := order[0]
		order = order[1:]
		time.Sleep(between(100*time.Millisecond, 400*time.Millisecond))
		if !c.running() {
			break
		}
		i := rng.IntN(len(c.holders))
		proxies := c.proxies[i]
		switch fault {
		case 0:
			for _, p := range proxies {
				p.SetLatency(0, between(50*time.Millisecond, 250*time.Millisecond))
			}
			time.Sleep(time.Second)
			for _, p := range proxies {
				p.SetLatency(0, 0)
			}
			counts["latency"]++
		case 1:
			for _, p := range proxies {
				p.Reset()
			}
			counts["reset"]++
		case 2:
			if r.kind == "etcd" {
				continue // the proxy cannot cut gRPC into requests
			}
			preds := []func(*faultproxy.Frame) bool{r.isAcquire, r.isRelease}
			if r.kind == "redis" {
				preds = append(preds, r.isRenew)
			}
			p := proxies[rng.IntN(len(proxies))]
			d := p.DropReply(preds[rng.IntN(len(preds))], false)
			select {
			case <-d.Fired():
				counts["dropped reply"]++
			case <-time.After(time.Second):
				p.Disarm(d)
			}
		case 3:
			for _, p := range proxies {
				p.Blackhole()
			}
			time.Sleep(between(100*time.Millisecond, 3*r.ttl/2))
			for _, p := range proxies {
				p.Restore()
			}
			counts["blackhole"]++
		case 4:
			h := c.holders[i]
			h.freeze()
			time.Sleep(between(r.ttl, 2*r.ttl))
			h.thaw()
			counts["SIGSTOP"]++
		case 5:
			if time.Since(lastRestart) < 3*time.Second {
				continue
			}
			r.restartServer()
			lastRestart = time.Now()
			counts["server kill -9 + restart"]++
		}
	}
	var parts []string
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// restartServer kills the (first) server with SIGKILL and starts it again.
func (r *rig) restartServer() {
	r.t.Helper()
	switch r.kind {
	case "redis":
		r.redis.Restart()
	case "zk":
		r.ens.kill(0)
		r.ens.start(0)
		r.ens.waitQuorum(1)
	default:
		r.otherRestart()
	}
}
