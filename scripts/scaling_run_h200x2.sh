#!/usr/bin/env bash
# One call on a two-GPU H200 box (device kind nvidia-h200-x2): the optimize run on 1 GPU, then on 2.
#   phase 1: `solforge optimize --gpus 0` (offline worker, every shared problem a family serves, T_b
#            seeded from data/results/baselines_h200.csv) for $T1 s -> $OUT/opt1.duckdb;
#            meanwhile on GPU 1: the launcher's GPU tests (CUDA-graph plans), the baselines (eager and
#            torch.compile) of the optimized problems, the GEMM split-K check, timing repeatability
#   phase 2: the same optimize, fresh job and DB, `--gpus 0,1` for $T2 s -> $OUT/opt2.duckdb
# Each run reports evaluations per minute and each GPU's busy share (report.gpu_use, in optN.json).
# Prepare here first: python scripts/prepare_scaling_run.py   (writes .carry/scaling)
# carry: .whl .carry/orch-whl .carry/scaling .carry/gemm3
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl .carry/orch-whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SOLFORGE_CACHE_DIR=/tmp/sfcache
export SOLFORGE_CUTE_PREBUILT=$PWD/.carry/scaling/cute_prebuilt
export LITELLM_LOCAL_MODEL_COST_MAP=True NCCL_NVLS_ENABLE=0
S=.carry/scaling; L=/tmp/logs; mkdir -p $L $OUT/bl
T1=${T1:-200}; T2=${T2:-240}
nvidia-smi -L > $L/00_gpus.txt 2>&1
opt() {  # $1 name, $2 gpus, $3 seconds
  cp $S/seed.duckdb $OUT/$1.duckdb
  timeout -k 5 $(($3 + 45)) python3 -m solforge.cli --json optimize --problems $S/problems --with-family \
    --language both --gpus $2 --db $OUT/$1.duckdb --attempts-per-round 2 --runs-per-round 4 \
    --wall-seconds $3 --reps 20 --correctness-rounds 2 --timing-budget-s 1 --baseline-reps 10 \
    --eval-timeout-s 60 > $OUT/$1.json 2> $L/1_$1.log; echo "$1 rc=$?" >> $L/1_$1.log
}
( opt opt1 0 $T1 ) &
( T0=$(date +%s)
CUDA_VISIBLE_DEVICES=1 timeout -k 5 60 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_compile_launch.py > $L/05_launch_tests.log 2>&1; echo "launch tests rc=$?" >> $L/05_launch_tests.log
# T_b of the problems being optimized: eager where missing, then torch.compile (~100 s)
ONLY=$(ls $S/problems/*/ | grep -v : | grep . | tr '\n' ',')
CUDA_VISIBLE_DEVICES=1 timeout -k 5 $((${TB:-100} + 10)) python3 scripts/run_baselines.py --dataset $S/dataset \
  --only "$ONLY" --out $OUT/bl --work /tmp/blw --deadline-s ${TB:-100} --compile-workers ${CW:-12} \
  > $L/20_baselines.log 2>&1; echo "baselines rc=$?" >> $L/20_baselines.log
# GEMM split-K tier up to M 1024 for N <= 256, and the per-problem best as whole candidates (~60 s)
[ -d .carry/gemm3 ] && CUDA_VISIBLE_DEVICES=1 timeout -k 5 80 python3 scripts/bench_gemm.py run --dir .carry/gemm3 \
  --out /tmp/gemm3 --reps 8 --time-limit 60 > $L/08_gemm3.log 2>&1; echo "gemm3 rc=$?" >> $L/08_gemm3.log
cat /tmp/gemm3/table.txt >> $L/08_gemm3.log 2>/dev/null; cp /tmp/gemm3/rows.jsonl $OUT/bl/gemm3_rows.jsonl 2>/dev/null
# timing repeatability with a warm-up long enough for the GEMM's clocks to settle (~35 s), if time is left
[ $(($(date +%s) - T0)) -lt $((T1 - 30)) ] && CUDA_VISIBLE_DEVICES=1 timeout -k 5 60 python3 scripts/timing_spread.py \
  --warmup-ms ${SPREAD_WARMUP_MS:-2000} --out /tmp/spread.txt > $L/06_spread.log 2>&1; echo "spread rc=$?" >> $L/06_spread.log
) &
wait
opt opt2 0,1 $T2
# replay: the best attempt of three problems re-run from its DuckDB record, compared with the stored one
for id in $(python3 -c "
import duckdb, sys
c = duckdb.connect(sys.argv[1], read_only=True)
print(' '.join(r[0] for r in c.sql(\"SELECT attempt_id FROM v_best_per_problem ORDER BY sol_score DESC NULLS LAST LIMIT 3\").fetchall()))
" $OUT/opt2.duckdb 2>> $L/80_replay.log); do
  timeout -k 5 40 python3 -m solforge.cli --db $OUT/opt2.duckdb --json replay $id --record >> $L/80_replay.log 2>&1
  echo "replay $id rc=$?" >> $L/80_replay.log
done
rm -f $OUT/bl/run.log $OUT/bl/baselines_rows.jsonl  # at most 8 files come back
for f in $L/*; do echo "=== $f"; cat "$f"; done > $OUT/logs.txt
ls -la $OUT $OUT/bl
for f in $L/*; do echo "=== $f"; tail -6 "$f"; done
python3 - <<'PY'
import json, os
for n in ("opt1", "opt2"):
    try:
        r = json.load(open(os.path.join(os.environ["OUT"], n + ".json")))
        print(n, r.get("stop_reason"), r.get("spent"), r.get("gpu_use"))
    except Exception as e:
        print(n, "no report:", e)
PY
