#!/usr/bin/env bash
# The test command of the README. Sets up .venv if needed, then runs the fast default suite (pytest's
# addopts leave out the tests marked slow: docs/testing.md). `--all` (what CI runs, .ci/run) runs every
# test; GPU tests skip themselves without a GPU. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
for a in "$@"; do
  if [ "$a" = "--all" ]; then args+=(-m "slow or not slow"); else args+=("$a"); fi
done
exec .venv/bin/python -m pytest -q ${args[@]+"${args[@]}"}
