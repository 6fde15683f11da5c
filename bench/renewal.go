package main

import (
	"context"
	"fmt"
	"log"
	"time"
)

// ---- renewal requests while many locks are held ----

// The renewal section: one client holds renewalLocks distinct locks, each
// library with the same lease length renewalTTL, and the server counts the
// requests it receives while nothing but that holding goes on. The unit is
// TTL/3, the renewal interval dlock's leases use: a library that renews
// each lock on its own sends about one request per lock and interval, one
// that renews a session (ZooKeeper, an etcd Mutex's session) or a batch
// sends a few.
const (
	renewalLocks = 1000
	renewalTTL   = 6 * time.Second // ZooKeeper's least session timeout is 4 s (2 ticks)
	// renewalIntervals is the counting window, in renewal intervals, after
	// one interval of settling (every lease past its first renewal).
	renewalIntervals = 3
)

// renewalInterval is the unit of the section's figure: TTL/3.
const renewalInterval = renewalTTL / 3

type renewalResult struct {
	Lib     string
	Backend string
	Locks   int           // locks held through the window
	TTL     time.Duration // the lease length every library was given
	Window  time.Duration // the counting window
	// Requests are the requests the server received in the window:
	// Redis: counted by the client (a script call once; the server's
	// commandstats, in ByOp, count script-internal commands too);
	// ZooKeeper: zk_packets_received; etcd: gRPC messages received (unary
	// calls and stream messages, keep-alives included).
	Requests float64
	ByOp     map[string]float64
	// NA says why the library has no figure: it does not renew by itself.
	NA  string
	Err string
}

// PerInterval is the requests per renewal interval (TTL/3).
func (r renewalResult) PerInterval() float64 {
	if r.Window <= 0 {
		return 0
	}
	return r.Requests * float64(renewalInterval) / float64(r.Window)
}

// renewalNA is why a library has no renewal figure: it never renews a
// lock by itself, so holding a lock longer than its expiry is the caller's
// loop, one request per lock.
var renewalNA = map[string]string{
	"redsync":       "no automatic renewal: the caller extends each lock (Mutex.Extend), one request per lock",
	"bsm/redislock": "no automatic renewal: the caller refreshes each lock (Lock.Refresh), one request per lock",
}

func runRenewalSection(s *servers, libs []*library, quick bool) []renewalResult {
	locks, intervals := renewalLocks, renewalIntervals
	if quick {
		locks, intervals = 100, 1
	}
	var out []renewalResult
	for _, l := range libs {
		if l.Missing != "" {
			continue
		}
		r := runRenewal(s, l, locks, intervals)
		log.Printf("renewal %-18s held %d: %.0f requests in %v = %.1f per TTL/3 %s %s", l.Name, r.Locks, r.Requests, r.Window.Round(time.Millisecond), r.PerInterval(), r.NA, r.Err)
		out = append(out, r)
	}
	return out
}

// runRenewal takes locks distinct keys through one client of lib, lets
// one renewal interval pass, counts the server's requests over intervals
// more, and releases the keys.
func runRenewal(s *servers, lib *library, locks, intervals int) renewalResult {
	r := renewalResult{Lib: lib.Name, Backend: lib.Backend, TTL: renewalTTL, NA: renewalNA[lib.Name]}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, err := openMultis(ctx, s, lib, 1, renewalTTL, false)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer closeMultis(ms)
	releases, held, err := lockKeys(ctx, ms, locks, 16)
	defer releaseKeys(releases, 16, 30*time.Second)
	r.Locks = held
	if err != nil {
		r.Err = err.Error()
		return r
	}
	time.Sleep(renewalInterval) // the measured state: every lease past its first renewal
	before, err := s.counters(lib.Backend)
	if err != nil {
		r.Err = "server counters: " + err.Error()
		return r
	}
	t0 := time.Now()
	time.Sleep(time.Duration(intervals) * renewalInterval) // the window: nothing but the holding goes on
	after, err := s.counters(lib.Backend)
	r.Window = time.Since(t0)
	if err != nil {
		r.Err = "server counters: " + err.Error()
		return r
	}
	d := after.sub(before)
	r.Requests, r.ByOp = d.Requests, d.ByOp
	if r.Err == "" && held < locks {
		r.Err = fmt.Sprintf("only %d of %d locks taken", held, locks)
	}
	return r
}
