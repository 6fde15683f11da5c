#!/usr/bin/env bash
# go mod tidy for dlock's modules. go mod tidy ignores go.work and looks
# for the release version of a module's siblings on the module proxy, which
# may not have it yet (or has the released tree, not this one): this script
# publishes the working tree at that version into a temporary proxy first,
# as the release check does, and tidies against it. Then it drops dlock's
# own modules from each go.sum: their checksums would be of this tree, not
# of what gets tagged (the workspace needs none, a user's go has its own).
#
#   scripts/tidy.sh          every module of modules.txt
#   scripts/tidy.sh DIR...   the modules in DIR... (redisdlock, cmd/dlock, .)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/lib.sh

dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || mapfile -t dirs < <(modules)
version=$(scripts/release.sh version)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
publish "$version" "$work/proxy"
while read -r kv; do export "$kv"; done < <(user_env "$work/proxy")
# A module cache of its own: the tree's modules must not stay in the real
# one under a version that the tag may give other content.
export GOMODCACHE=$work/modcache

for m in "${dirs[@]}"; do
  [ -f "$m/go.mod" ] || { echo "tidy.sh: no module in $m" >&2; exit 1; }
  echo "tidy.sh: $m"
  (cd "$m" && go mod tidy 2> >(grep -v '^go: downloading' >&2))
  if [ -f "$m/go.sum" ]; then
    sed -i -E "\\#^$dlock_module(/[^ ]+)? #d" "$m/go.sum"
    [ -s "$m/go.sum" ] || rm "$m/go.sum"
  fi
done
