package faultinject_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock/faultinject"
)

// Scenario 3. The reply to a release (or renew) is dropped after the server
// acted on it; the client's retry is held back until the key has passed to
// another holder, then delivered. The retry must not release or extend the
// new holder's grant: a third client still finds the key held, and (renew)
// the new grant keeps its own TTL.
//
// Negative controls: the weak build (redisdlock releases with a plain DEL
// and renews with a plain PEXPIRE) and the naive recipes (DEL; delete of a
// fixed node; delete of a fixed etcd key) must be caught releasing or
// extending the new grant. On ZooKeeper a renewal only reads (sync,
// exists), on etcd it keeps the caller's own lease alive: neither can act
// on another grant, so they have no renew case. On etcd the reply is
// dropped inside the holder (a gRPC interceptor), since the proxy cannot
// cut HTTP/2 into requests.
func TestScenario3_LostReleaseReply(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "zk", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Run("dlock", func(t *testing.T) {
				r := newKindRig(t, kind, "dlock")
				s := runLostRelease(t, r, false, 2)
				ok := s.wrongful == 0
				if kind == "redis" {
					rn := runLostRenew(t, r, false, 1)
					ok = ok && rn.wrongful == 0
					record(t, "3 lost release/renew reply", kind, "dlock", verdict(ok),
						"wrongful releases of the new grant %d/%d, wrongful renewals %d/%d", s.wrongful, s.trials, rn.wrongful, rn.trials)
				} else {
					record(t, "3 lost release/renew reply", kind, "dlock", verdict(ok),
						"wrongful releases of the new grant %d/%d (%s)", s.wrongful, s.trials, noRenewCase[kind])
				}
				if !ok {
					t.Errorf("scenario 3 failed")
				}
			})
			if kind == "redis" {
				t.Run("dlock_weak", func(t *testing.T) {
					r := newKindRig(t, kind, "dlock")
					s := runLostRelease(t, r, true, 1)
					rn := runLostRenew(t, r, true, 1)
					record(t, "3 lost release/renew reply", kind, "dlock_weak: release by DEL, renew by PEXPIRE", caught(s.wrongful > 0 && rn.wrongful > 0),
						"wrongful releases %d/%d, wrongful renewals %d/%d", s.wrongful, s.trials, rn.wrongful, rn.trials)
					if s.wrongful == 0 || rn.wrongful == 0 {
						t.Errorf("negative control missed")
					}
				})
			}
			t.Run("naive", func(t *testing.T) {
				s := runLostRelease(t, newKindRig(t, kind, "naive"), false, 1)
				record(t, "3 lost release/renew reply", kind, "naive recipe: delete whatever is there", caught(s.wrongful > 0),
					"wrongful releases %d/%d", s.wrongful, s.trials)
				if s.wrongful == 0 {
					t.Errorf("negative control missed")
				}
			})
		})
	}
}

type wrongStats struct{ trials, wrongful int }

// noRenewCase says why a backend has no lost-renew case.
var noRenewCase = map[string]string{
	"zk":   "renew is read-only (a sync, and reads of lock nodes): it cannot act on another grant",
	"etcd": "renew is a keep-alive of the caller's own etcd lease: it cannot act on another grant",
}

// checkNewGrant counts the new holder's grant as wrongfully released when a
// third client can take the key while the new holder still holds it.
func checkNewGrant(t *testing.T, key string, b, c *proc) bool {
	t.Helper()
	if st := b.call(faultinject.Command{Op: "state"}, time.Minute); !st.Held {
		t.Logf("the new holder lost its lease: %s", st.Err)
	}
	ev := c.call(faultinject.Command{Op: "lock", Key: key, Timeout: 10 * time.Second}, time.Minute)
	if ev.Held {
		c.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		return true
	}
	return false
}

