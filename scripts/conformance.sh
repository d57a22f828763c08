#!/usr/bin/env bash
# The [sig-api-machinery] [Conformance] tests of Kubernetes v1.37.2's own
# e2e suite against kube-sim (`gpufleet sim serve`) or the real lane.
#
#   scripts/conformance.sh build          build e2e.test once into the cache
#   scripts/conformance.sh bin            build if needed; print e2e.test's path
#   scripts/conformance.sh run [--real]   run the tests; print the tally and
#                                         write the JUnit report and a summary
#                                         into $GPUFLEET_CONFORMANCE_DIR
#                                         (default target/conformance/<lane>)
#
# e2e.test is `go test -c k8s.io/kubernetes/test/e2e` of the module pinned
# in tools/e2e, unmodified; the first build takes about 20 minutes on two
# cores. A run is bounded by GPUFLEET_CONFORMANCE_TIMEOUT (default 40m),
# each test by the suite's own timeouts.
#
#   GPUFLEET_CONFORMANCE_CACHE   cache root (default ~/.cache/gpufleet/e2e)
#   GPUFLEET_CONFORMANCE_FOCUS   ginkgo focus regexp (default the whole group)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { printf 'conformance: %s\n' "$*" >&2; }
die() { printf 'conformance: error: %s\n' "$*" >&2; exit 1; }

GO=${GO:-go}
command -v "$GO" >/dev/null 2>&1 || die "no Go toolchain on PATH (set GO)"
CACHE_ROOT=${GPUFLEET_CONFORMANCE_CACHE:-$HOME/.cache/gpufleet/e2e}
FOCUS=${GPUFLEET_CONFORMANCE_FOCUS:-'\[sig-api-machinery\].*\[Conformance\]'}

key() {
  { "$GO" env GOVERSION; cat tools/e2e/go.mod tools/e2e/go.sum; } | sha256sum | cut -c1-16
}

cmd_build() {
  local dir
  dir="$CACHE_ROOT/$(key)"
  if [[ -x "$dir/e2e.test" ]]; then
    log "cached: $dir/e2e.test"
    printf '%s\n' "$dir/e2e.test"
    return
  fi
  mkdir -p "$dir"
  log "building e2e.test (k8s.io/kubernetes/test/e2e of tools/e2e) into $dir; about 20 minutes the first time"
  local t0
  t0=$(date +%s)
  (cd tools/e2e && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    nice "$GO" test -c -trimpath -ldflags "-s -w" -o "$dir/e2e.test.tmp" k8s.io/kubernetes/test/e2e) ||
    die "building e2e.test failed; see the go output above"
  mv "$dir/e2e.test.tmp" "$dir/e2e.test"
  log "built in $(($(date +%s) - t0))s"
  printf '%s\n' "$dir/e2e.test"
}

cmd_run() {
  local lane=sim
  if [[ "${1:-}" == "--real" ]]; then lane=real; fi
  local e2e out kubeconfig sim_pid=""
  e2e=$(cmd_build | tail -n 1)
  out=${GPUFLEET_CONFORMANCE_DIR:-$root/target/conformance/$lane}
  rm -rf "$out"
  mkdir -p "$out"
  if [[ "$lane" == real ]]; then
    eval "$(scripts/real-cluster.sh env)"
    kubeconfig=$GPUFLEET_REAL_ADMIN_KUBECONFIG
  else
    local gpufleet="$root/target/debug/gpufleet"
    [[ -x "$gpufleet" ]] || cargo build -q -p gpufleet
    kubeconfig="$out/kube-sim.kubeconfig"
    "$gpufleet" sim serve --port 0 --kubeconfig "$kubeconfig" >"$out/kube-sim.log" 2>&1 &
    sim_pid=$!
    # shellcheck disable=SC2064
    trap "kill $sim_pid 2>/dev/null || true" EXIT
    for _ in $(seq 1 100); do [[ -s "$kubeconfig" ]] && break; sleep 0.1; done
    [[ -s "$kubeconfig" ]] || die "gpufleet sim serve wrote no kubeconfig (log: $out/kube-sim.log)"
  fi
  log "running $FOCUS against the $lane lane (report: $out)"
  local rc=0
  # One test at a time: ginkgo's parallel mode needs its own CLI.
  timeout --signal=TERM --kill-after=60s "${GPUFLEET_CONFORMANCE_TIMEOUT:-40m}" \
    "$e2e" --kubeconfig "$kubeconfig" --provider skeleton \
    --ginkgo.focus "$FOCUS" --ginkgo.no-color --ginkgo.v \
    --ginkgo.junit-report "$out/junit.xml" \
    --report-dir "$out" --disable-log-dump \
    --allowed-not-ready-nodes -1 --node-schedulable-timeout 10s \
    >"$out/e2e.log" 2>&1 || rc=$?
  [[ -f "$out/junit.xml" ]] || die "e2e.test wrote no report (exit $rc; log: $out/e2e.log)"
  python3 tools/e2e/summarize.py "$out/junit.xml" | tee "$out/summary.txt"
}

case "${1:-}" in
  build) cmd_build >/dev/null ;;
  bin) cmd_build | tail -n 1 ;;
  run) shift; cmd_run "$@" ;;
  *) die "usage: scripts/conformance.sh build|bin|run [--real]" ;;
esac
