#!/usr/bin/env bash
# Creates .venv with everything solforge needs, exactly as locked (requirements/dev.lock.txt: every
# package pinned and checked against its sha256), plus bubblewrap for the sandbox where apt can get it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOCK=${SOLFORGE_LOCK:-requirements/dev.lock.txt}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and outside the hashed lock: this machine kind keeps its CPU build on disk (a local
# file, whose hash is not PyPI's); elsewhere any torch>=2.4 works and a GPU box brings its own.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q --require-hashes -r "$LOCK"
.venv/bin/python -m pip install -q --no-deps -e .
# the sandbox's walls (no network, read-only filesystem) come from bubblewrap; without it untrusted
# code still runs with an allowlisted env, limits and a private temp dir, and one log line says so
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  ($SUDO apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
    || ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq bubblewrap >/dev/null)) \
    || echo "warning: bubblewrap could not be installed; the sandbox runs without namespaces" >&2
fi
