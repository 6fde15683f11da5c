package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// scrape gathers m from a registry of its own, as a scrape would, by
// metric name.
func scrape(t *testing.T, m *dlockprom.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return byName
}

// series returns the one series of family name whose labels are exactly
// labels, failing the test if there is none.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, s := range fams[name].GetMetric() {
		if labelsOf(s) == fmtLabels(labels) {
			return s
		}
	}
	var have []string
	for _, s := range fams[name].GetMetric() {
		have = append(have, labelsOf(s))
	}
	t.Fatalf("%s has no series %s; it has %q", name, fmtLabels(labels), have)
	return nil
}

func labelsOf(s *dto.Metric) string {
	l := map[string]string{}
	for _, p := range s.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return fmtLabels(l)
}

// fmtLabels writes labels as the exposition format does, sorted.
func fmtLabels(l map[string]string) string {
	var pairs []string
	for k, v := range l {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// events drives the hooks through one lease's life by calling them as a
// Client does: a waiting acquire granted, two renewals (one failed), and
// the lease's end.
type events struct {
	h       dlock.Hooks
	backend string
	key     string
	kind    dlock.Kind
}

func (e events) grant(wait bool, waited time.Duration) {
	ctx := e.h.AcquireStart(context.Background(), dlock.AcquireStartInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Limit: 1, Wait: wait})
	e.h.AcquireDone(ctx, dlock.AcquireDoneInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Limit: 1, Outcome: dlock.OutcomeAcquired, Waited: waited, Token: 1})
}

func (e events) fail(wait bool, outcome dlock.Outcome, err error) {
	ctx := e.h.AcquireStart(context.Background(), dlock.AcquireStartInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Limit: 1, Wait: wait})
	e.h.AcquireDone(ctx, dlock.AcquireDoneInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Limit: 1, Outcome: outcome, Waited: time.Millisecond, Err: err})
}

func (e events) renew(latency, late time.Duration, err error) {
	e.h.Renewed(context.Background(), dlock.RenewedInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Token: 1, Latency: latency, Late: late, Err: err})
}

func (e events) end(reason dlock.EndReason, held time.Duration) {
	e.h.LeaseEnded(context.Background(), dlock.LeaseEndedInfo{Backend: e.backend, Key: e.key, Kind: e.kind, Token: 1, Reason: reason, Held: held})
}

