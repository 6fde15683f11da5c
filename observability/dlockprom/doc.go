// Package dlockprom reports the events of dlock's leases as Prometheus
// metrics: how long acquires wait and how they end, how long leases are
// held and why they end, how often one is lost, whether renewals are slow
// or late, how many jobs ran unprotected, and which elections this process
// leads.
//
// A Metrics is a prometheus.Collector; its Hooks go to the Clients it
// observes:
//
//	m := dlockprom.New()
//	prometheus.MustRegister(m)
//	client, err := dlock.Open(ctx, url, dlock.WithHooks(m.Hooks()))
//
// One Metrics serves any number of Clients: register it once per registry.
// docs/observability.md lists the metrics with PromQL for the alerts an
// operator wants.
//
// # Metrics
//
// Every dlock_ metric has the labels backend ("redis", "zookeeper", "etcd",
// "mem") and kind ("lock", "semaphore", "rwmutex", "election"):
//
//   - dlock_acquire_duration_seconds, histogram, label outcome (acquired,
//     skipped, timeout, canceled, error): the time an acquiring call took,
//     waiting included. Buckets from 0.5ms to 10 minutes.
//   - dlock_waiters, gauge: acquiring calls in flight that wait for the key
//     (Lock, not TryLock or NoWait).
//   - dlock_leases_active, gauge: leases granted and not yet ended.
//   - dlock_hold_duration_seconds, histogram, label reason (released,
//     expired, dropped, hold_limit, closed): the time from grant to end.
//     Buckets from 10ms to a day.
//   - dlock_lease_lost_total, counter, label reason (expired, dropped):
//     leases lost, that is ended other than by their holder. A lease
//     released at its HoldAtMost is not lost (its holder asked for that):
//     it shows as hold_duration's reason hold_limit, and in
//     dlock_unprotected_total if the job ran on.
//   - dlock_renew_duration_seconds, histogram, label result (ok, error):
//     the round trip of each renewal. Buckets from 0.5ms to 10s.
//   - dlock_renew_late_seconds, histogram: how long after its scheduled
//     moment each renewal was sent; large when the process was paused or
//     starved of CPU. Buckets from 1ms to a minute.
//   - dlock_unprotected_total, counter, label reason (expired, dropped,
//     hold_limit): runs of Do whose function went on after its lease
//     ended.
//
// And, as client-go's leader election reports it:
//
//   - leader_election_master_status, gauge, label name: 1 while this
//     process leads the election name, 0 after.
//
// # Cardinality
//
// No dlock_ metric has a key label unless WithKeyLabel asks for one, with a
// mapping from keys to a bounded set of values (KeyPrefix is one): keys are
// often made of job, tenant or record names, and a label per key would
// grow without bound. leader_election_master_status is the one metric
// labelled by a key, the election's, as client-go's is by the election's
// name: a process campaigns in a few elections. WithoutLeaderStatus drops
// it.
package dlockprom
