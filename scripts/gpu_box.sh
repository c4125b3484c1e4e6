#!/usr/bin/env bash
# An optimize pass on a bare GPU box, and the one step it needs ahead on a CPU machine
# (docs/gpu_runbook.md). The box has torch, cuda-python and NVRTC; the rest travels with the tree:
# .whl (pydantic), .carry/orch-whl (duckdb, the CUDA headers), .carry/cupti (cupti-python).
#
# Here, on the CPU machine, with the problems in a database:
#   SOLFORGE_CACHE_DIR=.carry/cache solforge --db DB optimize --problems @LIST --match-only \
#       --arch sm_90a --gpu-profile h200
#   scripts/gpu_box.sh pack .carry/cache .carry/run/cache.txz      # compiler plans + tracer answers
# On the box (the device call), every setting from the environment:
#   OUT=$OUT PLIST=.carry/run/list.txt SEED=.carry/run/seed.duckdb.gz CACHE_TXZ=.carry/run/cache.txz \
#       WALL=220 LANES=6 scripts/gpu_box.sh optimize
#     OUT        where the log and the gzipped database go (the device tool's $OUT)
#     TAG        their name (default run): $OUT/$TAG.log, $OUT/$TAG.duckdb.gz
#     PLIST      the problems, one SUBSET/name per line
#     SEED       the database to start from (.gz or .xz), or "keep": the previous step's on this box
#     CACHE_TXZ  the packed cache (optional; a cache made at another commit of solforge/compiler or
#                kernels_cuda/compiler is not read, and the box matches from scratch)
#     WALL       --wall-seconds; SIGTERM WALL_SLACK (default 45) seconds later marks the run and its
#                unfinished attempts interrupted (the evaluation in flight is not waited for)
#     LANES (default 2), TB (--timing-budget-s, default 0.1), ATT (--budget-attempts, default: the
#     list's length), APR (--attempts-per-round, default 1), WORKLOAD_S (SOLFORGE_WORKLOAD_TIMEOUT_S,
#     default 40), EXTRA_OPT (more optimize arguments)
# Two passes in one call: run the second with SEED=keep and another TAG.
# Last in a call script: `scripts/gpu_box.sh bundle $OUT` puts the files of $OUT's subfolders into
# one bundle.tgz (a call brings back at most 8 files).
#
# The verdict sweep (benchmarks/first_candidate_sweep.py) the same way:
#   here    scripts/gpu_box.sh pack-stages .carry/sweep .carry/sweep.txz   # staged.json + the stages
#   the box OUT=$OUT STAGES_TXZ=.carry/sweep.txz PART=call1 DEADLINE=530 PARALLEL=4 TIMEOUT=400 \
#             scripts/gpu_box.sh sweep
#     the stages are unpacked once a box (a warm call finds them); PART names the results
#     ($OUT/sweep_results_$PART.jsonl, run_$PART.log); SKIP: results files of earlier parts on this box
#     (.carry/boxout/PART/sweep_results.jsonl) or carried ones, whose stages are not run again
#
# NVIDIA's CLI beside solforge's evaluator (benchmarks/compare_sol_execbench.py; carry .whl,
# .carry/sxb, .carry/cupti and the cases):
#   the box OUT=$OUT CASES=.carry/sxb/cases TAG=first DEADLINE=500 [GPU_TESTS=1] scripts/gpu_box.sh compare
#     serial, both sides on cores CPUS (default 4,5); $OUT/TAG/{cmp/,run_log.txt,box.txt}; GPU_TESTS
#     runs tests/gpu/test_gpu_timing_window.py first, once a box; end the call with `bundle $OUT`
set -uo pipefail
cd "$(dirname "$0")/.."
BOX_DB=/tmp/solforge_box.duckdb
BOX_CACHE=/tmp/solforge_box_cache

