#!/usr/bin/env bash
# Downloads the wheels the bare H200 box lacks (Python 3.12, x86_64) into the git-ignored folders the
# device runs carry: .whl (pydantic and its needs: what the evaluator imports beyond torch/cuda-python)
# and .carry/orch-whl (duckdb + the CUDA headers for on-box NVRTC compiles: the optimize runs).
# Versions follow this machine's .venv so both sides run the same pydantic and duckdb.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
dl() {  # dl DEST NAME==VERSION...
  local dest=$1; shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
    --platform any -d "$dest" "$@"
}
mkdir -p .whl .carry/orch-whl
dl .whl "pydantic==$(ver pydantic)" "pydantic-core==$(ver pydantic-core)" "annotated-types==$(ver annotated-types)" \
  "typing-extensions==$(ver typing-extensions)" "typing-inspection==$(ver typing-inspection)"
dl .carry/orch-whl "duckdb==$(ver duckdb)" "nvidia-cuda-cccl==$(ver nvidia-cuda-cccl)"
du -sh .whl .carry/orch-whl
