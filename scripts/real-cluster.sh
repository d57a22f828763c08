#!/usr/bin/env bash
# The real-cluster lane: a real Kubernetes control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler) plus KWOK fake
# kubelets, all on 127.0.0.1, built from the Go modules pinned in
# tools/realcluster/. See docs/real-cluster.md.
#
#   scripts/real-cluster.sh build    build the binaries once into the cache
#   scripts/real-cluster.sh bin      build if needed, print the binaries' directory
#   scripts/real-cluster.sh helm     print a Helm binary: the full build's when it
#                                    is cached, else Helm alone, built once (the
#                                    kube-sim lane needs nothing else)
#   scripts/real-cluster.sh up       build, start everything, apply RBAC
#   scripts/real-cluster.sh env      print `export` lines for tests
#   scripts/real-cluster.sh status   say what runs
#   scripts/real-cluster.sh down     stop what `up` started, remove the state dir
#   scripts/real-cluster.sh smoke    fake Node + device-plugin Pod + exec check
#
# The work is done by a Go program, tools/realcluster/cmd/realcluster
# (standard library only). This script builds it once per source and Go
# version into a cache and execs it with the arguments above.
#
# Environment:
#   GPUFLEET_REAL_CACHE          build cache root (default ~/.cache/gpufleet/real-cluster)
#   GPUFLEET_REAL_DIR            state dir (default <repo>/.real-cluster)
#   GPUFLEET_REAL_READY_TIMEOUT  seconds to wait for readiness (default 120)
#   GPUFLEET_REAL_NICE           nice level of the Go builds (default 10)
#   GPUFLEET_REAL_NO_KWOK=1      do not start KWOK
#   GPUFLEET_REAL_TOOL_CACHE     where the Go program itself is built
#                                (default ~/.cache/gpufleet/realcluster-tool)
#   KUBECTL                      kubectl to use (default <repo>/.venv/bin/kubectl)
#   GO                           go to use (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$REPO/tools/realcluster/cmd/realcluster"

die() { printf 'real-cluster: error: %s\n' "$*" >&2; exit 1; }

if [[ -n "${GO:-}" ]]; then
  command -v "$GO" >/dev/null 2>&1 || die "GO=$GO is not executable"
elif command -v go >/dev/null 2>&1; then GO=go
elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
else die "no Go toolchain: put go on PATH or set GO=/path/to/go (go.mod files need Go >= 1.26)"
fi
export GO

# Without HOME, Go has no default build cache either: one beside the program.
gocache=${GOCACHE:-}
if [[ -n "${GPUFLEET_REAL_TOOL_CACHE:-}" ]]; then tool_cache=$GPUFLEET_REAL_TOOL_CACHE
elif [[ -n "${HOME:-}" ]]; then tool_cache="$HOME/.cache/gpufleet/realcluster-tool"
elif [[ -n "${GPUFLEET_REAL_CACHE:-}" ]]; then tool_cache="$GPUFLEET_REAL_CACHE/.realcluster-tool"
else die "HOME is unset; set GPUFLEET_REAL_CACHE"
fi
[[ -n "$gocache" || -n "${HOME:-}" || -n "${XDG_CACHE_HOME:-}" ]] || gocache="$tool_cache/gocache"

# The key: the Go version and every file of the program but its tests.
key=$(
  cd "$SRC"
  "$GO" env GOVERSION
  find . -type f ! -name '*_test.go' ! -path './testdata/*' | LC_ALL=C sort |
    while read -r f; do printf '== %s\n' "$f"; cat "$f"; done
) || die "cannot read $SRC or run '$GO env GOVERSION'"
key=$(printf '%s' "$key" | sha256sum | cut -c1-16)
tool="$tool_cache/$key/realcluster"

if [[ ! -x "$tool" ]]; then
  mkdir -p "$tool_cache/$key"
  tmp=$(mktemp "$tool_cache/$key/realcluster.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -f '$tmp'" EXIT
  (cd "$SRC" && GOWORK=off CGO_ENABLED=0 GOCACHE="$gocache" "$GO" build -trimpath -o "$tmp" .) ||
    die "building $SRC failed; see the go output above"
  mv -f "$tmp" "$tool"
  trap - EXIT
fi

exec "$tool" -repo "$REPO" -self "$0" "$@"
