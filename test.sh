#!/usr/bin/env bash
# Runs every test of dlock, in every module of the repository, against real
# servers. Installs what is missing (redis-server, ZooKeeper, Java,
# PostgreSQL, MariaDB, Debian's etcd 3.4) with apt;
# etcd and staticcheck are built from the Go module proxy (internal/tools
# pins their versions).
# Usage: ./test.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)
. scripts/lib.sh

# The modules (modules.txt): the library (root) and one per backend, so that
# a library user downloads only dlock and the client of the backend it
# imports; the command, the fault-injection suite, the examples and the
# scheduler adapters (integrations/: dlock itself depends on no scheduler)
# stand apart. All are built through the workspace (go.work); bench/ is
# vetted here and run by bench/run.sh.
export GOWORK=$root/go.work
mapfile -t modules < <(modules)

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
# The gateway's clients (clients/internal/clienttest) are compiled with javac
# and run with python3: without them those tests fail.
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# A C compiler builds the library that steps one redis-server's clock
# (internal/testing/testserver/clock.go; libfaketime cannot run redis-server).
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v zsh >/dev/null 2>&1 || need+=(zsh) # cmd/dlock: zsh -n on the completion script
command -v curl >/dev/null 2>&1 || need+=(curl) # the gateway's tests drive it with curl
command -v openssl >/dev/null 2>&1 || need+=(openssl) # dlock gateway's TLS script makes its certificate with it
command -v chromium >/dev/null 2>&1 || need+=(chromium) # the gateway's dashboard is tested in a headless Chromium
# sqlfence's tests run a PostgreSQL server (internal/testing/testserver/postgres.go
# finds Debian's binaries in /usr/lib/postgresql/<version>/bin).
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)
# ... and a MariaDB server (internal/testing/testserver/mariadb.go: mariadbd, which
# Debian puts in /usr/sbin, and mariadb-install-db).
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || need+=(mariadb-server)
# etcddlock's tests check that Debian's etcd (3.4.23, which revokes live
# leases) is refused (internal/testing/testserver/etcd.go: EtcdDebianBinary).
[ -x /usr/bin/etcd ] || need+=(etcd-server)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Services the packages may have started are not used: tests start their own
# servers on free loopback ports.

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "test.sh: build the etcd server the tests run and staticcheck (internal/tools pins their versions)"
# The tools module alone, so that the workspace's versions do not change them.
(cd internal/tools && GOWORK=off go build -o "$work/etcd" go.etcd.io/etcd/server/v3 &&
  GOWORK=off go build -o "$work/staticcheck" honnef.co/go/tools/cmd/staticcheck)
export DLOCK_ETCD_BIN="$work/etcd"

echo "test.sh: gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 -r gofmt -l)
if [ -n "$unformatted" ]; then
  printf 'test.sh: gofmt would change these files (run gofmt -w):\n%s\n' "$unformatted"
  exit 1
fi

echo "test.sh: go vet and staticcheck, each module"
for m in "${modules[@]}"; do
  (cd "$m" && go vet ./... && "$work/staticcheck" ./...)
done
(cd bench && go vet -tags dlocketcd ./... && "$work/staticcheck" -tags dlocketcd ./...)

echo "test.sh: the release: go get and go install from a module proxy, as a user"
./scripts/releasecheck.sh

echo "test.sh: a library user's dependencies"
./scripts/deps.sh --check

# One go test run over every module, so that the packages of all modules
# share the two cores instead of running module after module. bench/ has
# its own runner (bench/run.sh).
patterns=()
for m in "${modules[@]}"; do
  [ "$m" != bench ] || continue
  if [ "$m" = . ]; then patterns+=(./...); else patterns+=("./$m/..."); fi
done
# bench's and bench/dashboard's tests need no server: they check the
# report's rendering and judgments, and the Grafana dashboard against
# dlockprom's metrics.
patterns+=(./bench ./bench/dashboard/...)
echo "test.sh: go test -race"
if ! go test -race -count=1 -timeout 30m "$@" "${patterns[@]}" 2>&1 | tee "$work/gotest.log"; then
  # go-zookeeper v1.0.4 (the newest) has one known data race on reconnect
  # (internal/testing/zkrace). A test failed by it alone, and by nothing
  # else, runs again and must pass; any other failure fails here.
  reruns=$(go run ./internal/testing/zkrace/racerecheck <"$work/gotest.log") || exit 1
  while IFS=$'\t' read -r pkg run; do
    echo "test.sh: only go-zookeeper's known race failed these; again: go test -race -run '$run' $pkg"
    go test -race -count=1 -timeout 30m "$@" -run "$run" "$pkg"
  done <<<"$reruns"
fi