// queueBehind has a take the free key and b queue for it; it returns b's
// pending lock.
func queueBehind(t *testing.T, r *rig, a, b *proc, key string) <-chan faultinject.Event {
	t.Helper()
	if ev := a.call(faultinject.Command{Op: "lock", Key: key, Timeout: 15 * time.Second}, time.Minute); !ev.Held {
		t.Fatalf("A could not take a free key: %s", ev.Err)
	}
	locked := b.send(faultinject.Command{Op: "lock", Key: key, Wait: true, Timeout: 30 * time.Second})
	r.waitQueued(key, 2)
	return locked
}

// passThenRetry waits until the key has passed to b (locked is b's pending
// lock) while A's retries of its lost what (release or renew) are held, then
// lets them go; it returns how many were answered.
func passThenRetry(t *testing.T, b *proc, locked <-chan faultinject.Event, d *armed, what string) int {
	t.Helper()
	if ev := b.await(locked, time.Minute, "B waits for the key"); !ev.Held {
		t.Fatalf("the key did not pass to B after A's %s: %s", what, ev.Err)
	}
	d.restore()
	return d.answered(30 * time.Second)
}

// newGrantTTL is the lease of the new holder B in scenario 3: long, so that
// only a wrongful release or renewal can end B's grant while the trial
// looks. With the rig's TTL, a B starved on a busy machine could lose its
// grant by itself, and C's lock would count as a wrongful release.
const newGrantTTL = 20 * time.Second

func runLostRelease(t *testing.T, r *rig, weak bool, trials int) wrongStats {
	pa := r.proxy()
	a := r.holder("A", weak, pa)
	b := r.holderTTL("B", weak, newGrantTTL)
	c := r.holder("C", weak)
	var s wrongStats
	for range trials {
		key := r.key("s3")
		locked := queueBehind(t, r, a, b, key)
		d := r.arm(a, pa, "release", true)
		unlocked := a.send(faultinject.Command{Op: "unlock", Timeout: 20 * time.Second})
		d.fired(15*time.Second, "A's release")
		n := passThenRetry(t, b, locked, d, "release")
		ev := a.await(unlocked, time.Minute, "A's unlock")
		t.Logf("A's unlock after the lost reply: %q; retried releases answered: %d", ev.Err, n)
		s.trials++
		if checkNewGrant(t, key, b, c) {
			s.wrongful++
		}
		b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	}
	if leaks := a.close() + b.close() + c.close(); leaks != "" && r.recipe == "dlock" && !weak {
		t.Errorf("holders leaked goroutines: %s", leaks)
	}
	return s
}

// runLostRenew: A (TTL 1 s) loses a renew reply and its retries are held
// until its key has expired and passed to B (TTL 20 s).
func runLostRenew(t *testing.T, r *rig, weak bool, trials int) wrongStats {
	const bTTL = newGrantTTL
	pa := r.proxy()
	a := r.holder("A", weak, pa)
	b := r.holderTTL("B", weak, bTTL)
	c := r.holder("C", weak)
	var s wrongStats
	for range trials {
		key := r.key("s3r")
		locked := queueBehind(t, r, a, b, key)
		d := r.arm(a, pa, "renew", true)
		d.fired(15*time.Second, "A's renew")
		n := passThenRetry(t, b, locked, d, "renew")
		s.trials++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pttl, err := r.rdb.PTTL(ctx, r.redisKeys(key)[0]).Result()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		extended := pttl <= r.ttl
		t.Logf("retried renewals answered: %d; B's key expires in %v (B's TTL %v, A's %v)", n, pttl, bTTL, r.ttl)
		if extended || checkNewGrant(t, key, b, c) {
			s.wrongful++
		}
		b.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
		a.call(faultinject.Command{Op: "unlock", Timeout: 10 * time.Second}, time.Minute)
	}
	if leaks := a.close() + b.close() + c.close(); leaks != "" && !weak {
		t.Errorf("holders leaked goroutines: %s", leaks)
	}
	return s
}
