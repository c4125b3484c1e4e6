#!/usr/bin/env bash
# One long two-GPU optimize run (issue #6's results table) on an nvidia-h200-x2 box: the problems staged
# by scripts/prepare_scaling_run.py (minus EXCLUDE; only those matching ONLY when set), T_b seeded from data/results/baselines_h200.csv,
# the offline worker, --wall-seconds $T. carry: .whl .carry/orch-whl .carry/scaling
# Writes $OUT/opt_long.duckdb (checkpointed), opt_long.json, opt_long.log. SOLFORGE_COMMIT (the
# commit the carried tree is at; the box has no .git) is recorded in the run's row.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl .carry/orch-whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True NCCL_NVLS_ENABLE=0
export SOLFORGE_CUTE_PREBUILT=$PWD/.carry/scaling/cute_prebuilt
[ -n "${SOLFORGE_COMMIT:-}" ] || { SOLFORGE_COMMIT=$(python3 -c "import json; print(json.load(open('.carry/scaling/manifest.json'))['commit'])" 2>/dev/null) && export SOLFORGE_COMMIT_SOURCE="prepare_scaling_run manifest"; }
export SOLFORGE_COMMIT
GPUS=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}  # every GPU of the box (one or two)
S=.carry/scaling; P=/tmp/problems; T=${T:-400}; EXCLUDE=${EXCLUDE-}
# 014/015 (Python-loop references, 8 ms to 23 s a call): reference outputs cached once per run by a
# trusted process (solforge/evaluate/refcache.py), a longer per-evaluation limit for them, and a
# workload whose reference call runs over REFCACHE_MAX_REF_S left out of the run (listed in the log).
REFCACHE=${REFCACHE-014_gqa,015_gqa}; REFCACHE_MAX_REF_S=${REFCACHE_MAX_REF_S:-30}
EVAL_TIMEOUT_FOR=${EVAL_TIMEOUT_FOR-014_gqa=180,015_gqa=180}
RC_ARGS=""; [ -n "$REFCACHE" ] && RC_ARGS="--refcache $REFCACHE --refcache-max-ref-s $REFCACHE_MAX_REF_S --refcache-dir /tmp/refcache"
[ -n "$EVAL_TIMEOUT_FOR" ] && RC_ARGS="$RC_ARGS --eval-timeout-for $EVAL_TIMEOUT_FOR"
for d in $S/problems/*/*/; do
  n=$(basename $d); skip=0
  for x in $EXCLUDE; do case $n in *$x*) skip=1;; esac; done
  if [ -n "${ONLY:-}" ]; then skip=1; for x in $ONLY; do case $n in *$x*) skip=0;; esac; done; fi
  [ $skip = 1 ] || { mkdir -p $P/$(basename $(dirname $d)) && cp -r $d $P/$(basename $(dirname $d))/; }
done
# SEED: another seed DB, e.g. scripts/prepare_cumulative_seed.py's (an earlier run's attempts + today's baselines)
SEED=${SEED:-$S/seed.duckdb}
case $SEED in *.gz) gunzip -c $SEED > $OUT/opt_long.duckdb;; *) cp $SEED $OUT/opt_long.duckdb;; esac
SOLFORGE_CACHE_DIR=/tmp/sfcache timeout -k 5 $((T + 90)) python3 -m solforge.cli --json optimize \
  --problems $P --with-family --language both --gpus $GPUS --db $OUT/opt_long.duckdb --attempts-per-round 2 \
  --runs-per-round 6 --wall-seconds $T --reps 20 --correctness-rounds 2 --timing-budget-s 1 \
  --baseline-reps 10 --eval-timeout-s 60 $RC_ARGS ${OPT_EXTRA:-} > $OUT/opt_long.json 2> $OUT/opt_long.log
echo "optimize rc=$? after ${SECONDS}s" >> $OUT/opt_long.log
python3 -c "import duckdb,sys; c=duckdb.connect(sys.argv[1]); c.execute('CHECKPOINT'); c.close()" $OUT/opt_long.duckdb
rm -f $OUT/*.lock $OUT/*.lock.wait
tail -5 $OUT/opt_long.log; echo "total ${SECONDS}s"