func TestMetrics_Hooks_leaseLife(t *testing.T) {
	m := dlockprom.New()
	e := events{h: m.Hooks(), backend: "redis", key: "jobs/nightly", kind: dlock.KindLock}

	// A waiter counts in dlock_waiters until its acquire ends.
	ctx := e.h.AcquireStart(context.Background(), dlock.AcquireStartInfo{Backend: "redis", Key: e.key, Kind: dlock.KindLock, Limit: 1, Wait: true})
	lock := map[string]string{"backend": "redis", "kind": "lock"}
	if v := series(t, scrape(t, m), "dlock_waiters", lock).GetGauge().GetValue(); v != 1 {
		t.Errorf("dlock_waiters = %v while an acquire waits, want 1", v)
	}
	e.h.AcquireDone(ctx, dlock.AcquireDoneInfo{Backend: "redis", Key: e.key, Kind: dlock.KindLock, Limit: 1, Outcome: dlock.OutcomeAcquired, Waited: 3 * time.Second, Token: 1})
	e.renew(2*time.Millisecond, 0, nil)
	e.renew(time.Second, 4*time.Second, errors.New("server unreachable"))
	fams := scrape(t, m)
	if v := series(t, fams, "dlock_waiters", lock).GetGauge().GetValue(); v != 0 {
		t.Errorf("dlock_waiters = %v after the grant, want 0", v)
	}
	if v := series(t, fams, "dlock_leases_active", lock).GetGauge().GetValue(); v != 1 {
		t.Errorf("dlock_leases_active = %v while held, want 1", v)
	}
	acq := series(t, fams, "dlock_acquire_duration_seconds", with(lock, "outcome", "acquired")).GetHistogram()
	if acq.GetSampleCount() != 1 || acq.GetSampleSum() != 3 {
		t.Errorf("acquire histogram: count %d sum %v, want 1 and 3", acq.GetSampleCount(), acq.GetSampleSum())
	}
	for _, reason := range []string{"expired", "dropped"} {
		// Present at 0 from the grant on, for increase() to see the first loss.
		if v := series(t, fams, "dlock_lease_lost_total", with(lock, "reason", reason)).GetCounter().GetValue(); v != 0 {
			t.Errorf("dlock_lease_lost_total{reason=%q} = %v before any loss, want 0", reason, v)
		}
	}
	for _, reason := range []string{"expired", "dropped", "hold_limit"} {
		if v := series(t, fams, "dlock_unprotected_total", with(lock, "reason", reason)).GetCounter().GetValue(); v != 0 {
			t.Errorf("dlock_unprotected_total{reason=%q} = %v before any unprotected run, want 0", reason, v)
		}
	}
	if n := series(t, fams, "dlock_renew_duration_seconds", with(lock, "result", "ok")).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("renewals ok: %d, want 1", n)
	}
	if n := series(t, fams, "dlock_renew_duration_seconds", with(lock, "result", "error")).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("renewals failed: %d, want 1", n)
	}
	late := series(t, fams, "dlock_renew_late_seconds", lock).GetHistogram()
	if late.GetSampleCount() != 2 || late.GetSampleSum() != 4 {
		t.Errorf("renew late histogram: count %d sum %v, want 2 and 4", late.GetSampleCount(), late.GetSampleSum())
	}

	e.end(dlock.EndExpired, 5*time.Second)
	e.h.Unprotected(context.Background(), dlock.UnprotectedInfo{Backend: "redis", Key: e.key, Kind: dlock.KindLock, Token: 1, Reason: dlock.EndExpired, Unprotected: time.Second})
	fams = scrape(t, m)
	if v := series(t, fams, "dlock_leases_active", lock).GetGauge().GetValue(); v != 0 {
		t.Errorf("dlock_leases_active = %v after the end, want 0", v)
	}
	if v := series(t, fams, "dlock_lease_lost_total", with(lock, "reason", "expired")).GetCounter().GetValue(); v != 1 {
		t.Errorf("dlock_lease_lost_total{reason=expired} = %v, want 1", v)
	}
	if h := series(t, fams, "dlock_hold_duration_seconds", with(lock, "reason", "expired")).GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 5 {
		t.Errorf("hold histogram: count %d sum %v, want 1 and 5", h.GetSampleCount(), h.GetSampleSum())
	}
	if v := series(t, fams, "dlock_unprotected_total", with(lock, "reason", "expired")).GetCounter().GetValue(); v != 1 {
		t.Errorf("dlock_unprotected_total = %v, want 1", v)
	}
}

// with returns a copy of labels with name=value added.
func with(labels map[string]string, name, value string) map[string]string {
	l := map[string]string{name: value}
	for k, v := range labels {
		l[k] = v
	}
	return l
}

func TestMetrics_Hooks_outcomes(t *testing.T) {
	m := dlockprom.New()
	e := events{h: m.Hooks(), backend: "etcd", key: "k", kind: dlock.KindSemaphore}
	e.fail(false, dlock.OutcomeSkipped, dlock.ErrLocked)
	e.fail(true, dlock.OutcomeCanceled, context.Canceled)
	e.fail(true, dlock.OutcomeTimeout, context.DeadlineExceeded)
	e.grant(false, time.Millisecond)
	e.end(dlock.EndHoldLimit, time.Minute)
	fams := scrape(t, m)
	sem := map[string]string{"backend": "etcd", "kind": "semaphore"}
	for _, outcome := range []string{"skipped", "canceled", "timeout", "acquired"} {
		if n := series(t, fams, "dlock_acquire_duration_seconds", with(sem, "outcome", outcome)).GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("acquires %s: %d, want 1", outcome, n)
		}
	}
	// Failed waits leave the gauge as they found it.
	if v := series(t, fams, "dlock_waiters", sem).GetGauge().GetValue(); v != 0 {
		t.Errorf("dlock_waiters = %v after the waits ended, want 0", v)
	}
	// Released at its maximum hold is no loss.
	for _, reason := range []string{"expired", "dropped"} {
		if v := series(t, fams, "dlock_lease_lost_total", with(sem, "reason", reason)).GetCounter().GetValue(); v != 0 {
			t.Errorf("dlock_lease_lost_total{reason=%q} = %v after a hold_limit end, want 0", reason, v)
		}
	}
	if n := series(t, fams, "dlock_hold_duration_seconds", with(sem, "reason", "hold_limit")).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("holds ended at the limit: %d, want 1", n)
	}
}

