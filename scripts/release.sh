#!/usr/bin/env bash
# Releases dlock: every released module of modules.txt, at one version.
#
#   scripts/release.sh version                   print the version the released modules
#                                                require each other at
#   scripts/release.sh set-version [-n] VERSION  make every module require dlock's
#                                                modules at VERSION
#   scripts/release.sh check VERSION             check that the tree's modules can be
#                                                released at VERSION
#   scripts/release.sh tag [-n] VERSION          check, also that the tree is clean and
#                                                no tag of VERSION exists, then tag HEAD:
#                                                VERSION for the root module, DIR/VERSION
#                                                for the module in DIR (the go command's
#                                                names)
#
# -n (dry run) prints what would be done and changes nothing.
#
# A release: `scripts/release.sh set-version vX.Y.Z` (when the version
# changes), `scripts/tidy.sh`, a CHANGELOG.md section "## X.Y.Z", commit,
# `./test.sh` (its release check publishes the tree at that version and
# installs it as a user would), `scripts/release.sh tag vX.Y.Z`, then push
# the tags it printed (git push origin TAG...).
# Model: gocloud.dev's internal/testing/git_tag_modules.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/lib.sh

usage() {
  echo "usage: scripts/release.sh version | set-version [-n] VERSION | check VERSION | tag [-n] VERSION" >&2
  exit 2
}
fail() {
  echo "release.sh: $*" >&2
  exit 1
}

# check VERSION: the checks that need no clean tree; prints every problem
# before failing.
check() {
  local v=$1 problems=0 m path pv
  for m in $(modules released); do
    if grep -Eq '^replace([[:space:]]|\()' "$m/go.mod"; then
      echo "release.sh: $m/go.mod has replace directives: a user's go ignores them, and go install refuses them" >&2
      problems=$((problems + 1))
    fi
    # A sibling's checksum, taken from a tree before the tag, would not be
    # the tagged one's: a GOWORK=off build of the module would fail on it
    # (scripts/tidy.sh drops them; go install ...@VERSION reads no go.sum).
    if [ -f "$m/go.sum" ] && grep -Eq "^$dlock_module(/[^ ]+)? " "$m/go.sum"; then
      echo "release.sh: $m/go.sum has checksums of dlock's own modules: run scripts/tidy.sh $m" >&2
      problems=$((problems + 1))
    fi
    while read -r path pv; do
      [ -n "$path" ] || continue
      if [ "$pv" != "$v" ]; then
        echo "release.sh: $m/go.mod requires $path at $pv, not $v" >&2
        problems=$((problems + 1))
      fi
      if ! released_path "$path"; then
        echo "release.sh: $m/go.mod requires $path, which is not a released module (modules.txt)" >&2
        problems=$((problems + 1))
      fi
    done < <(sibling_requires "$m")
  done
  # The workspace and modules.txt list the same modules, every one of the
  # tree, and go.work replaces each released module at v by its directory.
  local listed found used replaced want
  listed=$(modules | sort)
  found=$(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' |
    sed -e 's#^\./##' -e 's#/\{0,1\}go\.mod$##' -e 's#^$#.#' | sort)
  used=$(go work edit -json | sed -n -E 's#^[[:space:]]*"DiskPath": "\.?/?(.*)",?$#\1#p' | sed 's#^$#.#' | sort)
  if [ "$listed" != "$found" ]; then
    echo "release.sh: modules.txt lists $(echo $listed), the tree has go.mod files in $(echo $found)" >&2
    problems=$((problems + 1))
  fi
  if [ "$listed" != "$used" ]; then
    echo "release.sh: modules.txt lists $(echo $listed), go.work uses $(echo $used)" >&2
    problems=$((problems + 1))
  fi
  replaced=$(work_replaces | sort)
  want=$(for m in $(modules released); do echo "$(module_path "$m") $v ./${m#.}"; done | sort)
  if [ "$replaced" != "$want" ]; then
    echo "release.sh: go.work's replace lines are not one per released module at $v (scripts/release.sh set-version $v):" >&2
    diff <(echo "$want") <(echo "$replaced") | sed -n 's/^[<>]/ &/p' >&2 || true
    problems=$((problems + 1))
  fi
  if ! grep -Eq "^## \[?v?${v#v}\]?([[:space:]]|$)" CHANGELOG.md; then
    echo "release.sh: CHANGELOG.md has no section \"## ${v#v}\"" >&2
    problems=$((problems + 1))
  fi
  [ "$problems" -eq 0 ] || fail "not releasable at $v (the problems above)"
}

# released_path PATH: whether PATH is the module path of a released module.
released_path() {
  local m
  for m in $(modules released); do
    [ "$1" != "$(module_path "$m")" ] || return 0
  done
  return 1
}

# work_replaces: go.work's replace lines, "PATH VERSION DIR" a line.
work_replaces() {
  sed -n -E 's#^(replace)?[[:space:]]*([^[:space:]]+)[[:space:]]+(v[^[:space:]]+)[[:space:]]+=>[[:space:]]+([^[:space:]]+)[[:space:]]*$#\2 \3 \4#p' go.work
}

checkversion() {
  [[ $1 =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "$1 is not a version (vX.Y.Z)"
}

dry=false
cmd=${1:-}
[ $# -gt 0 ] && shift
if [ "${1:-}" = -n ]; then
  dry=true
  shift
fi
case "$cmd" in
version)
  [ $# -eq 0 ] || usage
  sibling_version
  ;;
set-version)
  [ $# -eq 1 ] || usage
  checkversion "$1"
  for m in $(modules); do
    args=()
    while read -r path pv; do
      if [ -n "$path" ] && [ "$pv" != "$1" ]; then args+=("-require=$path@$1"); fi
    done < <(sibling_requires "$m")
    [ ${#args[@]} -gt 0 ] || continue
    if $dry; then
      echo "(cd $m && go mod edit ${args[*]})"
    else
      (cd "$m" && go mod edit "${args[@]}")
    fi
  done
  # go.work's replace lines follow (see its comment).
  args=()
  while read -r path pv dir; do
    args+=("-dropreplace=$path@$pv")
  done < <(work_replaces)
  for m in $(modules released); do
    args+=("-replace=$(module_path "$m")@$1=./${m#.}")
  done
  if $dry; then
    echo "go work edit ${args[*]}"
  else
    go work edit "${args[@]}"
  fi
  ;;
check)
  [ $# -eq 1 ] && ! $dry || usage
  checkversion "$1"
  check "$1"
  ;;
tag)
  [ $# -eq 1 ] || usage
  checkversion "$1"
  check "$1"
  [ -z "$(git status --porcelain)" ] || fail "the tree has uncommitted changes: commit them first"
  tags=()
  for m in $(modules released); do
    if [ "$m" = . ]; then tags+=("$1"); else tags+=("$m/$1"); fi
  done
  for t in "${tags[@]}"; do
    if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
      fail "tag $t exists already"
    fi
  done
  head=$(git rev-parse HEAD)
  for t in "${tags[@]}"; do
    if $dry; then
      echo "git tag -a $t -m 'dlock $t' $head"
    else
      git tag -a "$t" -m "dlock $t" "$head"
      echo "$t"
    fi
  done
  $dry || echo "release.sh: tagged $head; push with: git push origin ${tags[*]}"
  ;;
*) usage ;;
esac
