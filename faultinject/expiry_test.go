package faultinject_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
	"github.com/dlockdev/dlock/internal/testing/faultproxy"
)

// Scenario 4. The server ends a holder's grant while the holder is healthy
// and connected: on Redis the lock's keys are deleted (as a lapsed TTL would
// remove them), on ZooKeeper the holder's session is closed from outside
// (Curator's KillSession), on etcd the holder's lease is revoked. The holder's Done must close within a TTL, and the
// holder must not silently take the key again: a contender gets it, and the
// holder's new session owns nothing.
//
// Negative controls: the weak build's Redis renew (a plain PEXPIRE that
// reports success on a missing key) must be caught with Done still open; the
// naive ZooKeeper recipe, which re-creates its node on a new session and
// renews by checking that a node exists, and the naive etcd recipe, which
// puts its key again when its lease is gone, must be caught likewise.
func TestScenario4_ForcedExpiry(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "zk", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				s := runForcedExpiry(t, newKindRig(t, kind, "dlock"), false, 2)
				ok := s.notClosed == 0 && s.reacquired == 0 && s.double == 0
				record(t, "4 forced expiry", kind, "dlock", verdict(ok),
					"Done closed %d/%d, %v after the expiry (max; bound TTL = %v); silent re-acquires %d; contender and old holder both holding %d",
					s.trials-s.notClosed, s.trials, s.maxDone.Round(time.Millisecond), s.ttl, s.reacquired, s.double)
				if !ok {
					t.Errorf("scenario 4 failed: %+v", s)
				}
			})
			variant, recipe, weak := "dlock_weak: renew by PEXPIRE", "dlock", true
			switch kind {
			case "zk":
				variant, recipe, weak = "naive recipe: re-create on a new session", "naive", false
			case "etcd":
				variant, recipe, weak = "naive recipe: renew puts the key again", "naive", false
			}
			t.Run(variant, func(t *testing.T) {
				s := runForcedExpiry(t, newKindRig(t, kind, recipe), weak, 1)
				record(t, "4 forced expiry", kind, variant, caught(s.notClosed > 0 || s.reacquired > 0),
					"Done still open %d/%d; silent re-acquires %d; contender and old holder both holding %d", s.notClosed, s.trials, s.reacquired, s.double)
				if s.notClosed == 0 && s.reacquired == 0 {
					t.Errorf("negative control missed: %+v", s)
				}
			})
		})
	}
}

type expiryStats struct {
	trials, notClosed, reacquired, double int
	maxDone, ttl                          time.Duration
}

func runForcedExpiry(t *testing.T, r *rig, weak bool, trials int) expiryStats {
	s := expiryStats{ttl: r.ttl}
	pa := r.proxy()
	handshakes := pa.Observe(func(f *faultproxy.Frame) bool { return !f.Up && f.Handshake })
	defer handshakes.Stop()
	a := r.holder("A", weak, pa)
	c := r.holder("C", weak)
	var session faultproxy.Frame
	latest := func() {
		for {
			select {
			case f := <-handshakes.C:
				if f.SessionID != 0 {
					session = f
				}
			default:
				return
			}
		}
	}
	for trial := range trials {
		key := r.key("s4")
		if ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute); !ev.Held {
			t.Fatalf("A could not take a free key: %s", ev.Err)
		}
		from := a.mark()
		locked := c.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 3*r.ttl + 20*time.Second})
		r.waitQueued(key, 2)

		forced := faultinject.Mono()
		switch r.kind {
		case "redis":
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := r.rdb.Del(ctx, r.redisKeys(key)[0]).Err()
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		case "etcd":
			r.revokeHolder(key)
		case "zk":
			latest()
			// Hold A's traffic meanwhile: reopening the session closes A's
			// connection, and A would reconnect and take the session back
			// before closeSession arrives.
			pa.Blackhole()
			err := faultinject.KillZKSession(r.addrs[0], session.SessionID, session.Passwd)
			pa.Restore()
			if err != nil {
				t.Fatalf("kill session 0x%x: %v", session.SessionID, err)
			}
		}
		s.trials++
		done, ok := a.awaitDone(from, r.ttl+2*time.Second, "A's Done")
		if ok {
			s.maxDone = max(s.maxDone, time.Duration(done.At-forced))
		} else {
			s.notClosed++
		}
		evC := c.await(locked, 3*r.ttl+time.Minute, "C waits for the key")
		if !evC.Held {
			s.reacquired++
			t.Logf("trial %d: the contender did not get the key: %s", trial, evC.Err)
		} else if st := a.call(faultinject.Command{Op: "state"}, time.Minute); st.Held {
			s.double++
		}
		if r.kind == "zk" && r.recipe == "dlock" {
			// Wait for A's new session, then look: only C's node may be there.
			old := session.SessionID
			deadline := time.After(30 * time.Second)
			for session.SessionID == old {
				select {
				case f := <-handshakes.C:
					if f.SessionID != 0 {
						session = f
					}
				case <-deadline:
					t.Fatalf("A got no new session within 30s")
				}
			}
			if left := r.leftovers(key); evC.Held && len(left) != 1 {
				s.reacquired++
				t.Logf("trial %d: nodes after A's new session: %v", trial, left)
			}
		}
		if ok {
			t.Logf("trial %d: Done %v after the forced expiry; contender got the key: %v", trial, time.Duration(done.At-forced), evC.Held)
		} else {
			t.Logf("trial %d: Done still open %v after the forced expiry; contender got the key: %v", trial, r.ttl+2*time.Second, evC.Held)
		}
		c.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		a.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	}
	if leaks := a.close() + c.close(); leaks != "" && r.recipe == "dlock" && !weak {
		t.Errorf("holders leaked goroutines: %s", leaks)
	}
	return s
}
