#!/usr/bin/env bash
# Renders the gateway's dashboard into docs/gateway-dashboard.png: the
# dashboard test (gateway/internal/gwtest/dashboard_test.go) starts a
# redis-server and a gateway, takes a lock with two waiters, two permits of
# a semaphore and an election through the library, loads the page in a
# headless Chromium and takes the screenshot. Installs redis-server and
# chromium with apt when they are missing, as ../test.sh does.
#
#   scripts/gateway-dashboard.sh              the picture in docs/
#   scripts/gateway-dashboard.sh /tmp/d.png   elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$(realpath -m "${1:-$root/docs/gateway-dashboard.png}")

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || [ -n "${DLOCK_CHROMIUM_BIN:-}" ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "gateway-dashboard.sh: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cd gateway/internal/gwtest
GOWORK=$root/go.work go test -count=1 -run '^TestDashboard_showsAndFollowsTheKeys$' . -args -dashboard-png="$out"
echo "gateway-dashboard.sh: wrote $out"
