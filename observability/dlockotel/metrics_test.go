package dlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
)

// A scripted scenario on two backends, the hooks called as Clients would:
// the metrics' values at two moments.
func TestHooks_metrics(t *testing.T) {
	h := newHarness(t)
	hooks := h.in.Hooks()
	ctx := context.Background()
	lock := func(backend string, wait bool) dlock.AcquireStartInfo {
		return dlock.AcquireStartInfo{Backend: backend, Key: "k", Kind: dlock.KindLock, Mode: dlock.Exclusive, Limit: 1, Wait: wait}
	}
	done := func(backend string, o dlock.Outcome, waited time.Duration, token uint64) dlock.AcquireDoneInfo {
		return dlock.AcquireDoneInfo{Backend: backend, Key: "k", Kind: dlock.KindLock, Mode: dlock.Exclusive, Limit: 1, Outcome: o, Waited: waited, Token: token}
	}
	ended := func(backend string, r dlock.EndReason, held time.Duration) dlock.LeaseEndedInfo {
		return dlock.LeaseEndedInfo{Backend: backend, Key: "k", Kind: dlock.KindLock, Mode: dlock.Exclusive, Reason: r, Held: held}
	}
	renewed := func(backend string, latency time.Duration, err error) dlock.RenewedInfo {
		return dlock.RenewedInfo{Backend: backend, Key: "k", Kind: dlock.KindLock, Mode: dlock.Exclusive, Latency: latency, Err: err}
	}
	redis := attrs{"dlock.backend": "redis", "dlock.primitive": "lock"}

	// Two Locks wait on redis, a TryLock is in flight; one Lock is
	// granted, holds and renews.
	w1 := hooks.AcquireStart(ctx, lock("redis", true))
	w2 := hooks.AcquireStart(ctx, lock("redis", true))
	try := hooks.AcquireStart(ctx, lock("redis", false))
	rm := h.collect(t)
	if got, mono := sum(t, rm, "dlock.waiters", redis); got != 2 || mono {
		t.Errorf("dlock.waiters = %d (monotonic %v) with two Locks and a TryLock started, want 2, an up-down counter", got, mono)
	}
	hooks.AcquireDone(try, done("redis", dlock.OutcomeSkipped, time.Millisecond, 0))
	l1 := hooks.AcquireDone(w1, done("redis", dlock.OutcomeAcquired, 2*time.Second, 1))
	hooks.Renewed(l1, renewed("redis", 10*time.Millisecond, nil))
	hooks.Renewed(l1, renewed("redis", 30*time.Millisecond, dlock.ErrUnavailable))
	// On etcd a lease is granted and held on.
	hooks.AcquireDone(hooks.AcquireStart(ctx, lock("etcd", true)), done("etcd", dlock.OutcomeAcquired, time.Millisecond, 9))

	rm = h.collect(t)
	if got, _ := sum(t, rm, "dlock.waiters", redis); got != 1 {
		t.Errorf("dlock.waiters = %d with one Lock still waiting, want 1", got)
	}
	if got, mono := sum(t, rm, "dlock.leases.active", redis); got != 1 || mono {
		t.Errorf("dlock.leases.active{redis} = %d (monotonic %v), want 1, an up-down counter", got, mono)
	}
	if got, _ := sum(t, rm, "dlock.leases.active", attrs{"dlock.backend": "etcd", "dlock.primitive": "lock"}); got != 1 {
		t.Errorf("dlock.leases.active{etcd} = %d, want 1", got)
	}

	// The first lease is lost, the waiter times out and a third Lock takes
	// the key and releases it.
	hooks.LeaseEnded(l1, ended("redis", dlock.EndExpired, 5*time.Second))
	hooks.AcquireDone(w2, done("redis", dlock.OutcomeTimeout, 10*time.Second, 0))
	l3 := hooks.AcquireDone(hooks.AcquireStart(ctx, lock("redis", true)), done("redis", dlock.OutcomeAcquired, 500*time.Millisecond, 2))
	hooks.LeaseEnded(l3, ended("redis", dlock.EndReleased, time.Second))

	rm = h.collect(t)
	for _, c := range []struct {
		metric string
		attrs  attrs
		count  uint64
		sum    float64
	}{
		{"dlock.acquire.duration", with(redis, "dlock.outcome", "acquired"), 2, 2.5},
		{"dlock.acquire.duration", with(redis, "dlock.outcome", "skipped"), 1, 0.001},
		{"dlock.acquire.duration", with(redis, "dlock.outcome", "timeout"), 1, 10},
		{"dlock.hold.duration", with(redis, "dlock.reason", "expired"), 1, 5},
		{"dlock.hold.duration", with(redis, "dlock.reason", "released"), 1, 1},
		{"dlock.renew.duration", with(redis, "dlock.renew.outcome", "renewed"), 1, 0.01},
		{"dlock.renew.duration", with(redis, "dlock.renew.outcome", "failed"), 1, 0.03},
	} {
		if n, s := histogram(t, rm, c.metric, c.attrs); n != c.count || !near(s, c.sum) {
			t.Errorf("%s%v: %d measurements, sum %v; want %d, %v", c.metric, c.attrs, n, s, c.count, c.sum)
		}
	}
	for _, c := range []struct {
		metric string
		attrs  attrs
		value  int64
	}{
		{"dlock.waiters", redis, 0},
		{"dlock.leases.active", redis, 0},
		{"dlock.leases.active", attrs{"dlock.backend": "etcd", "dlock.primitive": "lock"}, 1},
		{"dlock.lease.lost", with(redis, "dlock.reason", "expired"), 1},
	} {
		if got, _ := sum(t, rm, c.metric, c.attrs); got != c.value {
			t.Errorf("%s%v = %d, want %d", c.metric, c.attrs, got, c.value)
		}
	}
	if got, mono := sum(t, rm, "dlock.lease.lost", with(redis, "dlock.reason", "released")); got != 0 || !mono {
		t.Errorf("dlock.lease.lost{released} = %d (monotonic %v), want 0, a counter: a release is no loss", got, mono)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
