#!/usr/bin/env bash
# One call on a two-GPU H200 box (device kind nvidia-h200-x2) that produces the session's GPU results:
#   phase 1, in parallel: `solforge optimize` (offline worker, shared + extracted problems, DuckDB) on
#            GPU 0; eager-first baselines of every shared workload on GPU 1
#   phase 2: the same staged candidates evaluated on 1 GPU, then on 2 (scripts/two_gpu_run.py)
#   phase 3: the exported torch op vs the evaluator (GPU 0) and the wgmma GEMM GPU tests (GPU 1)
# carry: .whl .carry/orch-whl .carry/final_problems .carry/evaluate_data .carry/two_gpu .carry/export_check
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl .carry/orch-whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SOLFORGE_CACHE_DIR=/tmp/sfcache
export LITELLM_LOCAL_MODEL_COST_MAP=True NCCL_NVLS_ENABLE=0
L=/tmp/logs; mkdir -p $L $OUT/bl $OUT/two
nvidia-smi -L > $L/00_gpus.txt 2>&1
T1=${T1:-280}
( CUDA_VISIBLE_DEVICES=0 timeout -k 5 $((T1 + 20)) python3 -m solforge.cli --json optimize \
    --problems .carry/final_problems --with-family --language cuda --db $OUT/optimize.duckdb \
    --attempts-per-round 1 --budget-attempts 200 --wall-seconds $T1 --reps 20 \
    --correctness-rounds 2 --timing-budget-s 1 --baseline-reps 10 --eval-timeout-s 60 \
    > $OUT/optimize.json 2> $L/10_optimize.log; echo "optimize rc=$?" >> $L/10_optimize.log ) &
( CUDA_VISIBLE_DEVICES=1 timeout -k 5 $((T1 + 10)) python3 scripts/run_baselines.py \
    --dataset .carry/evaluate_data/sol_execbench --out $OUT/bl --work /tmp/blw --deadline-s $T1 \
    > $L/20_baselines.log 2>&1; echo "baselines rc=$?" >> $L/20_baselines.log ) &
wait
timeout -k 5 ${T2:-150} python3 scripts/two_gpu_run.py run --gpus 0,1 --limit ${LIMIT2:-6} \
  --out $OUT/two > $L/30_two_gpu.log 2>&1; echo "two_gpu rc=$?" >> $L/30_two_gpu.log
( CUDA_VISIBLE_DEVICES=0 timeout -k 5 60 python3 scripts/check_export_gpu.py check \
    --dir .carry/export_check --out $OUT/export_check.json > $L/40_export.log 2>&1;
  echo "export rc=$?" >> $L/40_export.log ) &
( CUDA_VISIBLE_DEVICES=1 timeout -k 5 60 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_gpu_kernels_wgmma.py > $L/50_wgmma_tests.log 2>&1; echo "wgmma tests rc=$?" >> $L/50_wgmma_tests.log ) &
wait
rm -f $OUT/bl/baselines_rows.jsonl $OUT/bl/run.log
for f in $L/*; do echo "=== $f"; cat "$f"; done > $OUT/logs.txt
ls -la $OUT $OUT/bl $OUT/two
for f in $L/*; do echo "=== $f"; tail -8 "$f"; done
