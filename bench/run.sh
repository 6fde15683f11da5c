#!/usr/bin/env bash
# Runs every benchmark — dlock and its peers on the same servers, in one
# run — and writes ../docs/benchmarks.md and ../docs/benchmarks.png (and
# results.json here): the targets table of the performance targets (each
# with dlock's figure, the best peer's and the floor measured in the same
# run), the round-trip floor, uncontended and contended locking, the
# semaphore and RWMutex, the semaphore's permits in use, leader election,
# client cost, renewals while 1,000 locks are held, 100,000 keys on one
# client, 10,000 waiters on one key at load 3, server memory per lock, and
# grants/s and hand-off latency through the gateway against the library, and
# the cost of redisdlock's WaitReplicas (a primary with one replica).
#
# The servers run in their default durable configuration (Redis with its
# built-in RDB snapshots, ZooKeeper forceSync=yes, etcd with fsync); the
# round-trip floor, the uncontended cycle, the contended runs at 8 and 32
# contenders, the keys and the permits sections run in 3 rounds (medians and
# ranges).
# The full run takes about 15–20 minutes on a quiet 2-core machine (estimated
# from the sections run alone: the 7-minute no-fsync run before, plus the
# rounds, permits, renewal, keys and queue sections), too long to run the
# nofsync variant in the same run: run it on its own.
#
#   ./run.sh                 the full run (durable servers)
#   ./run.sh -variant nofsync  the same on servers that do not fsync (Redis
#                            without persistence, ZooKeeper forceSync=no, etcd
#                            UnsafeNoFsync); every table says its variant;
#                            writes nothing unless -out DIR is given
#   ./run.sh -quick          a smoke test of every section (short windows, small
#                            scale, one round; about 4 minutes; writes nothing
#                            unless -out DIR is given)
#   ./run.sh -rounds 5       more rounds of the figures shown as medians
#   ./run.sh -only 'dlock'   only the libraries whose name matches
#   ./run.sh -only NAMES     only the sections named, comma-separated (writes
#                            nothing unless -out DIR is given; add -quick for
#                            short runs); the round-trip floor comes with those
#                            whose tables are in RTTs:
#       rtt                  the round-trip floor: smallest request, a write,
#                            a notification, per server
#       uncontended          one client, one key, acquire + release; with the
#                            floor of the targets table: the raw requests of a
#                            cycle (go-redis, go-zookeeper, clientv3) timed the
#                            same way, in stretches among the libraries' runs
#       contended            2 to 128 contenders on one key (8 and 32 in every
#                            round); with the hand-off floors (one notification,
#                            and one behind another client's write) timed in
#                            stretches among the libraries' runs
#       modes                the semaphore and RWMutex workloads with dlock's
#                            lock as their reference (also semaphore, rwmutex)
#       permits              semaphore limit 3, 12 clients, 2 ms holds: the mean
#                            of permits held (about 30 s)
#       election             leader election: hand-over and Observe latency,
#                            dlock's three backends and etcd's Election
#       cost                 client cost: allocations and CPU per cycle
#       renewal              requests per renewal interval while one client
#                            holds 1,000 locks, counted by the server (about
#                            1.5 minutes)
#       keys                 100,000 distinct keys locked and released by 16
#                            goroutines on one client, in rounds (up to 2
#                            minutes per library and round)
#       queue                10,000 waiters on one key (fewer for the polling
#                            peers) drained at load 3 (-queue-load), up to 1
#                            minute per library
#       memory               server memory and keys per held lock and left per
#                            released key, each library on a server of its own
#                            (about 1 minute)
#       replicas             redisdlock's WaitReplicas: the uncontended cycle
#                            with wait_replicas=1 against dlock without it, on
#                            a primary with one replica of their own, each
#                            round (about 10 s per round)
#   ./run.sh -sections memory -only '^dlock \(redis\)$'
#                            the memory section for the matching libraries only
#                            (about 10 s); -sections always writes nothing unless
#                            -out DIR is given
#
# Needs redis-server and ZooKeeper with Java (apt-get install -y redis-server
# zookeeper); etcd is embedded. Servers run on free loopback ports and are
# stopped at the end.
set -euo pipefail
cd "$(dirname "$0")"

for bin in redis-server java; do
	if ! command -v "$bin" >/dev/null; then
		echo "run.sh: $bin not found; install it: apt-get install -y redis-server zookeeper" >&2
		exit 1
	fi
done

# dlock's etcd backend is measured when its package builds.
tags=()
if (cd ../etcddlock && go build .) 2>/dev/null; then
	tags=(-tags dlocketcd)
else
	echo "run.sh: the etcddlock package does not build; its rows will say \"not available\"" >&2
fi

echo "run.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
go build "${tags[@]}" -o bench.bin .
trap 'rm -f bench.bin' EXIT
BENCH_COMMAND="cd bench && ./run.sh${*:+ $*}" ./bench.bin "$@"
