# Shell functions shared by test.sh and the scripts in scripts/; source it
# after setting root to the repository's root.

# The path every module of dlock starts with.
dlock_module=github.com/dlockdev/dlock

# modules [released|unreleased]: the module directories listed in
# modules.txt, all of them or those of one kind, one a line.
modules() {
  awk -v want="${1:-}" '
    /^#/ || NF == 0 { next }
    NF != 2 || ($2 != "released" && $2 != "unreleased") {
      printf "modules.txt:%d: want \"DIR released|unreleased\", have %s\n", NR, $0 > "/dev/stderr"; exit 1
    }
    want == "" || $2 == want { print $1 }' "$root/modules.txt"
}

# module_path DIR: the path of the module in DIR, a directory of modules.txt.
module_path() {
  if [ "$1" = . ]; then echo "$dlock_module"; else echo "$dlock_module/$1"; fi
}

# sibling_requires DIR: the requirements of the module in DIR on dlock's
# modules, "PATH VERSION" a line.
sibling_requires() {
  sed -n -E 's#^(require)?[[:space:]]*('"$dlock_module"'(/[^[:space:]]+)?)[[:space:]]+(v[^[:space:]]+).*#\2 \4#p' "$root/$1/go.mod"
}

# sibling_version: the version at which the released modules require each
# other (the version to release); fails unless they all agree.
sibling_version() {
  local versions
  versions=$(for m in $(modules released); do sibling_requires "$m"; done | awk '{print $2}' | sort -u)
  if [ "$(printf '%s\n' "$versions" | grep -c .)" -ne 1 ]; then
    echo "the released modules require dlock's modules at several versions, want one: $(echo $versions)" >&2
    return 1
  fi
  echo "$versions"
}

# publish VERSION DIR: writes the released modules of the working tree, at
# VERSION, into DIR laid out as a module proxy (use it as GOPROXY=file://DIR).
publish() {
  (cd "$root/internal/tools" &&
    GOWORK=off go run ./modproxy -root "$root" -version "$1" -out "$2" $(modules released))
}

# user_env DIR: prints the environment of a module user whose proxy is the
# published DIR, then the module cache's downloads (for speed), then the
# usual proxy: the sum database does not know dlock's unpublished versions.
# Use it with a fresh GOMODCACHE, so that a version cached by an earlier run
# cannot hide the working tree.
user_env() {
  local cache
  cache=$(go env GOMODCACHE)
  echo "GOWORK=off"
  echo "GOPROXY=file://$1,file://$cache/cache/download,$(go env GOPROXY)"
  echo "GONOSUMDB=$dlock_module"
  echo "GOFLAGS=$(go env GOFLAGS) -modcacherw"
}
