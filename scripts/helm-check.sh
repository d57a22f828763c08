#!/usr/bin/env bash
# `helm lint` and `helm template` on every chart under deploy/ (a directory
# with a Chart.yaml). Helm is the one scripts/real-cluster.sh builds; HELM
# overrides it. Fails on the first chart that does not lint or render.
set -euo pipefail
cd "$(dirname "$0")/.."
helm=${HELM:-}
if [ -z "$helm" ]; then
  helm="$(scripts/real-cluster.sh bin)/helm"
fi
[ -n "$helm" ] && [ -x "$helm" ] || {
  echo "helm-check.sh: no Helm binary (HELM unset and scripts/real-cluster.sh built none)" >&2
  exit 1
}
charts=$(find deploy -name Chart.yaml -printf '%h\n' | sort)
if [ -z "$charts" ]; then
  echo "helm-check.sh: no chart under deploy/"
  exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for chart in $charts; do
  echo "-- $chart"
  "$helm" lint --strict "$chart"
  "$helm" template check "$chart" >"$out/$(basename "$chart").yaml"
  echo "   rendered $(grep -c '^kind:' "$out/$(basename "$chart").yaml") objects"
done
