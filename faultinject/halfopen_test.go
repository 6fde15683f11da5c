package faultinject_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// Scenario 7. A holder's path to the server turns half-open right after a
// successful renewal: from then on nothing arrives in either direction, on
// its connections and on any new one, and nothing is closed (no RST, no
// FIN), so a renewal retried on a fresh connection goes unanswered too. The
// documented interval (docs/redis.md, internal/lease) is: Done closes at the
// latest TTL − 1% − 2 ms after the last renewal request that succeeded was
// sent. The suite checks the holder's deadline against the moment the proxy
// last forwarded a request to the server (which is after that request was
// sent) plus the TTL, and that the renewal answered just before the cut
// moved the deadline (one that ran out of time and was ignored would make
// the first check pass for nothing, and hide the weak build's flaw); it
// reports how long after the cut Done closed. The holder then unlocks and
// closes its client over the dead connection and must leak no goroutine.
// Replies are delayed (latency) from the first renewal on, and ZooKeeper
// pings are dropped, as in scenario 1.
//
// On etcd the proxy cannot tell a renewal from other HTTP/2 traffic (gRPC
// acknowledges replies at once), so the deadline is checked against the
// moment a contender got the key instead, as in scenario 1.
//
// Negative control: the weak build (validity from the reply) must be caught
// with a deadline past the interval.
func TestScenario7_HalfOpen(t *testing.T) {
	t.Parallel()
	for _, c := range pauseCases {
		t.Run(c.kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				s := runHalfOpen(t, c, false, 1)
				// The deadline check is exact; the moment Done was seen
				// also carries scheduling delay on a loaded machine.
				// On etcd the cut comes after a renewal seen by the
				// holder (waitRenewed), not by the proxy.
				counted := c.kind == "etcd" || s.counted == s.trials
				ok := s.late == 0 && counted && s.leaks == "" && s.maxDetect <= c.ttl+time.Second
				linger := ""
				if s.lingered != "" {
					linger = fmt.Sprintf(" (but goroutines outlived Close by up to %v: %s)", s.lingerFor.Round(100*time.Millisecond), s.lingered)
				}
				record(t, "7 half-open connection", c.kind, "dlock", verdict(ok),
					"%sDone closed %v after the cut (max; bound TTL + 1 s = %v); %s %d/%d (max: %v); holders with goroutines left 20 s after Close: %d%s",
					s.countedFigure(c.kind), s.maxDetect.Round(time.Millisecond), c.ttl+time.Second, halfOpenCheck[c.kind == "etcd"], s.late, s.trials, s.maxLate.Round(time.Millisecond), s.leaked, linger)
				if !ok {
					t.Errorf("scenario 7 failed: %+v", s)
				}
			})
			t.Run("dlock_weak", func(t *testing.T) {
				s := runHalfOpen(t, c, true, 1)
				record(t, "7 half-open connection", c.kind, "dlock_weak: validity from reply", caught(s.late > 0),
					"%s %d/%d (by %v)", halfOpenCheck[c.kind == "etcd"], s.late, s.trials, s.maxLate.Round(time.Millisecond))
				if s.late == 0 {
					t.Errorf("negative control missed")
				}
			})
		})
	}
}

// countedFigure says in how many trials the renewal answered before the
// cut moved the deadline; nothing on etcd, where it is not observed.
func (s *halfOpenStats) countedFigure(kind string) string {
	if kind == "etcd" {
		return ""
	}
	return fmt.Sprintf("last renewal before the cut counted %d/%d; ", s.counted, s.trials)
}

// halfOpenCheck names what the deadline is compared with.
var halfOpenCheck = map[bool]string{
	false: "deadline past (last request forwarded + TTL)",
	true:  "deadline past the contender's grant",
}

type halfOpenStats struct {
	trials, late, leaked          int
	counted                       int // trials whose last renewal before the cut moved the deadline
	maxDetect, maxLate, lingerFor time.Duration
	leaks, lingered               string
}

