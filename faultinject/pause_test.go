package faultinject_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
)

// pauseCase is one backend of scenario 1. The holder's replies are delayed
// by latency in every variant: the weakened lease engine, which counts
// validity from replies, is then late by that much. On ZooKeeper the proxy
// also drops the holder's pings, so that only its renewals keep the session
// alive and the lease's validity is measured by them alone.
type pauseCase struct {
	kind    string
	ttl     time.Duration
	latency time.Duration
	trials  int // of the dlock variant
}

var pauseCases = []pauseCase{
	{kind: "redis", ttl: time.Second, latency: 200 * time.Millisecond, trials: 2},
	{kind: "zk", ttl: 1500 * time.Millisecond, latency: 200 * time.Millisecond, trials: 2},
	// etcd expires leases in a loop that runs every 500 ms, so it frees a
	// key up to half a second after the TTL: the latency must exceed that
	// for the weak build to show. etcd's renewal is one round trip.
	{kind: "etcd", ttl: etcdTTL, latency: 800 * time.Millisecond, trials: 1},
}

// Scenario 1. A holder frozen by SIGSTOP for 2×TTL and then resumed must
// find its lease lost (Done closed) before its next write, and the fenced
// resource must reject all of its stale writes; meanwhile a contender gets
// the key within TTL + 1 s. The holder's local deadline must also have
// passed by the time the contender got the key (it learns of the loss no
// later than the server frees the key); on Redis and ZooKeeper, also by the
// earliest moment the server can free it: the last request the proxy
// forwarded for the holder, plus the TTL.
//
// Negative controls: the same writes go to a resource without the token
// check (stale writes must be accepted there); the weak build (validity
// counted from the reply) must be caught holding a deadline later than the
// contender's grant or that bound (the bound catches it by the whole reply
// latency, however slowly the contender notices on a loaded machine); the
// naive Redis recipe's sequence-number tokens must get a stale write past
// the checked resource.
func TestScenario1_PausedHolder(t *testing.T) {
	t.Parallel()
	for _, c := range pauseCases {
		t.Run(c.kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				s := runPause(t, c, "dlock", false, c.trials)
				ok := s.staleChecked == 0 && s.doneBefore == s.trials && s.slowContender == 0 && s.late == 0 && s.past == 0 && s.leaks == ""
				record(t, "1 paused holder", c.kind, "dlock", verdict(ok),
					"stale writes accepted %d/%d; Done closed before next write %d/%d; contender got the key %v after the freeze (max; bound TTL+1s = %v); holder's deadline after the contender's grant %d/%d (deadline − grant, max: %v)%s",
					s.staleChecked, s.stale, s.doneBefore, s.trials, s.maxWait.Round(time.Millisecond), c.ttl+time.Second, s.late, s.trials, s.maxLate.Round(time.Millisecond), s.pastFigure())
				record(t, "1 paused holder", c.kind, "resource without token check", caught(s.staleUnchecked > 0),
					"stale writes accepted %d/%d", s.staleUnchecked, s.stale)
				if !ok {
					t.Errorf("scenario 1 failed on %s: %+v", c.kind, s)
				}
				if s.staleUnchecked == 0 {
					t.Errorf("negative control: the unchecked resource accepted no stale write")
				}
			})
			t.Run("dlock_weak", func(t *testing.T) {
				s := runPause(t, c, "dlock", true, 1)
				record(t, "1 paused holder", c.kind, "dlock_weak: validity from reply", caught(s.late > 0 || s.past > 0),
					"holder's deadline after the contender's grant %d/%d (deadline − grant, max: %v)%s", s.late, s.trials, s.maxLate.Round(time.Millisecond), s.pastFigure())
				if s.late == 0 && s.past == 0 {
					t.Errorf("negative control missed: the weak lease engine's deadline was never late")
				}
			})
			if c.kind != "zk" {
				t.Run("naive", func(t *testing.T) {
					s := runPause(t, c, "naive", false, min(c.trials, 2))
					record(t, "1 paused holder", c.kind, "naive recipe: sequence number as token", caught(s.staleChecked > 0),
						"stale writes accepted by the checked resource %d/%d", s.staleChecked, s.stale)
					if s.staleChecked == 0 {
						t.Errorf("negative control missed: sequence-number tokens got no stale write through")
					}
				})
			}
		})
	}
}

