package dlockotel

import (
	"fmt"
	"sync"

	"github.com/dlockdev/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The metrics' names: docs/observability.md says what each measures.
const (
	metricAcquire     = "dlock.acquire.duration"
	metricHold        = "dlock.hold.duration"
	metricRenew       = "dlock.renew.duration"
	metricUnprotected = "dlock.unprotected.duration"
	metricWaiters     = "dlock.waiters"
	metricActive      = "dlock.leases.active"
	metricLost        = "dlock.lease.lost"
	metricFence       = "dlock.fence.rejected"
)

// Bucket boundaries in seconds, given to the SDK as advice (a View
// overrides them). The SDK's default ones are for milliseconds.
var (
	// A wait for a free key is a round trip or two; a wait in line lasts
	// as long as the holders ahead hold.
	acquireBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	// Jobs hold for seconds to minutes, leaders for hours or days.
	holdBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
	// A renewal is one round trip; seconds mean the lease is at risk.
	renewBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

type instruments struct {
	acquire, hold, renew, unprotected metric.Float64Histogram
	waiters, active                   metric.Int64UpDownCounter
	lost, fence                       metric.Int64Counter

	// sets caches the attribute sets of the measurements: they are few
	// (backends × primitives × outcomes), and building one per measurement
	// would allocate on every acquire.
	mu   sync.RWMutex
	sets map[setKey]measurement
}

// measurement is an attribute set as the options of Add and Record: slices
// made once, since a variadic argument built at each call allocates.
type measurement struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newInstruments(m metric.Meter) (*instruments, error) {
	in := &instruments{sets: map[setKey]measurement{}}
	var err error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		if err != nil {
			err = fmt.Errorf("%w %s: %w", ErrInstrument, name, err)
		}
		return h
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		if err != nil {
			return nil
		}
		var c metric.Int64UpDownCounter
		c, err = m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("%w %s: %w", ErrInstrument, name, err)
		}
		return c
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("%w %s: %w", ErrInstrument, name, err)
		}
		return c
	}
	in.acquire = hist(metricAcquire, "Time from the start of an acquiring call to its end, by outcome.", acquireBuckets)
	in.hold = hist(metricHold, "Time from a lease's grant to its end, by the reason it ended.", holdBuckets)
	in.renew = hist(metricRenew, "Time from sending a lease's renewal to its answer.", renewBuckets)
	in.unprotected = hist(metricUnprotected, "How long the function of a Do ran after its lease ended.", acquireBuckets)
	in.waiters = upDown(metricWaiters, "{call}", "Acquiring calls that wait for the key (not TryLock or NoWait), from their start to their end.")
	in.active = upDown(metricActive, "{lease}", "Leases granted and not yet ended.")
	in.lost = counter(metricLost, "{lease}", "Leases lost: expired without a renewal, or dropped by the server.")
	in.fence = counter(metricFence, "{write}", "Writes a fencing guard refused for a stale token.")
	if err != nil {
		return nil, err
	}
	return in, nil
}

// setKey names an attribute set: the backend and primitive, and one more
// attribute when attr is not empty.
type setKey struct {
	backend string
	kind    dlock.Kind
	attr    attribute.Key
	value   string
}

// set returns the measurement options of the attributes backend, primitive
// and, when attr is not empty, attr=value.
func (in *instruments) set(backend string, kind dlock.Kind, attr attribute.Key, value string) measurement {
	k := setKey{backend, kind, attr, value}
	in.mu.RLock()
	m, ok := in.sets[k]
	in.mu.RUnlock()
	if ok {
		return m
	}
	kvs := []attribute.KeyValue{attrBackend.String(backend), attrPrimitive.String(kind.String())}
	if attr != "" {
		kvs = append(kvs, attr.String(value))
	}
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	m = measurement{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
	in.mu.Lock()
	in.sets[k] = m
	in.mu.Unlock()
	return m
}
