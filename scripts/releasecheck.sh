#!/usr/bin/env bash
# Installs dlock as a user will: the working tree's released modules
# (modules.txt) are published at the release version (`scripts/release.sh
# version`) into a temporary file:// module proxy; then, outside the
# workspace and with an empty module cache, README's install lines run as
# written, a program that imports every released library module builds, and
# `go install .../cmd/dlock@VERSION` gives a dlock whose `dlock version`
# says VERSION.
#
#   scripts/releasecheck.sh        about 10 s once the build cache is warm
#                                  (the first run builds the command: 1–2 min)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/lib.sh

version=$(scripts/release.sh version)
scripts/release.sh check "$version"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
fail() {
  echo "releasecheck.sh: $*" >&2
  if [ -s "$log" ]; then
    echo "releasecheck.sh: the go command said:" >&2
    grep -v '^go: downloading' "$log" | sed 's/^/  /' >&2
  fi
  exit 1
}

publish "$version" "$work/proxy"
while read -r kv; do export "$kv"; done < <(user_env "$work/proxy")
# A module cache of its own: a version cached by an earlier run would hide
# the tree. -trimpath keeps the build cache's entries valid from one such
# cache to the next, and builds as release builds do.
export GOMODCACHE=$work/modcache GOBIN=$work/bin GOFLAGS="$GOFLAGS -trimpath"

# README's install lines, as written; they must pin the release version.
install=$(awk '/^## Install/ { on = 1; next } on && /^## / { exit } on && /^go (get|install) / { sub(/[[:space:]]*#.*/, ""); print }' README.md)
[ -n "$install" ] || fail "README.md has no go get or go install line under \"## Install\""
if grep -v -q -F "@$version" <<<"$install"; then
  fail "README.md's install lines must pin $version: $install"
fi
mkdir "$work/readme"
(cd "$work/readme" && go mod init example.com/readme) >"$log" 2>&1
while read -r line; do
  (cd "$work/readme" && eval "$line") >"$log" 2>&1 || fail "README.md's \"$line\" failed"
done <<<"$install"
: >"$log"
# The whole output, then its first line: head would close the pipe early,
# and pipefail would count dlock's SIGPIPE as a failure.
out=$("$GOBIN/dlock" version 2>&1) || fail "dlock version: $out"
got=${out%%$'\n'*}
[ "$got" = "dlock $version" ] || fail "go install ...@$version gave a dlock whose version says \"$got\", want \"dlock $version\""

# Every released library module, in one program.
user=$work/user
mkdir "$user"
libs=()
for m in $(modules released); do
  [ "$m" != cmd/dlock ] || continue
  libs+=("$(module_path "$m")")
done
{
  echo "package main"
  echo
  for p in "${libs[@]}"; do echo "import _ \"$p\""; done
  echo
  echo "func main() {}"
} >"$user/main.go"
(cd "$user" && go mod init example.com/user) >"$log" 2>&1
for p in "${libs[@]}"; do
  (cd "$user" && go get "$p@$version") >"$log" 2>&1 || fail "go get $p@$version failed"
done
(cd "$user" && go build -o /dev/null .) >"$log" 2>&1 || fail "a program importing ${libs[*]} did not build"
echo "releasecheck.sh: $version installs from a module proxy: README's lines, go get of ${#libs[@]} library modules, dlock version"