func TestWithKeyLabel(t *testing.T) {
	m := dlockprom.New(dlockprom.WithKeyLabel(dlockprom.KeyPrefix("/")))
	h := m.Hooks()
	for _, key := range []string{"reports/daily/1", "reports/daily/2", "billing/7"} {
		events{h: h, backend: "mem", key: key, kind: dlock.KindLock}.grant(true, time.Millisecond)
	}
	fams := scrape(t, m)
	for key, n := range map[string]float64{"reports": 2, "billing": 1} {
		l := map[string]string{"backend": "mem", "kind": "lock", "key": key}
		if v := series(t, fams, "dlock_leases_active", l).GetGauge().GetValue(); v != n {
			t.Errorf("dlock_leases_active{key=%q} = %v, want %v", key, v, n)
		}
	}
	if n := len(fams["dlock_leases_active"].GetMetric()); n != 2 {
		t.Errorf("dlock_leases_active has %d series, want 2 (one per prefix)", n)
	}
}

func TestKeyPrefix(t *testing.T) {
	for _, tc := range []struct{ sep, key, want string }{
		{"/", "reports/daily/2026-12-06", "reports"},
		{"/", "nightly-backup", "nightly-backup"},
		{":", "tenant:42:sync", "tenant"},
		{"/", "/leading", ""},
	} {
		if got := dlockprom.KeyPrefix(tc.sep)(tc.key); got != tc.want {
			t.Errorf("KeyPrefix(%q)(%q) = %q, want %q", tc.sep, tc.key, got, tc.want)
		}
	}
}

func TestMetrics_noKeyLabelByDefault(t *testing.T) {
	m := dlockprom.New()
	events{h: m.Hooks(), backend: "mem", key: "secret/customer-42", kind: dlock.KindLock}.grant(true, time.Millisecond)
	for name, fam := range scrape(t, m) {
		for _, s := range fam.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == "secret/customer-42" {
					t.Errorf("%s has the key as label %s", name, l.GetName())
				}
			}
		}
	}
}

func TestMetrics_leaderStatus(t *testing.T) {
	m := dlockprom.New()
	e := events{h: m.Hooks(), backend: "etcd", key: "scheduler", kind: dlock.KindElection}
	if _, ok := scrape(t, m)["leader_election_master_status"]; ok {
		t.Error("leader_election_master_status has a series before any election")
	}
	e.grant(true, time.Millisecond)
	leading := map[string]string{"name": "scheduler"}
	if v := series(t, scrape(t, m), "leader_election_master_status", leading).GetGauge().GetValue(); v != 1 {
		t.Errorf("leader_election_master_status = %v while leading, want 1", v)
	}
	e.end(dlock.EndDropped, time.Hour)
	fams := scrape(t, m)
	if v := series(t, fams, "leader_election_master_status", leading).GetGauge().GetValue(); v != 0 {
		t.Errorf("leader_election_master_status = %v after the term, want 0", v)
	}
	if v := series(t, fams, "dlock_lease_lost_total", map[string]string{"backend": "etcd", "kind": "election", "reason": "dropped"}).GetCounter().GetValue(); v != 1 {
		t.Errorf("lost leaderships: %v, want 1", v)
	}

	// A lock is no election, even of the same key.
	events{h: m.Hooks(), backend: "etcd", key: "other", kind: dlock.KindLock}.grant(true, time.Millisecond)
	if n := len(scrape(t, m)["leader_election_master_status"].GetMetric()); n != 1 {
		t.Errorf("leader_election_master_status has %d series after a lock's grant, want 1", n)
	}

	quiet := dlockprom.New(dlockprom.WithoutLeaderStatus())
	events{h: quiet.Hooks(), backend: "etcd", key: "scheduler", kind: dlock.KindElection}.grant(true, time.Millisecond)
	fams = scrape(t, quiet)
	if _, ok := fams["leader_election_master_status"]; ok {
		t.Error("WithoutLeaderStatus: leader_election_master_status is there")
	}
	if _, ok := fams["dlock_leases_active"]; !ok {
		t.Error("WithoutLeaderStatus: dlock_leases_active is missing")
	}
}

// TestMetrics_lint runs Prometheus's own checks of names, units and help
// texts over every metric, each with a series.
func TestMetrics_lint(t *testing.T) {
	m := dlockprom.New(dlockprom.WithKeyLabel(dlockprom.KeyPrefix("/")))
	e := events{h: m.Hooks(), backend: "mem", key: "a/b", kind: dlock.KindElection}
	e.grant(true, time.Millisecond)
	e.renew(time.Millisecond, 0, nil)
	e.end(dlock.EndDropped, time.Second)
	m.Hooks().Unprotected(context.Background(), dlock.UnprotectedInfo{Backend: "mem", Key: "a/b", Kind: dlock.KindElection, Reason: dlock.EndDropped})
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if n := len(scrape(t, m)); n != 9 {
		t.Errorf("%d metric families, want 9", n)
	}
}
