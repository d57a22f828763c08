#!/usr/bin/env bash
# The TFJob referee: Kubeflow training-operator, built unmodified from the Go
# module pinned in tools/trainingoperator/. See docs/tfjob-referee.md.
#
#   scripts/training-operator.sh build   build once into the cache
#   scripts/training-operator.sh bin     build if needed, print the binary's path
#   scripts/training-operator.sh dir     build if needed, print the cache dir
#                                        (bin/, manifests/ for kubectl apply -k, build-time)
#
# Environment:
#   GPUFLEET_TRAINING_OPERATOR_CACHE  cache root (default ~/.cache/gpufleet/training-operator)
#   GPUFLEET_TRAINING_OPERATOR_NICE   nice level of the Go build (default 10)
#   GO                                go to use (default: go on PATH)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD="$REPO/tools/trainingoperator"
UPSTREAM="github.com/kubeflow/training-operator"
PKG="$UPSTREAM/cmd/training-operator.v1"
NICE_LEVEL="${GPUFLEET_TRAINING_OPERATOR_NICE:-10}"
if [[ -n "${GPUFLEET_TRAINING_OPERATOR_CACHE:-}" ]]; then CACHE_ROOT=$GPUFLEET_TRAINING_OPERATOR_CACHE
elif [[ -n "${HOME:-}" ]]; then CACHE_ROOT="$HOME/.cache/gpufleet/training-operator"
else echo "training-operator: error: HOME is unset; set GPUFLEET_TRAINING_OPERATOR_CACHE" >&2; exit 1
fi

log() { printf 'training-operator: %s\n' "$*" >&2; }
die() { printf 'training-operator: error: %s\n' "$*" >&2; exit 1; }

# Sets KEYDIR: the Go version, go.mod, go.sum and this script, hashed.
compute_key() {
  GO=${GO:-go}
  command -v "$GO" >/dev/null 2>&1 || die "no Go toolchain: put go on PATH or set GO"
  local gov sum ver
  gov=$(cd "$MOD" && GOWORK=off "$GO" env GOVERSION) || die "'$GO env GOVERSION' failed"
  ver=$(awk -v m="$UPSTREAM" '$1 == m { print $2; exit }' "$MOD/go.mod")
  [[ -n "$ver" ]] || die "$MOD/go.mod does not require $UPSTREAM"
  sum=$(cat <(printf 'go %s\n' "$gov") "$MOD/go.mod" "$MOD/go.sum" "${BASH_SOURCE[0]}" |
    sha256sum | cut -c1-16)
  KEYDIR="$CACHE_ROOT/${ver}_${gov}_${sum}"
}

cmd_build() {
  compute_key
  if [[ -f "$KEYDIR/.complete" ]]; then log "cached: $KEYDIR"; return 0; fi
  mkdir -p "$CACHE_ROOT"
  local tmp src t0
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/bin" "$tmp/manifests"
  log "go build $PKG into $KEYDIR"
  t0=$(date +%s)
  (cd "$MOD" && GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    nice -n "$NICE_LEVEL" "$GO" build -trimpath -ldflags "-s -w" \
    -o "$tmp/bin/training-operator" "$PKG") || die "go build $PKG failed; see above"
  printf 'training-operator %ss (%s)\n' "$(($(date +%s) - t0))" "$("$GO" env GOVERSION)" |
    tee "$tmp/build-time" >&2
  src=$(cd "$MOD" && GOWORK=off "$GO" list -mod=readonly -m -f '{{.Dir}}' "$UPSTREAM") ||
    die "cannot locate the $UPSTREAM module directory"
  # What the upstream standalone overlay applies, less the Deployment and the
  # other job kinds: the TFJob CRD, the validating webhook configuration
  # (webhook/, with its own kustomization), the Service its DNS name names,
  # the RBAC, and a kustomization of ours that adds the namespace and the
  # empty Secret the cert rotator fills (a secretGenerator upstream).
  mkdir -p "$tmp/manifests/crds" "$tmp/manifests/webhook" "$tmp/manifests/rbac"
  cp "$src/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$tmp/manifests/crds/"
  cp "$src/manifests/base/webhook/"*.yaml "$tmp/manifests/webhook/"
  cp "$src/manifests/base/rbac/"*.yaml "$tmp/manifests/rbac/"
  cp "$src/manifests/base/service.yaml" "$tmp/manifests/"
  printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeflow\n' >"$tmp/manifests/namespace.yaml"
  cat >"$tmp/manifests/kustomization.yaml" <<'EOF'
# Written by scripts/training-operator.sh: kubectl apply -k <this dir>
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow
resources:
  - namespace.yaml
  - crds/kubeflow.org_tfjobs.yaml
  - rbac/service-account.yaml
  - rbac/role.yaml
  - rbac/cluster-role-binding.yaml
  - webhook
  - service.yaml
secretGenerator:
  - name: training-operator-webhook-cert
    options:
      disableNameSuffixHash: true
EOF
  chmod -R u+w,go+rX "$tmp"
  touch "$tmp/.complete"
  [[ -d "$KEYDIR" && ! -f "$KEYDIR/.complete" ]] && rm -rf "$KEYDIR"
  if ! mv -T "$tmp" "$KEYDIR" 2>/dev/null; then
    [[ -f "$KEYDIR/.complete" ]] || die "cannot move $tmp to $KEYDIR"
    rm -rf "$tmp"
  fi
  trap - EXIT
  log "built: $KEYDIR"
}

case "${1:-}" in
  build) cmd_build ;;
  bin) cmd_build >&2 && printf '%s\n' "$KEYDIR/bin/training-operator" ;;
  dir) cmd_build >&2 && printf '%s\n' "$KEYDIR" ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
