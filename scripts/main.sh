#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, ingest the shared dataset and the extracted problems,
# price every workload against the H200's speed of light, then run the optimizer (offline worker, no LLM
# needed). On a machine without a GPU the optimizer compiles and plans but cannot time: it says so, and
# the script ends with the command to run on a GPU machine.
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
$S report
if ! .venv/bin/python -c "from solforge.doctor import gpu_problem as g; raise SystemExit(g() is not None)"; then
  cat <<EOT

This machine has no usable CUDA GPU: problems are stored and priced, candidates compiled, nothing timed.
Next, on a machine with an NVIDIA GPU (H200: driver 580+, a CUDA build of torch), from a clone of this
repository with the dataset at \$SOLFORGE_SHARED_DIR (default ../shared):

  bash scripts/main.sh && .venv/bin/solforge report --html report.html

(.venv/bin/solforge doctor there says what is missing, one line each.)
EOT
else
  echo "next: .venv/bin/solforge report --html report.html   (the HTML report of this store)"
fi