func runHalfOpen(t *testing.T, c pauseCase, weak bool, trials int) halfOpenStats {
	if c.kind == "etcd" {
		return runHalfOpenEtcd(t, c, weak, trials)
	}
	s := halfOpenStats{maxLate: -time.Hour}
	r := newKindRigTTL(t, c.kind, "dlock", c.ttl)
	for trial := range trials {
		pa := r.proxy()
		isRenew := r.isRenew
		if c.kind == "zk" {
			pa.DiscardRequests(isPing)
			// A renewal proves the session, by a read of /zookeeper/config
			// on a standalone server (as the suite's is) and a sync on an
			// ensemble, then reads the lock node (exists, or getData with
			// a watch) unless the node's watch proves it: its request may
			// be the proof alone.
			isRenew = func(f *faultproxy.Frame) bool {
				switch f.Op {
				case faultproxy.ZKOpGetData:
					return f.Path == configNode || strings.Contains(f.Path, "/lock-")
				case faultproxy.ZKOpSync, faultproxy.ZKOpExists:
					return strings.Contains(f.Path, "/lock-")
				}
				return false
			}
		}
		a := r.holder("A", weak, pa)
		key := r.key("s7")
		ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute)
		if !ev.Held {
			t.Fatalf("A could not take a free key: %s", ev.Err)
		}
		from := a.mark()
		// The latency starts after a first renewal, which on Redis loads
		// the renewal script (NOSCRIPT, then EVAL: two round trips in one
		// try): the renewal cut off is then one round trip, as each is
		// once the server has the script.
		waitRenewed(t, a, ev.Deadline, c.ttl)
		pa.SetLatency(0, c.latency)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			a.notice(from, 3*c.ttl+time.Minute, "A's Done", func(e faultinject.Event) bool { return e.Ev == "done" })
		}()
		obs := pa.Observe(func(f *faultproxy.Frame) bool { return !f.Up || isRenew(f) })
		was := a.call(faultinject.Command{Op: "state"}, time.Minute).Deadline
		if _, stopped := awaitAnsweredOr(t, obs, r.proto, faultinject.Mono(), isRenew, time.Minute, ended); stopped {
			t.Fatalf("trial %d: A's lease ended before the cut: %+v", trial, a.call(faultinject.Command{Op: "state"}, time.Minute))
		}
		pa.HalfOpen()
		cut := faultinject.Mono()
		obs.Stop()
		last := pa.LastUp()
		done := awaitCutDone(t, a, from, c.ttl, trial)
		<-ended
		st := a.call(faultinject.Command{Op: "state"}, time.Minute)
		detect := time.Duration(done.At - cut)
		late := time.Duration(st.Deadline - (last + int64(c.ttl)))
		s.add(detect, late)
		// The renewal answered just before the cut was sent after was
		// was read: counted, it moved the deadline past was.
		if st.Deadline > was {
			s.counted++
		}
		t.Logf("trial %d: Done %v after the cut; deadline − (last request + TTL) = %v; deadline moved by the last renewal: %v", trial, detect, late, st.Deadline > was)
		a.call(faultinject.Command{Op: "unlock", Timeout: c.ttl}, time.Minute)
		s.closeHolder(t, a, weak, trial)
		pa.Close()
	}
	return s
}

// runHalfOpenEtcd cuts the holder's connection at a random moment after a
// renewal and checks its deadline against a contender's grant.
func runHalfOpenEtcd(t *testing.T, c pauseCase, weak bool, trials int) halfOpenStats {
	s := halfOpenStats{maxLate: -time.Hour}
	r := newKindRigTTL(t, c.kind, "dlock", c.ttl)
	b := r.holder("B", weak)
	for trial := range trials {
		pa := r.proxy()
		pa.SetLatency(0, c.latency)
		a := r.holder("A", weak, pa)
		key := r.key("s7")
		ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute)
		if !ev.Held {
			t.Fatalf("A could not take a free key: %s", ev.Err)
		}
		waitRenewed(t, a, ev.Deadline, c.ttl)
		from := a.mark()
		pa.HalfOpen()
		cut := faultinject.Mono()
		locked := b.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 3*c.ttl + 30*time.Second})
		done := awaitCutDone(t, a, from, c.ttl, trial)
		evB := b.await(locked, 3*c.ttl+time.Minute, "B waits for the key")
		if !evB.Held {
			t.Fatalf("trial %d: B did not get the key: %s", trial, evB.Err)
		}
		st := a.call(faultinject.Command{Op: "state"}, time.Minute)
		detect := time.Duration(done.At - cut)
		late := time.Duration(st.Deadline - evB.Ret)
		s.add(detect, late)
		t.Logf("trial %d: Done %v after the cut; deadline − contender's grant = %v", trial, detect, late)
		b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		a.call(faultinject.Command{Op: "unlock", Timeout: c.ttl}, time.Minute)
		s.closeHolder(t, a, weak, trial)
		pa.Close()
	}
	b.close()
	return s
}

// awaitCutDone waits for the Done of holder a, whose connection was cut,
// among its notices since from; it fails the test if Done did not close
// within TTL + 5 s.
func awaitCutDone(t *testing.T, a *proc, from int, ttl time.Duration, trial int) faultinject.Event {
	t.Helper()
	done, ok := a.awaitDone(from, ttl+5*time.Second, "A's Done")
	if !ok {
		t.Fatalf("trial %d: A's Done did not close within TTL + 5s of the cut", trial)
	}
	return done
}

