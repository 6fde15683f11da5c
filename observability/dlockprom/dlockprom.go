package dlockprom

import (
	"context"

	"github.com/dlockdev/dlock"
	"github.com/prometheus/client_golang/prometheus"
)

// The buckets of the histograms, in seconds.
var (
	// acquireBuckets span a grant on a local server (under a millisecond)
	// to a wait behind a long job (ten minutes); the alerts' p99 needs
	// resolution at both ends.
	acquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// holdBuckets span a short critical section (10ms) to a leadership
	// term or a nightly job (a day).
	holdBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600}
	// renewBuckets are round trips to the server: a local one in under a
	// millisecond, a slow one in seconds, which a TTL of 10s cannot
	// afford.
	renewBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// lateBuckets: a healthy process sends a renewal within a
	// millisecond or so of its moment; seconds late is a pause that
	// threatens a lease of the default TTL (10s, renewed every 3.3s).
	lateBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// Metrics collects the events of the leases of the Clients given its Hooks.
// It implements prometheus.Collector. It is safe for concurrent use, and
// serves any number of Clients.
type Metrics struct {
	keyLabel func(key string) string

	acquire     *prometheus.HistogramVec
	waiters     *prometheus.GaugeVec
	active      *prometheus.GaugeVec
	hold        *prometheus.HistogramVec
	lost        *prometheus.CounterVec
	renew       *prometheus.HistogramVec
	late        *prometheus.HistogramVec
	unprotected *prometheus.CounterVec
	leader      *prometheus.GaugeVec // nil with WithoutLeaderStatus

	collectors []prometheus.Collector
}

// New returns Metrics, configured by opts, that no Client reports to yet:
// pass its Hooks to dlock.WithHooks, and register it with a
// prometheus.Registerer.
func New(opts ...Option) *Metrics {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	m := &Metrics{keyLabel: cfg.keyLabel}
	// labels are the labels of every dlock_ metric, then each one's own.
	labels := func(own ...string) []string {
		l := append([]string{"backend", "kind"}, own...)
		if cfg.keyLabel != nil {
			l = append(l, "key")
		}
		return l
	}
	m.acquire = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlock_acquire_duration_seconds",
		Help:    "Time an acquiring call (Lock, TryLock, Do, Acquire, Campaign...) took, waiting included, by how it ended.",
		Buckets: acquireBuckets,
	}, labels("outcome"))
	m.waiters = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dlock_waiters",
		Help: "Acquiring calls in flight that wait for the key (not TryLock or NoWait).",
	}, labels())
	m.active = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dlock_leases_active",
		Help: "Leases granted and not yet ended.",
	}, labels())
	m.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlock_hold_duration_seconds",
		Help:    "Time from a lease's grant to its end, by why it ended.",
		Buckets: holdBuckets,
	}, labels("reason"))
	m.lost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlock_lease_lost_total",
		Help: "Leases lost: expired (no renewal succeeded in time) or dropped (the server said the grant is gone).",
	}, labels("reason"))
	m.renew = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlock_renew_duration_seconds",
		Help:    "Round trip of each renewal of a held lease, by whether the server extended it.",
		Buckets: renewBuckets,
	}, labels("result"))
	m.late = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlock_renew_late_seconds",
		Help:    "How long after its scheduled moment each renewal was sent: large when the process was paused or starved of CPU.",
		Buckets: lateBuckets,
	}, labels())
	m.unprotected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlock_unprotected_total",
		Help: "Runs of Do whose function went on after its lease ended.",
	}, labels("reason"))
	m.collectors = []prometheus.Collector{m.acquire, m.waiters, m.active, m.hold, m.lost, m.renew, m.late, m.unprotected}
	if !cfg.noLeader {
		m.leader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leader_election_master_status",
			Help: "1 while this process leads the election name, 0 after (as client-go's leader election reports it).",
		}, []string{"name"})
		m.collectors = append(m.collectors, m.leader)
	}
	return m
}

// Describe sends the descriptors of the metrics to ch
// (prometheus.Collector).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect sends the metrics' current values to ch (prometheus.Collector).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// values writes the label values of a dlock_ metric into lv: backend,
// kind, the metric's own, then the key's label when WithKeyLabel asked for
// it. The caller's array keeps them off the heap: WithLabelValues does not
// retain its arguments.
func (m *Metrics) values(lv *[4]string, backend string, kind dlock.Kind, key string, own ...string) []string {
	v := append(lv[:0], backend, kind.String())
	v = append(v, own...)
	if m.keyLabel != nil {
		v = append(v, m.keyLabel(key))
	}
	return v
}

// waiting is the key of the dlock_waiters gauge in the context of an
// acquire that counts in it, for AcquireDone to take it out again.
type waiting struct{}

// Hooks returns the hooks that report to m, for dlock.WithHooks.
func (m *Metrics) Hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: m.acquireStart,
		AcquireDone:  m.acquireDone,
		Renewed:      m.renewed,
		LeaseEnded:   m.leaseEnded,
		Unprotected:  m.unprotectedRun,
	}
}

func (m *Metrics) acquireStart(ctx context.Context, info dlock.AcquireStartInfo) context.Context {
	if !info.Wait {
		return ctx
	}
	var lv [4]string
	g := m.waiters.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key)...)
	g.Inc()
	// The gauge itself, not its labels: AcquireDone decrements the very
	// series this incremented.
	return context.WithValue(ctx, waiting{}, g)
}

func (m *Metrics) acquireDone(ctx context.Context, info dlock.AcquireDoneInfo) context.Context {
	if g, ok := ctx.Value(waiting{}).(prometheus.Gauge); ok {
		g.Dec()
	}
	var lv [4]string
	m.acquire.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, info.Outcome.String())...).Observe(info.Waited.Seconds())
	if info.Outcome != dlock.OutcomeAcquired {
		return ctx
	}
	m.active.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key)...).Inc()
	// The lost and unprotected counters exist, at 0, from the first grant
	// on: increase() and rate() cannot see a series' first sample rise
	// from nothing, so an alert on them would miss the first loss.
	for _, r := range []dlock.EndReason{dlock.EndExpired, dlock.EndDropped} {
		m.lost.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, r.String())...)
	}
	for _, r := range []dlock.EndReason{dlock.EndExpired, dlock.EndDropped, dlock.EndHoldLimit} {
		m.unprotected.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, r.String())...)
	}
	if m.leader != nil && info.Kind == dlock.KindElection {
		m.leader.WithLabelValues(info.Key).Set(1)
	}
	return ctx
}

func (m *Metrics) renewed(_ context.Context, info dlock.RenewedInfo) {
	var lv [4]string
	result := "ok"
	if info.Err != nil {
		result = "error"
	}
	m.renew.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, result)...).Observe(info.Latency.Seconds())
	m.late.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key)...).Observe(info.Late.Seconds())
}

func (m *Metrics) leaseEnded(_ context.Context, info dlock.LeaseEndedInfo) {
	var lv [4]string
	m.active.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key)...).Dec()
	m.hold.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, info.Reason.String())...).Observe(info.Held.Seconds())
	if info.Reason.Lost() {
		m.lost.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, info.Reason.String())...).Inc()
	}
	if m.leader != nil && info.Kind == dlock.KindElection {
		m.leader.WithLabelValues(info.Key).Set(0)
	}
}

func (m *Metrics) unprotectedRun(_ context.Context, info dlock.UnprotectedInfo) {
	var lv [4]string
	m.unprotected.WithLabelValues(m.values(&lv, info.Backend, info.Kind, info.Key, info.Reason.String())...).Inc()
}
