#!/usr/bin/env bash
# Runs every test of dlock against real servers. Installs what is missing
# (redis-server, ZooKeeper, Java) with apt; etcd runs embedded, nothing to
# install. Usage: ./test.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v zsh >/dev/null 2>&1 || need+=(zsh) # cmd/dlock: zsh -n on the completion script
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Services the packages may have started are not used: tests start their own
# servers on free loopback ports.

echo "test.sh: go vet"
go vet ./...

echo "test.sh: go vet the benchmark module (bench/, its own go.mod, so that it keeps building)"
(cd bench && go vet -tags dlocketcd ./...)

echo "test.sh: the root package must not depend on any backend client"
if go list -deps . | grep -E 'go-redis|go-zookeeper|etcd.io' ; then
  echo "test.sh: package dlock imports a backend client" >&2
  exit 1
fi

echo "test.sh: go test -race"
go test -race -count=1 -timeout 30m "$@" ./...