// add counts a trial: how long after the cut Done closed, and by how much
// the holder's deadline was past the bound (late if positive).
func (s *halfOpenStats) add(detect, late time.Duration) {
	s.trials++
	s.maxDetect = max(s.maxDetect, detect)
	s.maxLate = max(s.maxLate, late)
	if late > 0 {
		s.late++
	}
}

// closeHolder closes holder a over its half-open connection and counts the
// goroutines that outlived Close; leaks fail the test unless weak.
func (s *halfOpenStats) closeHolder(t *testing.T, a *proc, weak bool, trial int) {
	t.Helper()
	ev := a.closeEv(weak)
	if ev.Lingered != "" {
		s.lingered = ev.Lingered
		s.lingerFor = max(s.lingerFor, ev.LingerFor)
	}
	if ev.Leaks != "" {
		s.leaked++
		s.leaks += ev.Leaks
		if !weak {
			t.Errorf("trial %d: the holder leaked goroutines after closing over a half-open connection: %s", trial, ev.Leaks)
		}
	}
}

// waitRenewed waits until the holder's lease has been renewed: its deadline
// has moved past was. It polls the holder, which reports no renewals. The
// first renewal is due a third of a TTL after the grant; the bound is a
// watchdog, generous for a loaded machine.
func waitRenewed(t *testing.T, p *proc, was int64, ttl time.Duration) {
	t.Helper()
	deadline := time.Now().Add(2*ttl + time.Minute)
	// Deadlines are converted to Mono on each call: allow for the jitter.
	for p.call(faultinject.Command{Op: "state"}, time.Minute).Deadline-was < int64(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("holder %s: lease not renewed within 2 TTL + 1 min", p.name)
		}
		time.Sleep(10 * time.Millisecond) // polling the holder's state
	}
}

// Scenario 7b. The holder's connections go silent (Stall: no reply, no
// reset, as behind a NAT or a load balancer that lost their state) while
// new connections to the server work. The renewal in flight on a silent
// connection is given up on within half of what is left of the lease and
// sent again on another connection (docs/redis.md, docs/zookeeper.md, docs/etcd.md),
// so the lease survives: its deadline passes the moment of the stall plus
// the TTL, which only a renewal sent after the stall can give, and Done
// stays open; the proxy accepted a new connection meanwhile. Replies are
// not delayed: a retry costs a new connection's round trips (connect,
// handshake, the request) within what is left of the lease, which 200 ms
// replies on a 1 s lease do not fit. There is no negative control: no build keeps
// the old wait-for-the-deadline renewal; scenario 7 catches the weak
// build, and redisdlock's, zkdlock's and etcddlock's own tests pin the
// retry.
func TestScenario7b_StalledConnection(t *testing.T) {
	t.Parallel()
	for _, c := range pauseCases {
		t.Run(c.kind, func(t *testing.T) {
			r := newKindRigTTL(t, c.kind, "dlock", c.ttl)
			pa := r.proxy()
			if c.kind == "zk" {
				pa.DiscardRequests(isPing)
			}
			a := r.holder("A", false, pa)
			ev := a.call(faultinject.Command{Op: "lock", Key: r.key("s7b"), Timeout: 15 * time.Second}, time.Minute)
			if !ev.Held {
				t.Fatalf("A could not take a free key: %s", ev.Err)
			}
			from := a.mark()
			waitRenewed(t, a, ev.Deadline, c.ttl)
			dialed := pa.Accepted()
			pa.Stall()
			stall := faultinject.Mono()
			deadline := time.Now().Add(3*c.ttl + time.Minute)
			var st faultinject.Event
			for {
				st = a.call(faultinject.Command{Op: "state"}, time.Minute)
				if st.Deadline > stall+int64(c.ttl) {
					break
				}
				if _, _, lost := a.notice(from, 0, "A's Done", func(e faultinject.Event) bool { return e.Ev == "done" }); lost {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("A's lease neither renewed past the stall + TTL nor lost within 3 TTL + 1 min")
				}
				time.Sleep(10 * time.Millisecond) // polling the holder's state
			}
			_, _, lost := a.notice(from, 0, "A's Done", func(e faultinject.Event) bool { return e.Ev == "done" })
			renewed := st.Deadline > stall+int64(c.ttl)
			newConns := pa.Accepted() - dialed
			ok := renewed && !lost && newConns > 0
			record(t, "7b silent connection, new ones work", c.kind, "dlock", verdict(ok),
				"lease renewed past stall + TTL: %v (deadline − (stall + TTL) = %v); Done closed: %v; new connections: %d",
				renewed, time.Duration(st.Deadline-stall-int64(c.ttl)).Round(time.Millisecond), lost, newConns)
			if !ok {
				t.Errorf("scenario 7b failed: renewed %v, lost %v, new connections %d", renewed, lost, newConns)
			}
			pa.Restore()
			a.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
			a.closeEv(false)
			pa.Close()
		})
	}
}
