#!/usr/bin/env bash
# What a library user downloads: for each backend, a fresh module that
# requires dlock and that backend at the release version, as published (the
# working tree's released modules in a temporary module proxy, as the
# release check makes it: no workspace, no replace lines), and a second one
# that imports only the backend's client library; and for sqlfence and
# httpfence and gateway, which have no client, a module that imports each.
# It prints the user's go.sum lines and `go list -m all` count.
#
#   scripts/deps.sh             print the figures
#   scripts/deps.sh --check     also fail unless every module in the user's
#                               graph is dlock's or in the client's own graph
#   scripts/deps.sh --download  also measure what a fresh `go mod tidy`
#                               downloads, in an empty module cache (slow)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/lib.sh
check=false download=false
for a in "$@"; do
  case "$a" in
  --check) check=true ;;
  --download) download=true ;;
  *) echo "usage: scripts/deps.sh [--check] [--download]" >&2; exit 2 ;;
  esac
done
version=$(scripts/release.sh version)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
publish "$version" "$work/proxy"
while read -r kv; do export "$kv"; done < <(user_env "$work/proxy")
# A module cache of its own: the tree's modules must not stay in the real
# one under a version that the tag may give other content.
export GOMODCACHE=$work/modcache

# backend package, its client's module, a package of that client to import.
backends=(
  "redisdlock github.com/redis/go-redis/v9 github.com/redis/go-redis/v9"
  "zkdlock github.com/go-zookeeper/zk github.com/go-zookeeper/zk"
  "etcddlock go.etcd.io/etcd/client/v3 go.etcd.io/etcd/client/v3"
)

# module dir name imports... writes a main package importing the given
# packages for their side effects.
module() {
  local dir=$1 name=$2
  shift 2
  mkdir -p "$dir"
  {
    echo "package main"
    echo
    for p in "$@"; do echo "import _ \"$p\""; done
    echo
    echo "func main() {}"
  } >"$dir/main.go"
  printf 'module %s\n\ngo 1.26.0\n' "$name" >"$dir/go.mod"
}

tidy() { # dir [modcache]
  (cd "$1" && if [ -n "${2:-}" ]; then GOMODCACHE=$2 go mod tidy; else go mod tidy; fi) >/dev/null 2>&1 ||
    (cd "$1" && go mod tidy)
}

printf '%-11s %14s %16s %s\n' backend "go.sum lines" "modules (-m all)" "client alone: go.sum / modules"
fail=false
for b in "${backends[@]}"; do
  read -r pkg client clientpkg <<<"$b"
  user=$work/user-$pkg alone=$work/alone-$pkg
  module "$user" example.com/user github.com/dlockdev/dlock "github.com/dlockdev/dlock/$pkg"
  (cd "$user" && go mod edit -require="$dlock_module@$version" -require="$dlock_module/$pkg@$version")
  module "$alone" example.com/alone "$clientpkg"
  # The client at the version the backend requires (its go.mod's line).
  cv=$(awk -v c="$client" '$1 == c { print $2 } $1 == "require" && $2 == c { print $3 }' "$pkg/go.mod")
  (cd "$alone" && go mod edit -require="$client@$cv")
  tidy "$user"
  tidy "$alone"
  sum=$(wc -l <"$user/go.sum")
  mods=$(cd "$user" && go list -m all | wc -l)
  asum=$(wc -l <"$alone/go.sum")
  amods=$(cd "$alone" && go list -m all | wc -l)
  printf '%-11s %14s %16s %s / %s\n' "$pkg" "$sum" "$mods" "$asum" "$amods"
  if $check; then
    # Every module of the user's graph but the user and dlock's own must be
    # in the graph of the client alone.
    extra=$(comm -23 \
      <(cd "$user" && go list -m -f '{{.Path}}' all | grep -v -e '^example.com/' -e '^github.com/dlockdev/dlock' | sort) \
      <(cd "$alone" && go list -m -f '{{.Path}}' all | sort))
    if [ -n "$extra" ]; then
      echo "deps.sh: a user of $pkg gets modules its client does not need:" >&2
      echo "$extra" | sed 's/^/  /' >&2
      fail=true
    fi
  fi
  if $download; then
    cache=$work/cache-$pkg
    rm -f "$user/go.sum"
    tidy "$user" "$cache"
    echo "  a fresh go mod tidy downloads $(du -sh "$cache/cache/download" | cut -f1)"
  fi
