#!/usr/bin/env bash
# Runs every benchmark of issue 5 — dlock and its peers on the same servers,
# in one run — those of issue 12 (a semaphore and an RWMutex on dlock's
# backends) and of issue 13 (leader election: hand-over and Observe latency
# on dlock's backends beside etcd's concurrency.Election) and the memory
# section (server memory per held lock, and what a released key leaves), and
# writes ../docs/benchmarks.md and ../docs/benchmarks.png (and results.json
# here). Takes 9–13 minutes on a 2-core machine.
#
#   ./run.sh                 the full run
#   ./run.sh -quick          a smoke test (short windows, small scale; writes nothing)
#   ./run.sh -only 'dlock'   only the libraries whose name matches
#   ./run.sh -only modes     only the semaphore and RWMutex workloads of issue 12
#                            (with dlock's lock as their reference) and the
#                            round-trip floor; also -only semaphore, -only rwmutex;
#                            writes nothing unless -out DIR is given; add -quick
#                            for short windows (about 30 s in all)
#   ./run.sh -only election  only the leader election section (hand-over and
#                            Observe latency, dlock's three backends and etcd's
#                            concurrency.Election) and the round-trip floor;
#                            writes nothing unless -out DIR is given; add
#                            -quick for short runs; combines with the modes
#                            names: -only modes,election
#   ./run.sh -only memory    only the memory section: server memory and keys per
#                            held lock and left per released key, 100,000 keys on
#                            Redis and 20,000 on ZooKeeper and etcd, each library on
#                            a server of its own (about 1 minute); writes nothing
#                            unless -out DIR is given; add -quick for 2,000 keys
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
