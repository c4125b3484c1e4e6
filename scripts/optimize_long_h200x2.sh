#!/usr/bin/env bash
# One long two-GPU optimize run (issue #6's results table) on an nvidia-h200-x2 box: the problems staged
# by scripts/prepare_scaling_run.py (minus EXCLUDE), T_b seeded from data/results/baselines_h200.csv,
# the offline worker, --wall-seconds $T. carry: .whl .carry/orch-whl .carry/scaling
# Writes $OUT/opt_long.duckdb (checkpointed), opt_long.json, opt_long.log.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl .carry/orch-whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True NCCL_NVLS_ENABLE=0
export SOLFORGE_CUTE_PREBUILT=$PWD/.carry/scaling/cute_prebuilt
S=.carry/scaling; P=/tmp/problems; T=${T:-400}; EXCLUDE=${EXCLUDE-014_gqa 015_gqa}
for d in $S/problems/*/*/; do
  n=$(basename $d); skip=0
  for x in $EXCLUDE; do case $n in *$x*) skip=1;; esac; done
  [ $skip = 1 ] || { mkdir -p $P/$(basename $(dirname $d)) && cp -r $d $P/$(basename $(dirname $d))/; }
done
cp $S/seed.duckdb $OUT/opt_long.duckdb
SOLFORGE_CACHE_DIR=/tmp/sfcache timeout -k 5 $((T + 90)) python3 -m solforge.cli --json optimize \
  --problems $P --with-family --language both --gpus 0,1 --db $OUT/opt_long.duckdb --attempts-per-round 2 \
  --runs-per-round 6 --wall-seconds $T --reps 20 --correctness-rounds 2 --timing-budget-s 1 \
  --baseline-reps 10 --eval-timeout-s 60 ${OPT_EXTRA:-} > $OUT/opt_long.json 2> $OUT/opt_long.log
echo "optimize rc=$? after ${SECONDS}s" >> $OUT/opt_long.log
python3 -c "import duckdb,sys; c=duckdb.connect(sys.argv[1]); c.execute('CHECKPOINT'); c.close()" $OUT/opt_long.duckdb
rm -f $OUT/*.lock $OUT/*.lock.wait
tail -5 $OUT/opt_long.log; echo "total ${SECONDS}s"