pack() {  # pack CACHE_DIR OUT.txz: xz finds the repeats across cache entries that gzip's window misses
  local src=$1 dest=$2
  mkdir -p "$(dirname "$dest")"
  tar cJf "$dest" -C "$src" $(cd "$src" && ls -d compiler traces 2>/dev/null)
  du -h "$dest"
}

setup() {  # the carried wheels, once a box (python3 -m pip: the box's `pip` is another interpreter's)
  python3 -c "import duckdb, pydantic" 2>/dev/null && return 0
  # the folders this call carried (cupti-python is only needed to time eager references)
  local w; w=$(ls .whl/*.whl .carry/orch-whl/*.whl .carry/cupti/*.whl 2>/dev/null)
  python3 -m pip install -q --no-deps $w 2>&1 | tail -2
}

optimize() {
  : "${OUT:?OUT: where results go}" "${PLIST:?PLIST: the problem list}" "${SEED:?SEED: a .gz or .xz database, or keep}"
  local tag=${TAG:-run} wall=${WALL:-300} slack=${WALL_SLACK:-45}
  setup
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} SOLFORGE_CACHE_DIR=$BOX_CACHE
  export SOLFORGE_WORKLOAD_TIMEOUT_S=${WORKLOAD_S:-40}
  if [ -n "${CACHE_TXZ:-}" ] && [ ! -e "$BOX_CACHE/.unpacked" ]; then
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
      "$CACHE_TXZ" "$BOX_CACHE" && touch "$BOX_CACHE/.unpacked"
  fi
  if [ "$SEED" != keep ]; then  # .gz or .xz (xz: about 0.6x gzip's size for these databases)
    python3 -c "import gzip, lzma, shutil, sys; o = lzma.open if sys.argv[1].endswith('.xz') else gzip.open
shutil.copyfileobj(o(sys.argv[1]), open(sys.argv[2], 'wb'))" "$SEED" "$BOX_DB"
  fi
  local n; n=$(grep -c . "$PLIST")
  local t0=$SECONDS
  # shellcheck disable=SC2086  # EXTRA_OPT is a list of arguments
  timeout -s TERM $((wall + slack)) python3 -m solforge.cli --db "$BOX_DB" optimize --offline \
    --problems "@$PLIST" --lanes "${LANES:-2}" --attempts-per-round "${APR:-1}" \
    --budget-attempts "${ATT:-$n}" --timing-budget-s "${TB:-0.1}" --wall-seconds "$wall" \
    ${EXTRA_OPT:-} > "$OUT/$tag.log" 2>&1
  echo "optimize ($tag): rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/$tag.log"
  # a run stopped by SIGTERM may leave its last writes in the WAL: opening the file replays them
  python3 -c "import duckdb, sys; duckdb.connect(sys.argv[1]).execute('CHECKPOINT')" "$BOX_DB"
  gzip -c "$BOX_DB" > "$OUT/$tag.duckdb.gz"
}

pack_stages() {  # pack-stages SWEEP_DIR OUT.txz: the staged.json as it is now and the stages it lists
  local src=$1 dest=$2
  mkdir -p "$(dirname "$dest")"
  python3 - "$src" "$dest" <<'PY'
import json, sys, tarfile
from pathlib import Path
src, dest = Path(sys.argv[1]), sys.argv[2]
rows = json.loads((src / "staged.json").read_text())  # read once: a prepare may still be writing
with tarfile.open(dest, "w:xz") as tar:
    for r in rows:
        if r.get("staged"):
            tar.add(src / r["stage"], arcname=f"sweep/{r['stage']}")
    data = json.dumps(rows, indent=1).encode()
    info = tarfile.TarInfo("sweep/staged.json"); info.size = len(data)
    import io; tar.addfile(info, io.BytesIO(data))
print(f"{sum(bool(r.get('staged')) for r in rows)} stages of {len({r['problem'] for r in rows})} problems -> {dest}")
PY
  du -h "$dest"
}

sweep() {
  : "${OUT:?OUT: where results go}" "${STAGES_TXZ:?STAGES_TXZ: the packed stages}" "${PART:?PART: a name for this part}"
  local box=.carry/boxsweep t0=$SECONDS
  setup
  if [ ! -e "$box/sweep/staged.json" ]; then
    mkdir -p "$box"
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
      "$STAGES_TXZ" "$box"
  fi
  mkdir -p .carry/boxout "$OUT"
  # shellcheck disable=SC2086  # SKIP is a list of files
  python3 benchmarks/first_candidate_sweep.py run --dir "$box/sweep" --out ".carry/boxout/$PART" \
    --parallel "${PARALLEL:-4}" --timeout "${TIMEOUT:-400}" --deadline-s "${DEADLINE:-530}" \
    --fallback --no-timing ${SKIP:+--skip-done $SKIP} > ".carry/boxout/run_$PART.log" 2>&1
  echo "sweep ($PART): rc=$? in $((SECONDS - t0)) s" | tee -a ".carry/boxout/run_$PART.log"
  cp ".carry/boxout/$PART/sweep_results.jsonl" "$OUT/sweep_results_$PART.jsonl" 2>/dev/null
  cp ".carry/boxout/run_$PART.log" "$OUT/"
}

compare() {  # NVIDIA's CLI beside solforge's evaluator over prepared cases (benchmarks/compare_sol_execbench.py)
  : "${OUT:?OUT: where results go}" "${CASES:?CASES: a folder made by compare_sol_execbench.py prepare}"
  local tag=${TAG:-cmp} t0=$SECONDS
  mkdir -p "$OUT/$tag"
  setup
  local gpu; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  # the box, beside the results: how far launch-bound times repeat is the host's
  { echo "gpu: $gpu"; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node\(s\)'; date -u; } > "$OUT/$tag/box.txt"
  if [ -n "${GPU_TESTS:-}" ] && [ ! -e /tmp/solforge_gpu_tests_done ]; then  # once a box
    PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_window.py \
      > "$OUT/$tag/gpu_timing_window.log" 2>&1
    echo "gpu tests: rc=$?" | tee -a "$OUT/$tag/gpu_timing_window.log"
    touch /tmp/solforge_gpu_tests_done
  fi
  python3 benchmarks/compare_sol_execbench.py run --serial --cpus "${CPUS:-4,5}" --cases "$CASES" \
    --sxb "${SXB:-.carry/sxb/repo}" --wheels .whl "${SXB_WHL:-.carry/sxb/whl}" --out "$OUT/$tag/cmp" \
    --deadline-s "${DEADLINE:-500}" > "$OUT/$tag/run_log.txt" 2>&1
  echo "compare ($tag): rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/$tag/run_log.txt"
  grep -E "^- (Eager reference|The same over)" "$OUT/$tag/cmp/sol_execbench_compare_h200.md" 2>/dev/null
}

bundle() {  # bundle DIR: the files under DIR's subfolders into DIR/bundle.tgz (a device call brings
  # back at most 8 files of $OUT: a run's JSON left in a subfolder was lost so on 2026-12-05)
  local dir=$1
  local subs; subs=$(cd "$dir" && find . -mindepth 2 -type f | sort)
  [ -z "$subs" ] && return 0
  (cd "$dir" && tar czf bundle.tgz $subs && rm -f $subs && find . -mindepth 1 -type d -empty -delete)
  echo "bundled $(echo "$subs" | wc -l) file(s) into $dir/bundle.tgz"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  bundle) shift; bundle "$@" ;;
  pack-stages) shift; pack_stages "$@" ;;
  setup) setup ;;
  optimize) optimize ;;
  sweep) sweep ;;
  compare) compare ;;
  *) echo "usage: $0 pack CACHE_DIR OUT.txz | pack-stages SWEEP_DIR OUT.txz | bundle DIR | setup | optimize | sweep | compare (settings in the environment)" >&2; exit 2 ;;
esac
