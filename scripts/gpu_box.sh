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

case "${1:-}" in
  pack) shift; pack "$@" ;;
  setup) setup ;;
  optimize) optimize ;;
  *) echo "usage: $0 pack CACHE_DIR OUT.txz | setup | optimize (settings in the environment)" >&2; exit 2 ;;
esac
