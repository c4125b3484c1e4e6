#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, ingest the shared dataset and the extracted problems,
# price every workload against the H200's speed of light, then run the optimizer (offline worker, no LLM
# needed). On a machine without a GPU the optimizer compiles and plans but cannot time: it says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SOLFORGE_DB_PATH=${SOLFORGE_DB_PATH:-$PWD/solforge.duckdb} LITELLM_LOCAL_MODEL_COST_MAP=True
SHARED=${SOLFORGE_SHARED_DIR:-../shared}
S=.venv/bin/solforge
$S ingest "$SHARED/sol_execbench"
$S ingest "$SHARED/flashinfer_trace"
$S ingest data/problems
$S sol --gpu h200 --store
$S optimize --subset FlashInfer-Bench --with-family --budget-attempts "${ATTEMPTS:-40}" "$@"
