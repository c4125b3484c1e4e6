#!/usr/bin/env bash
# Session 6's staged GPU checks in one call on one H200, one after the other:
#   fp8:    the fp8_gemm family's first check (every variant, every workload of Quant 001/006/015/021/022;
#           kernels_cuda/fp8_gemm/README.md)
#   decode: attention_decode's first check on 012/013 (kernels_cuda/attention_decode/README.md)
#   export: TMA GEMM bests exported as solutions (tmap: arguments encoded by the C++ entry), run as
#           torch ops against the evaluator's runtime and the reference (scripts/check_export_gpu.py)
# carry: .whl .carry/fp8 .carry/attn_new .carry/export_tma
# Each part is packed into $OUT/<part>.tgz (the box returns at most 8 files).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/fp8 $OUT/attn_new $OUT/export
FP8_S=${FP8_S:-200}; DEC_S=${DEC_S:-120}; EXP_S=${EXP_S:-130}
timeout -k 5 $FP8_S python3 scripts/bench_kernels.py run --dir .carry/fp8 --out $OUT/fp8 --ref-once --problems 001_fp8,006_fp8,015_fp8,021_fp8,022_fp8 \
  --time-limit $((FP8_S - 20)) > $OUT/fp8/log.txt 2>&1
echo "fp8 rc=$? ${SECONDS}s"; tail -25 $OUT/fp8/log.txt
timeout -k 5 $DEC_S python3 scripts/bench_kernels.py run --dir .carry/attn_new --out $OUT/attn_new --ref-once \
  --time-limit $((DEC_S - 20)) --problems 012_gqa,013_gqa > $OUT/attn_new/log.txt 2>&1
echo "decode rc=$? ${SECONDS}s"; tail -15 $OUT/attn_new/log.txt
timeout -k 5 $EXP_S python3 scripts/check_export_gpu.py check --dir .carry/export_tma --out $OUT/export/export_tma.json \
  --max-workloads 3 > $OUT/export/log.txt 2>&1
echo "export rc=$? ${SECONDS}s"; tail -15 $OUT/export/log.txt
cd $OUT; for d in fp8 attn_new export; do tar czf $d.tgz $d && rm -rf $d; done; ls -la; echo "total ${SECONDS}s"
