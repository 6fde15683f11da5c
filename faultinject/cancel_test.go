package faultinject_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
)

// Scenario 6. Waiters in two processes cancel their Lock calls at random
// moments while contending for one key (before queueing, while queued, as
// the key reaches them); then, deterministically, a queued waiter cancels
// while the holder still holds. Afterwards the server must keep no waiter
// entry, and the next waiter must get the free key at once instead of
// waiting for a ghost entry to expire (a waiter timeout on Redis, a session
// timeout on ZooKeeper, a lease on etcd).
//
// Negative control: a waiter that goes away without cancelling (SIGKILL: no
// cleanup runs) must be caught as a leftover entry that stalls the next
// waiter.
func TestScenario6_CancelledWaits(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "zk", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			r := newKindRig(t, kind, "dlock")
			ghostLife := redisWaiterTimeout
			if kind != "redis" {
				ghostLife = r.ttl // the session, or the waiter's lease
			}
			stuck := ghostLife / 2
			t.Run("dlock", func(t *testing.T) {
				s := runCancels(t, r, stuck)
				ok := s.leftovers == 0 && s.maxNext < stuck && len(s.errors) == 0
				record(t, "6 cancelled waits", kind, "dlock", verdict(ok),
					"%d waits cancelled at random points (%d acquired); leftover waiter entries %d; next waiter got the free key after %v (max; a ghost would hold it up to %v)",
					s.cancelled, s.acquired, s.leftovers, s.maxNext.Round(time.Millisecond), ghostLife)
				if !ok {
					t.Errorf("scenario 6 failed: %+v", s)
				}
			})
			t.Run("ghost", func(t *testing.T) {
				left, next := runGhost(t, r)
				record(t, "6 cancelled waits", kind, "waiter killed instead of cancelling (no cleanup)", caught(left > 0 && next >= stuck),
					"leftover entries %d; next waiter got the free key after %v (the killed waiter's entry lasts %v; threshold %v)",
					left, next.Round(time.Millisecond), ghostFactor*ghostLife, stuck)
				if left == 0 || next < stuck {
					t.Errorf("negative control missed: %d leftovers, next waiter after %v", left, next)
				}
			})
		})
	}
}

type cancelStats struct {
	cancelled, acquired, leftovers int
	maxNext                        time.Duration
	errors                         []string
}

// nextWaiter times a fresh Lock on key, which should be free.
func nextWaiter(t *testing.T, f *proc, key string) time.Duration {
	t.Helper()
	ev := f.call(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 30 * time.Second}, time.Minute)
	if !ev.Held {
		t.Fatalf("the next waiter did not get the key: %s", ev.Err)
	}
	f.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	return time.Duration(ev.Ret - ev.Call)
}

func runCancels(t *testing.T, r *rig, stuck time.Duration) cancelStats {
	var s cancelStats
	w1, w2 := r.holder("W1", false), r.holder("W2", false)
	h, g, f := r.holder("H", false), r.holder("G", false), r.holder("F", false)
	count := func(key string) {
		if left := r.leftovers(key); len(left) > 0 {
			s.leftovers += len(left)
			t.Logf("left on the server: %v", left)
		}
		s.maxNext = max(s.maxNext, nextWaiter(t, f, key))
	}
	// Random points: two processes, four workers each.
	for round := range 2 {
		key := r.key(fmt.Sprintf("s6r%d", round))
		c := faultinject.Command{Op: "contend", Key: key, Workers: 4, Rounds: 8, CancelMax: 400 * time.Millisecond, Hold: 20 * time.Millisecond}
		e1, e2 := w1.send(c), w2.send(c)
		for _, ev := range []faultinject.Event{w1.await(e1, 2*time.Minute, "contend"), w2.await(e2, 2*time.Minute, "contend")} {
			s.cancelled += ev.Cancelled
			s.acquired += ev.Acquired
			s.errors = append(s.errors, ev.Errors...)
		}
		count(key)
	}
	// A queued waiter cancels while the key is held.
	for range 2 {
		key := r.key("s6q")
		if ev := h.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute); !ev.Held {
			t.Fatalf("H could not take a free key: %s", ev.Err)
		}
		waiting := g.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: time.Minute})
		r.waitQueued(key, 2)
		g.call(faultinject.Command{Op: "cancel"}, time.Minute)
		if ev := g.await(waiting, time.Minute, "G's cancelled wait"); ev.Kind != "canceled" {
			t.Fatalf("G's wait after cancel: held %v, %s", ev.Held, ev.Err)
		}
		s.cancelled++
		h.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		count(key)
	}
	for _, p := range []*proc{w1, w2, h, g, f} {
		if leaks := p.close(); leaks != "" {
			t.Errorf("holder %s leaked goroutines: %s", p.name, leaks)
		}
	}
	return s
}

// ghostFactor is how many times longer than the other holders' the killed
// waiter's entry lasts (its Redis waiter timeout and lease, its ZooKeeper
// session, its etcd lease). With the rig's own, the entry could expire, on
// a slow machine, before the holder's release or the next waiter reached
// the server, and the negative control would miss by chance; with three
// times as long, the next waiter is held up for several times the
// threshold (stuck) whatever the load.
const ghostFactor = 3

// runGhost: a queued waiter is killed; the holder releases; what is left,
// and how long does the next waiter wait?
func runGhost(t *testing.T, r *rig) (int, time.Duration) {
	h, f := r.holder("H", false), r.holder("F", false)
	g := startHolder(t, faultinject.HolderConfig{Name: "G", Backend: r.kind, Addrs: r.addrs, TTL: ghostFactor * r.ttl,
		WaiterTimeout: ghostFactor * redisWaiterTimeout, Resource: r.res.Addr(), Targets: r.targets}, false)
	key := r.key("s6g")
	if ev := h.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute); !ev.Held {
		t.Fatalf("H could not take a free key: %s", ev.Err)
	}
	g.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: time.Minute})
	r.waitQueued(key, 2)
	g.kill()
	h.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	left := len(r.leftovers(key))
	next := nextWaiter(t, f, key)
	h.close()
	f.close()
	return left, next
}
