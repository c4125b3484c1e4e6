"""Compile speed: NVRTC (through solforge.compile) vs nvcc on the same kernels, CuTe DSL, cache hits.

    .venv/bin/python scripts/bench_compile.py [--reps 15] [--out data/results/bench_compile.txt]

nvcc (/usr/local/bin/nvcc, CUDA 13.0) is used here ONLY as the comparison baseline; solforge never
calls it. Each NVRTC/CuTe compile bypasses the cache (use_cache=False) with a warm worker process,
as a long-running pipeline sees it. "end-to-end" is compile_candidate's wall time (worker IPC and
cubin checks included); "compiler" is the time inside the worker.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solforge.compile import compile_candidate, samples  # noqa: E402
from solforge.compile.api import compiler_identity  # noqa: E402

NVCC = "/usr/local/bin/nvcc"  # baseline only


def p50(xs):
    return statistics.median(xs)


def bench_nvrtc(cand: dict, reps: int) -> tuple[list[float], list[float], list[float]]:
    compile_candidate(cand, use_cache=False)  # start + warm the worker
    e2e, inner, cpu = [], [], []
    for _ in range(reps):
        r = compile_candidate(cand, use_cache=False)
        assert r.ok, r.log
        e2e.append(r.seconds)
        inner.append(r.compile_seconds)
        cpu.append(r.compile_cpu_seconds)
    return e2e, inner, cpu


def bench_nvcc(source: str, params: dict, reps: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "kernel.cu"
        src.write_text(source)
        cmd = [NVCC, "-cubin", "-arch=sm_90a", "-std=c++17", *(f"-D{k}={v}" for k, v in params.items()),
               "-o", str(Path(d) / "k.cubin"), str(src)]
        subprocess.run(cmd, check=True, capture_output=True)  # warm the file cache
        out, cpu = [], []
        for _ in range(reps):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            out.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        return out, cpu


def bench_cute(reps: int) -> tuple[list[float], list[float], float]:
    t0 = time.perf_counter()
    first = compile_candidate(samples.cute_candidate(block=32), use_cache=False)  # worker: import + warm-up
    start = time.perf_counter() - t0
    assert first.ok, first.log
    e2e, inner = [], []
    for i in range(reps):
        # a new block size each time, so no cache in the DSL can answer
        r = compile_candidate(samples.cute_candidate(block=64 + 32 * i), use_cache=False)
        assert r.ok, r.log
        e2e.append(r.seconds)
        inner.append(r.compile_seconds)
    return e2e, inner, start


def bench_cache_hit(reps: int, cache_dir: Path) -> list[float]:
    cand = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4})
    assert compile_candidate(cand, cache_dir=cache_dir).ok
    out = []
    for _ in range(reps):
        r = compile_candidate(cand, cache_dir=cache_dir)
        assert r.cache_hit
        out.append(r.seconds)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    reps = args.reps
    load0 = os.getloadavg()[0]

    plain = samples.candidate(samples.SCALE_CU, "scale")
    headers = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4})
    wgmma = samples.candidate(samples.WGMMA_TMA_CU, "wgmma_tma_tile")

    rows = []
    res, res_cpu = {}, {}
    for label, cand, target in [("plain kernel (scale)", plain, 0.100),
                                ("bf16/fp8 headers (dequant)", headers, 1.5),
                                ("wgmma + TMA inline PTX", wgmma, None)]:
        e2e, inner, cpu = bench_nvrtc(cand, reps)
        nv, nv_cpu = bench_nvcc(cand["sources"]["kernel.cu"], cand["params"], max(3, reps // 3))
        res[label] = (p50(e2e), p50(nv))
        res_cpu[label] = (p50(cpu), p50(nv_cpu))
        rows.append((f"NVRTC {label}", p50(e2e), p50(inner), max(e2e), target, p50(cpu)))
        rows.append((f"nvcc  {label} (baseline)", p50(nv), None, max(nv), None, p50(nv_cpu)))
    cute_e2e, cute_inner, cute_start = bench_cute(max(5, reps // 2))
    rows.append(("CuTe DSL elementwise, after import", p50(cute_e2e), p50(cute_inner), max(cute_e2e), 0.5,
                 None))
    rows.append(("CuTe DSL worker start (import + warm-up)", cute_start, None, cute_start, None, None))
    with tempfile.TemporaryDirectory() as d:
        hits = bench_cache_hit(reps * 4, Path(d))
    rows.append(("cache hit (lookup + load cubins)", p50(hits), None, max(hits), 0.005, None))

    lines = []
    lines.append(f"# bench_compile  {time.strftime('%Y-%m-%d %H:%M:%S')}  host={platform.node()} "
                 f"cpus={os.cpu_count()} python={platform.python_version()} "
                 f"loadavg(1m) at start/end={load0:.1f}/{os.getloadavg()[0]:.1f} (other work shares these cores)")
    lines.append(f"# {compiler_identity('cuda')[1]}")
    lines.append(f"# {compiler_identity('cute')[1]};  nvcc baseline: {NVCC} "
                 f"({subprocess.run([NVCC, '--version'], capture_output=True, text=True).stdout.splitlines()[-1]})")
    lines.append(f"# reps={reps}; arch sm_90a; times in ms; p50 = median")
    lines.append(f"{'what':<46} {'p50 e2e':>9} {'p50 compiler':>13} {'p50 cpu':>9} {'max':>9} "
                 f"{'target':>8}  ok")
    for what, e2e, inner, mx, target, cpu in rows:
        ok = "" if target is None else ("yes" if e2e <= target else "NO")
        lines.append(f"{what:<46} {e2e * 1e3:>9.1f} {'' if inner is None else f'{inner * 1e3:.1f}':>13} "
                     f"{'' if cpu is None else f'{cpu * 1e3:.1f}':>9} "
                     f"{mx * 1e3:>9.1f} {'' if target is None else f'{target * 1e3:.0f}':>8}  {ok}")
    lines.append("")
    lines.append(f"{'NVRTC / nvcc ratio (p50 e2e), target <= 0.1':<46}")
    for label, (n, c) in res.items():
        ratio = n / c
        lines.append(f"  {label:<44} {ratio:>9.3f}  {'yes' if ratio <= 0.1 else 'NO'}")
    lines.append(f"{'NVRTC / nvcc ratio (p50 CPU seconds; load-proof)':<46}")
    for label, (n, c) in res_cpu.items():
        ratio = n / c
        lines.append(f"  {label:<44} {ratio:>9.3f}  {'yes' if ratio <= 0.1 else 'NO'}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
