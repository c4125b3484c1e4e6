#!/usr/bin/env bash
# The test command of the README: sets up .venv if needed, then runs the whole suite (GPU tests skip
# themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
