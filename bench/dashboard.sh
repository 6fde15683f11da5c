#!/usr/bin/env bash
# Renders the Grafana dashboard docs/grafana/dlock.json over real data into
# ../docs/dashboard.png: a redis-server and a Prometheus scraping every
# second, a scripted workload of dlock clients reporting through dlockprom
# for 3 minutes, and every panel's queries evaluated by Prometheus
# (dashboard/main.go says what the workload does). Installs redis-server and
# prometheus with apt when they are missing, as ../test.sh installs its
# servers.
#
#   ./dashboard.sh                       the picture in docs/ (about 3 minutes)
#   ./dashboard.sh -duration 5m -out /tmp/dash.png
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "dashboard.sh: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

go build -o dashboard.bin ./dashboard
trap 'rm -f dashboard.bin' EXIT
./dashboard.bin "$@"
