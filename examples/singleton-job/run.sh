#!/usr/bin/env bash
# Starts a throw-away redis-server on a free loopback port, runs two instances
# of the singleton job at once, and shows that their runs never overlap.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v redis-server >/dev/null || { echo "run.sh: redis-server is missing: apt-get install -y redis-server" >&2; exit 1; }
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16379)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no --loglevel warning >/dev/null &
redis=$!
trap 'kill $redis 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
(cd examples && go build -o "$dir/singleton-job" ./singleton-job)
export DLOCK_BACKEND="redis://127.0.0.1:$port/0"
"$dir/singleton-job" & a=$!
"$dir/singleton-job" & b=$!
wait $a $b