done
# Packages that need no client: a user of one gets dlock's modules and
# nothing else (sqlfence works with the user's own database/sql driver,
# httpfence with net/http, gateway with any Client). Their tests against
# real servers, and those servers' clients, are modules of their own
# (sqlfence/internal/storetest, httpfence/internal/redisproof,
# gateway/internal/gwtest), since go mod tidy loads the tests of the
# packages a user imports.
for pkg in sqlfence httpfence gateway; do
  user=$work/user-$pkg
  module "$user" example.com/user github.com/dlockdev/dlock "github.com/dlockdev/dlock/$pkg"
  (cd "$user" && go mod edit -require="$dlock_module@$version" -require="$dlock_module/$pkg@$version")
  tidy "$user"
  sum=0
  [ ! -f "$user/go.sum" ] || sum=$(wc -l <"$user/go.sum")
  mods=$(cd "$user" && go list -m all | wc -l)
  printf '%-11s %14s %16s %s\n' "$pkg" "$sum" "$mods" "(no client)"
  if $check; then
    extra=$(cd "$user" && go list -m -f '{{.Path}}' all | grep -v -e '^example.com/' -e '^github.com/dlockdev/dlock' || true)
    if [ -n "$extra" ]; then
      echo "deps.sh: a user of $pkg gets modules beyond dlock's:" >&2
      echo "$extra" | sed 's/^/  /' >&2
      fail=true
    fi
  fi
done
# OpenTelemetry belongs to observability/dlockotel alone: a program that
# imports dlock and a backend or a guard builds no package of it, and the
# root module's graph holds none of its modules (a backend's may, where its
# client's does: etcd's through gRPC).
# Prometheus is observability/dlockprom's dependency, for those who import
# it: a user of the root module or of a backend must not get it from dlock
# (a backend's client may bring it: etcd's client does, for its gRPC
# metrics). Checked always, not only with --check.
user=$work/user-root
module "$user" example.com/user github.com/dlockdev/dlock
(cd "$user" && go mod edit -require="$dlock_module@$version")
tidy "$user"
otel=$(
  cd "$user" && go list -m -f '{{.Path}} (in the root module'"'"'s graph)' all | grep '^go.opentelemetry.io/' || true
  for pkg in redisdlock zkdlock etcddlock sqlfence httpfence gateway; do
    (cd "$work/user-$pkg" && go list -deps . | grep '^go.opentelemetry.io/' | sed "s#\$# (built by a user of $pkg)#") || true
  done
)
if [ -z "$otel" ]; then
  echo "OpenTelemetry: none in the root module's graph nor in the build of a backend's or guard's user"
else
  echo "OpenTelemetry where only observability/dlockotel may bring it:"
  echo "$otel" | sed 's/^/  /'
  ! $check || fail=true
fi
for pkg in root "${backends[@]%% *}"; do
  user=$work/user-$pkg alone=$work/alone-$pkg
  prom=$(cd "$user" && go list -m -f '{{.Path}}' all | grep '^github.com/prometheus/' || true)
  if [ -n "$prom" ] && [ -d "$alone" ]; then
    prom=$(comm -23 <(echo "$prom" | sort) <(cd "$alone" && go list -m -f '{{.Path}}' all | sort))
  fi
  if [ -n "$prom" ]; then
    echo "deps.sh: a user of $pkg gets Prometheus from dlock:" >&2
    echo "$prom" | sed 's/^/  /' >&2
    fail=true
  fi
done
$fail || echo "Prometheus: none from the root module or a backend (only observability/dlockprom's users get it)"
if $fail; then
  exit 1
fi
