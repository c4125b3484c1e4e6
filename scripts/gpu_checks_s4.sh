#!/usr/bin/env bash
# Session 4's staged GPU checks in one call on an nvidia-h200-x2 box, two lanes side by side:
#   GPU 0: k7ws (workspace_zero / FIN / FUSE pairs, rmsnorm WPRE), GEMM t3 (tall tiles vs cuBLAS),
#          the adversarial suite (with dirty_workspace.cu)
#   GPU 1: nvfp4 032 through the pipeline's evaluation + diagnose (+ 029), pointwise coverage k7pw
#   then both GPUs: scripts/scaling_overhead_probe.py (issue #8: spin vs pinned vs blocking sync)
# Each check's outputs are packed into $OUT/<check>.tgz (the box returns at most 8 files).
# carry: .whl .carry/k7ws .carry/gemm_t3 .carry/nvfp4 .carry/pipe .carry/k7pw .carry/throughput/adv_cubins
# Commands per check: kernels_cuda/rmsnorm/checks/README.md (k7ws), kernels_cuda/gemm_wgmma/NOTES.md
# (t3), kernels_cuda/nvfp4_moe/README.md, kernels_cuda/pointwise/checks/README.md (k7pw).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/k7ws $OUT/gemm $OUT/adv $OUT/nvfp4 $OUT/k7pw $OUT/probe
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  timeout -k 5 75 python3 scripts/bench_kernels.py run --dir .carry/k7ws --out $OUT/k7ws --time-limit 60 --cupti \
    > $OUT/k7ws/log.txt 2>&1
  (SOLFORGE_STAGE_DIR=.carry/k7ws/stages timeout 25 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_gpu_workspace_zero.py >> $OUT/k7ws/log.txt 2>&1) || true
  R="python3 scripts/bench_gemm.py run --dir .carry/gemm_t3 --out $OUT/gemm"
  { $R --labels base,base.mskip --time-limit 40
    $R --append --problems 006,007,008 --m-min 17 --m-max 128 --labels base,T0.128.s4,T0.128.s8,T0.128x64.s2,T0.128x64.s4 --time-limit 15
    $R --append --m-min 129 --m-max 1024 --labels base,tall.128.s1,tall.128.s2,tall.128.s4,tall.128.s8,tall.64.s1,tall.64.s2,tall.64.s4,tall.64.s8,t1k,t1k.tall,t1k.128x128,t1k.64x128,t1k.128x64 --time-limit 45
  } > $OUT/gemm/log.txt 2>&1
  SOLFORGE_ADV_CUBINS=.carry/throughput/adv_cubins timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/adversarial > $OUT/adv/log.txt 2>&1
  echo "lane0 done ${SECONDS}s"
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  { timeout 35 python3 scripts/pipeline_eval_check.py run --dir .carry/pipe --out $OUT/nvfp4/pipe --stages 00 --timeout 33
    timeout 30 python3 scripts/nvfp4_diagnose.py --dir .carry/nvfp4 --uuid da99ef95,cf45d9d8 --round 0,1,2 --out $OUT/nvfp4/diag
    timeout 40 python3 scripts/pipeline_eval_check.py run --dir .carry/pipe --out $OUT/nvfp4/pipe2 --stages 03,02 --timeout 38
  } > $OUT/nvfp4/log.txt 2>&1
  timeout -k 5 90 python3 scripts/bench_kernels.py run --dir .carry/k7pw --out $OUT/k7pw --time-limit 70 --cupti > $OUT/k7pw/log.txt 2>&1
  echo "lane1 done ${SECONDS}s"
}
lane0 > $OUT/lane0.txt 2>&1 &
lane1 > $OUT/lane1.txt 2>&1 &
wait
timeout 90 python3 scripts/scaling_overhead_probe.py --gpus 0,1 --seconds 4 --out $OUT/probe/probe.json > $OUT/probe/log.txt 2>&1
cd $OUT && for f in k7ws/log.txt adv/log.txt nvfp4/log.txt k7pw/log.txt probe/log.txt; do
  echo "== $f"; grep -v -i warn $f | tail -12 | cut -c1-400; done
grep -E "FAIL|done|limit" gemm/log.txt | tail -8
for d in k7ws gemm adv nvfp4 k7pw probe; do tar czf $d.tgz $d && rm -rf $d; done; cat lane0.txt lane1.txt; ls -la
echo "total ${SECONDS}s"