type pauseStats struct {
	trials, stale, staleChecked, staleUnchecked, doneBefore int
	slowContender, late                                     int
	maxWait, maxLate                                        time.Duration
	leaks                                                   string

	// Redis and ZooKeeper: trials whose deadline was past the moment the
	// proxy last forwarded one of the holder's requests plus the TTL, the
	// earliest the server can free the key (as in scenario 7). Unlike the
	// contender's grant, it does not depend on how fast the contender
	// notices, so the weak engine's lateness (the reply latency) shows in
	// full however loaded the machine is.
	bounded bool
	past    int
	maxPast time.Duration
}

// pastFigure reports the check against the proxy's bound, where there is one.
func (s *pauseStats) pastFigure() string {
	if !s.bounded {
		return ""
	}
	return fmt.Sprintf("; deadline past (last request forwarded + TTL) %d/%d (max: %v)", s.past, s.trials, s.maxPast.Round(time.Millisecond))
}

func runPause(t *testing.T, c pauseCase, recipe string, weak bool, trials int) pauseStats {
	r := newKindRigTTL(t, c.kind, recipe, c.ttl)
	pa := r.proxy()
	pa.SetLatency(0, c.latency)
	if c.kind == "zk" {
		pa.DiscardRequests(isPing)
	}
	a := r.holder("A", weak, pa)
	b := r.holder("B", weak)
	key := r.key("s1")
	const n = 3 // stale writes per trial
	s := pauseStats{maxLate: -time.Hour, maxPast: -time.Hour}
	for trial := range trials {
		checked, unchecked := r.resources()
		targets := []string{checked.Name, unchecked.Name}
		ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 30 * time.Second}, time.Minute)
		if !ev.Held {
			t.Fatalf("trial %d: A could not take the free key: %s", trial, ev.Err)
		}
		if ev := a.call(faultinject.Command{Op: "write", Value: "A-fresh", Targets: targets}, time.Minute); !ev.Writes[0].Accepted[checked.Name] {
			t.Fatalf("trial %d: A's write while holding was rejected: %+v", trial, ev.Writes)
		}
		bLocked := b.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 3*c.ttl + 30*time.Second})

		frozen := faultinject.Mono()
		a.freeze()
		evB := b.await(bLocked, 3*c.ttl+time.Minute, "B waits for the key")
		if !evB.Held {
			a.thaw()
			t.Fatalf("trial %d: the contender did not get the key: %s", trial, evB.Err)
		}
		wait := time.Duration(evB.Ret - frozen)
		s.maxWait = max(s.maxWait, wait)
		if wait > c.ttl+time.Second {
			s.slowContender++
		}
		if ev := b.call(faultinject.Command{Op: "write", Value: "B", Targets: targets}, time.Minute); !ev.Writes[0].Accepted[checked.Name] {
			t.Errorf("trial %d: the new holder's write was rejected: %+v", trial, ev.Writes)
		}
		// The freeze lasts 2×TTL: that is the scenario, not a synchronisation.
		time.Sleep(time.Until(time.Now().Add(time.Duration(frozen + int64(2*c.ttl) - faultinject.Mono()))))
		// Whatever A sent before it stopped has been forwarded long ago:
		// nothing later than this can have extended its grant.
		last := pa.LastUp()
		a.thaw()

		evW := a.call(faultinject.Command{Op: "write", N: n, Value: fmt.Sprintf("A-stale-%d", trial), Targets: targets}, time.Minute)
		s.trials++
		if len(evW.Writes) > 0 && evW.Writes[0].DoneBefore {
			s.doneBefore++
		}
		for _, w := range evW.Writes {
			s.stale++
			if w.Accepted[checked.Name] {
				s.staleChecked++
			}
			if w.Accepted[unchecked.Name] {
				s.staleUnchecked++
			}
		}
		st := a.call(faultinject.Command{Op: "state"}, time.Minute)
		late := time.Duration(st.Deadline - evB.Ret)
		s.maxLate = max(s.maxLate, late)
		if late > 0 {
			s.late++
		}
		if c.kind != "etcd" { // the proxy cannot cut gRPC into requests
			s.bounded = true
			past := time.Duration(st.Deadline - (last + int64(c.ttl)))
			s.maxPast = max(s.maxPast, past)
			if past > 0 {
				s.past++
			}
		}
		t.Logf("trial %d: contender waited %v; A's deadline − B's grant = %v; A's writes %+v", trial, wait, late, evW.Writes)
		a.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		if ev := b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute); ev.Err != "" && recipe == "dlock" {
			t.Errorf("trial %d: B's unlock: %s", trial, ev.Err)
		}
	}
	s.leaks = a.close() + b.close()
	if s.leaks != "" && recipe == "dlock" {
		t.Errorf("holders leaked goroutines: %s", s.leaks)
	}
	return s
}
