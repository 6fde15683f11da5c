package faultinject_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
)

// Scenario 2. The reply to an acquire request (the Redis acquire script, the
// ZooKeeper create) is dropped after the server acted on it, and the
// connection is closed: the client retries on a new one. The retry must find
// its own grant or queue entry: no orphan key or node is left once the
// caller is done, and no acquisition is blocked by its own lost request.
// Two cases: TryLock on a free key (the lost reply is a grant), and Lock
// behind a holder (the lost reply is a place in the queue).
//
// Negative control: the naive recipes (SET NX; create of a fixed node, both
// retried blindly) must be caught with orphans and self-blocked calls.
func TestScenario2_LostAcquireReply(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "zk", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				s := runLostAcquire(t, newKindRig(t, kind, "dlock"), 3, 2)
				ok := s.orphans == 0 && s.selfBlocked == 0
				record(t, "2 lost acquire reply", kind, "dlock", verdict(ok),
					"orphan keys/nodes %d, self-blocked acquisitions %d, of %d acquisitions with the reply dropped", s.orphans, s.selfBlocked, s.trials)
				if !ok {
					t.Errorf("scenario 2 failed: %+v", s)
				}
			})
			t.Run("naive", func(t *testing.T) {
				// The naive recipe's orphan lasts as long as its lease
				// (Redis, etcd) or session (ZooKeeper): a long one, so that
				// it is still there when the trial looks, however slow
				// the machine is between the drop and the look.
				s := runLostAcquire(t, newKindRigTTL(t, kind, "naive", naiveOrphanTTL), 2, 0)
				record(t, "2 lost acquire reply", kind, "naive recipe: blind retry", caught(s.orphans > 0 && s.selfBlocked > 0),
					"orphan keys/nodes %d, self-blocked acquisitions %d, of %d", s.orphans, s.selfBlocked, s.trials)
				if s.orphans == 0 || s.selfBlocked == 0 {
					t.Errorf("negative control missed: %+v", s)
				}
			})
		})
	}
}

// newKindRig makes the default rig of a backend for the short scenarios.
func newKindRig(t *testing.T, kind, recipe string) *rig {
	t.Helper()
	switch kind {
	case "redis":
		return newRedisRig(t, recipe, time.Second)
	case "zk":
		return newZKRig(t, recipe, 1500*time.Millisecond)
	}
	return newOtherRig(t, kind, recipe)
}

// newKindRigTTL makes a rig of a backend with leases of ttl.
func newKindRigTTL(t *testing.T, kind, recipe string, ttl time.Duration) *rig {
	t.Helper()
	switch kind {
	case "redis":
		return newRedisRig(t, recipe, ttl)
	case "zk":
		return newZKRig(t, recipe, ttl)
	}
	return newEtcdRig(t, recipe, ttl)
}

// naiveOrphanTTL is the lease of the naive recipe in scenario 2: far longer
// than a trial takes, so that the negative control cannot miss its orphan.
const naiveOrphanTTL = 30 * time.Second

type lostAcquireStats struct{ trials, orphans, selfBlocked int }

// count counts a trial in which holder a's call (TryLock or Lock) on key
// lost its reply and returned ev: a releases the key if it got it, or was
// blocked by itself; whatever the attempt left on the server is an orphan.
func (s *lostAcquireStats) count(t *testing.T, r *rig, a *proc, ev faultinject.Event, key, trial, call string) {
	t.Helper()
	s.trials++
	if ev.Held {
		a.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	} else {
		s.selfBlocked++
		t.Logf("%s: %s with its reply dropped: %s", trial, call, ev.Err)
	}
	if left := r.leftovers(key); len(left) > 0 {
		s.orphans++
		t.Logf("%s: left on the server: %v", trial, left)
	}
}

func runLostAcquire(t *testing.T, r *rig, free, behind int) lostAcquireStats {
	pa := r.proxy()
	a := r.holder("A", false, pa)
	b := r.holder("B", false)
	var s lostAcquireStats
	for i := range free {
		key := r.key("s2")
		d := r.arm(a, pa, "acquire", false)
		ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute)
		d.fired(time.Second, "A's acquire")
		s.count(t, r, a, ev, key, fmt.Sprintf("free key %d", i), "TryLock")
	}
	for i := range behind {
		key := r.key("s2q")
		if ev := b.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute); !ev.Held {
			t.Fatalf("B could not take a free key: %s", ev.Err)
		}
		d := r.arm(a, pa, "acquire", false)
		locked := a.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 20 * time.Second})
		d.fired(15*time.Second, "A's queueing")
		r.waitQueued(key, 2)
		b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		ev := a.await(locked, time.Minute, "A waits behind B")
		s.count(t, r, a, ev, key, fmt.Sprintf("queued %d", i), "Lock")
	}
	if leaks := a.close() + b.close(); leaks != "" && r.recipe == "dlock" {
		t.Errorf("holders leaked goroutines: %s", leaks)
	}
	return s
}
