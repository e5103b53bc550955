#!/usr/bin/env bash
# Failpoint build: go build -tags failpoint -toolexec failpoint-toolexec.
#
#   scripts/build-failpoint.sh OUTDIR PACKAGE...
#
# failpoint-toolexec rewrites the failpoint markers in the compiler's copy of
# each source file (under a private TMPDIR), never in the work tree, so no
# rewritten source, *__failpoint_stash__* or binding__failpoint_binding__.go is
# ever left behind. The build uses its own GOCACHE (.cache/failpoint-gocache):
# the go command's cache keys do not see -toolexec, so sharing the normal cache
# would mix instrumented and production objects. failpoint-toolexec is
# installed, once, from the github.com/pingcap/failpoint version pinned in
# go.mod. The build also carries the canaries (tag vdlcanary,
# internal/canary): off unless the process's VDL_CANARY names one. Env: GO
# (go), FAILPOINT_GOCACHE, FAILPOINT_TOOLDIR.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 OUTDIR PACKAGE..." >&2
  exit 2
fi
out=$1
shift
case $out in /*) ;; *) out=$PWD/$out ;; esac

cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}

mkdir -p "$root/.cache"
[ -f "$root/.cache/.gitignore" ] || echo '*' >"$root/.cache/.gitignore"

version=$("$GO" list -m -f '{{.Version}}' github.com/pingcap/failpoint)
tooldir=${FAILPOINT_TOOLDIR:-$root/.cache/failpoint-tools/$version}
tool=$tooldir/failpoint-toolexec
if [ ! -x "$tool" ]; then
  GOBIN=$tooldir "$GO" install "github.com/pingcap/failpoint/failpoint-toolexec@$version"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/tmp"

# GOMODCACHE set: the tool leaves dependencies' sources alone by this path.
status=0
TMPDIR=$tmp/tmp \
  GOCACHE=${FAILPOINT_GOCACHE:-$root/.cache/failpoint-gocache} \
  GOMODCACHE=$("$GO" env GOMODCACHE) \
  "$GO" build -tags failpoint,vdlcanary -toolexec="$tool" -o "$out/" "$@" 2>"$tmp/stderr" || status=$?
cat "$tmp/stderr" >&2
# The tool logs a failed rewrite and goes on compiling the markers as no-ops:
# treat any of its messages as a failed build.
if grep -q '\[failpoint-toolexec\]' "$tmp/stderr"; then
  echo "build-failpoint: failpoint-toolexec reported errors (above)" >&2
  exit 1
fi
exit $status
