#!/usr/bin/env bash
# Session 5's staged GPU work in one call on an nvidia-h200-x2 box:
#   both GPUs: the last torch.compile baselines (scripts/run_baselines.py, deadline BL_S)
#   then two lanes side by side:
#   GPU 0: GEMM t4 (TMA producer tiers vs cuBLAS; kernels_cuda/gemm_wgmma/NOTES.md "t4"), the adversarial suite
#   GPU 1: RMSNorm k8 (persistent ring, cache-policy variants, copy probe; kernels_cuda/rmsnorm/checks)
# With one GPU (nvidia-h200) the lanes run one after the other.
# carry: .whl .carry/baselines .carry/gemm_t4.tgz .carry/k8 .carry/adv_cubins
# Each part is packed into $OUT/<part>.tgz (the box returns at most 8 files).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/bl $OUT/gemm_t4 $OUT/k8 $OUT/adv
BL_S=${BL_S:-200}
python3 scripts/run_baselines.py --dataset .carry/baselines/sol_execbench --out $OUT/bl --work /tmp/blw \
  --variants compile --skip-reasons "runtime_error:,took over" --deadline-s $BL_S --compile-workers 6 \
  --task-timeout-s 300 --compile-timeout-s 240 > $OUT/bl/log.txt 2>&1
tail -8 $OUT/bl/log.txt
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  tar xzf .carry/gemm_t4.tgz -C .carry || return
  R=/tmp/gemm_t4; mkdir -p $R
  python3 scripts/bench_gemm.py run --dir .carry/gemm_t4 --out $R --reps 15 --time-limit 100 > $R/log.txt 2>&1
  echo "gemm rc=$?"; cp $R/table.txt $OUT/gemm_t4/table.txt; cp $R/rows.jsonl $R/env.json $R/log.txt $OUT/gemm_t4/
  SOLFORGE_ADV_CUBINS=.carry/adv_cubins timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/adversarial > $OUT/adv/log.txt 2>&1
  echo "lane0 done ${SECONDS}s"
}
lane1() {
  export CUDA_VISIBLE_DEVICES=${LANE1_GPU:-1}
  timeout -k 5 60 python3 scripts/bench_kernels.py run --dir .carry/k8 --out $OUT/k8 --time-limit 45 --cupti > $OUT/k8/log.txt 2>&1
  timeout -k 3 20 python3 scripts/k8_probe.py --plan-dir .carry/k8 --out $OUT/k8/probe.json >> $OUT/k8/log.txt 2>&1
  timeout -k 3 12 python3 scripts/k8_report.py $OUT/k8 --plan-dir .carry/k8 --out $OUT/k8/report.txt --tables 021,022,023 >> $OUT/k8/log.txt 2>&1
  echo "lane1 done ${SECONDS}s"
}
NG=$(nvidia-smi -L | wc -l)
if [ "$NG" -ge 2 ]; then lane0 > $OUT/lane0.txt 2>&1 & lane1 > $OUT/lane1.txt 2>&1 & wait
else LANE1_GPU=0; lane0 > $OUT/lane0.txt 2>&1; lane1 > $OUT/lane1.txt 2>&1; fi  # one GPU: one lane after the other
cd $OUT; cat lane0.txt lane1.txt
grep -E "FAIL|STICKY|done|limit|Error" gemm_t4/log.txt | head -20; grep -A30 "per-range winner" gemm_t4/table.txt
tail -5 adv/log.txt; grep -E "MET|missed" k8/report.txt | head -20
for d in bl gemm_t4 k8 adv; do tar czf $d.tgz $d && rm -rf $d; done; ls -la; echo "total ${SECONDS}s"
