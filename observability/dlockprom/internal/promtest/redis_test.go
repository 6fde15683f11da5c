package promtest_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockdev/dlock"
	"github.com/dlockdev/dlock/internal/testing/testserver"
	"github.com/dlockdev/dlock/observability/dlockprom"
	"github.com/dlockdev/dlock/redisdlock"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// waitBound bounds every wait for an event of the scenario: far beyond what
// any takes, so that only a broken feature reaches it.
const waitBound = 20 * time.Second

// signals are hooks after dlockprom's that tell the test when an event has
// been reported, so that it waits for events, not for time.
type signals struct {
	waiting chan struct{} // a waiting acquire began
	renewed chan struct{} // a renewal succeeded
}

func (s *signals) hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: func(ctx context.Context, info dlock.AcquireStartInfo) context.Context {
			if info.Wait {
				notify(s.waiting)
			}
			return ctx
		},
		Renewed: func(_ context.Context, info dlock.RenewedInfo) {
			if info.Err == nil {
				notify(s.renewed)
			}
		},
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitBound):
		t.Fatalf("no %s within %v", what, waitBound)
	}
}

// scrape renders m in Prometheus's text exposition format, as /metrics
// serves it, and parses that back.
func scrape(t *testing.T, m *dlockprom.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := p.TextToMetricFamilies(&text)
	if err != nil {
		t.Fatalf("parse the exposition: %v\n%s", err, text.String())
	}
	return parsed
}

// value returns the value of the series of name with exactly the labels
// given (a histogram's count), or -1 when there is no such series.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	for _, s := range fams[name].GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.GetHistogram() != nil:
			return float64(s.GetHistogram().GetSampleCount())
		case s.GetCounter() != nil:
			return s.GetCounter().GetValue()
		default:
			return s.GetGauge().GetValue()
		}
	}
	return -1
}

// hasLabels reports whether s has exactly the labels of pairs (name,
// value, name, value...).
func hasLabels(s *dto.Metric, pairs []string) bool {
	if len(s.GetLabel()) != len(pairs)/2 {
		return false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		want[pairs[i]] = pairs[i+1]
	}
	for _, l := range s.GetLabel() {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// TestMetrics_redisScenario scripts a lock's life on a real redis-server
// with dlockprom attached, and checks what a scrape shows: grants and
// their holds, a skipped NoWait run, a cancelled wait, renewals, a lease
// lost to the key's deletion and the Do that ran on without it, and an
// election led and lost.
func TestMetrics_redisScenario(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	m := dlockprom.New()
	sig := &signals{waiting: make(chan struct{}, 1), renewed: make(chan struct{}, 1)}
	newClient := func(opts ...dlock.Option) *dlock.Client {
		t.Helper()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := redisdlock.New(ctx, rdb, &redisdlock.Options{ClientOptions: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	client := newClient(dlock.WithHooks(m.Hooks()), dlock.WithHooks(sig.hooks()), dlock.WithTTL(300*time.Millisecond))
	other := newClient() // reports nothing: not ours to count

	const grants = 3
	for range grants {
		l, err := client.Lock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if got := value(scrape(t, m), "dlock_leases_active", "backend", "redis", "kind", "lock"); got != 1 {
			t.Errorf("dlock_leases_active = %v while held, want 1", got)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Another instance holds the job: a NoWait run skips it, and a waiting
	// one is cancelled while it waits.
	held, err := other.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = client.Do(ctx, "job", func(context.Context) error { ran = true; return nil }, dlock.NoWait())
	if !errors.Is(err, dlock.ErrLocked) || ran {
		t.Fatalf("NoWait Do on a held key: ran=%v err=%v, want a skip with ErrLocked", ran, err)
	}
	drain(sig.waiting) // the grants' acquires waited too
	wctx, cancel := context.WithCancel(ctx)
	waitErr := make(chan error, 1)
	go func() {
		_, err := client.Lock(wctx, "job")
		waitErr <- err
	}()
	await(t, sig.waiting, "waiting acquire")
	if got := value(scrape(t, m), "dlock_waiters", "backend", "redis", "kind", "lock"); got != 1 {
		t.Errorf("dlock_waiters = %v while a Lock waits, want 1", got)
	}
	cancel()
	if err := <-waitErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A Do whose lease is dropped: the key is deleted behind its back
	// after a renewal, and the job runs on until it sees the loss.
	drain(sig.renewed)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	err = client.Do(ctx, "job", func(jctx context.Context) error {
		await(t, sig.renewed, "successful renewal")
		if err := admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
		select {
		case <-jctx.Done():
		case <-time.After(waitBound):
			return errors.New("the lease outlived the deletion of its key")
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Fatalf("Do whose key was deleted: %v, want ErrLeaseLost", err)
	}

	// An election won, then resigned.
	el := client.Election("leader")
	lead, err := el.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, m), "leader_election_master_status", "name", "leader"); got != 1 {
		t.Errorf("leader_election_master_status = %v while leading, want 1", got)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, m)
	lock := []string{"backend", "redis", "kind", "lock"}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dlock_acquire_duration_seconds", append(lock, "outcome", "acquired"), grants + 1},
		{"dlock_acquire_duration_seconds", append(lock, "outcome", "skipped"), 1},
		{"dlock_acquire_duration_seconds", append(lock, "outcome", "canceled"), 1},
		{"dlock_hold_duration_seconds", append(lock, "reason", "released"), grants},
		{"dlock_hold_duration_seconds", append(lock, "reason", "dropped"), 1},
		{"dlock_lease_lost_total", append(lock, "reason", "dropped"), 1},
		{"dlock_lease_lost_total", append(lock, "reason", "expired"), 0},
		{"dlock_unprotected_total", append(lock, "reason", "dropped"), 1},
		{"dlock_leases_active", lock, 0},
		{"dlock_waiters", lock, 0},
		{"leader_election_master_status", []string{"name", "leader"}, 0},
		{"dlock_acquire_duration_seconds", []string{"backend", "redis", "kind", "election", "outcome", "acquired"}, 1},
	} {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%q = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value(fams, "dlock_renew_duration_seconds", append(lock, "result", "ok")...); got < 1 {
		t.Errorf("successful renewals counted: %v, want at least 1", got)
	}
	if got := value(fams, "dlock_renew_late_seconds", lock...); got < 1 {
		t.Errorf("renewal lateness observed: %v times, want at least 1", got)
	}
	// The waits moved the acquire histogram's sum: it is time, not a count.
	for _, s := range fams["dlock_acquire_duration_seconds"].GetMetric() {
		if hasLabels(s, append(lock, "outcome", "canceled")) && s.GetHistogram().GetSampleSum() <= 0 {
			t.Errorf("the cancelled wait took %vs, want more than 0", s.GetHistogram().GetSampleSum())
		}
	}
}
