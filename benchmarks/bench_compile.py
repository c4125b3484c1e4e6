"""Compile speed: NVRTC (through solforge.compile) vs nvcc on the same kernels, CuTe DSL, cache hits.

    .venv/bin/python benchmarks/bench_compile.py [--reps 21] [--out data/results/cpu_benchmarks/bench_compile.txt]

nvcc (/usr/local/bin/nvcc, CUDA 13.0) is used here ONLY as the comparison baseline; solforge never
calls it. It gets the same source, -arch, -std, params (-D) and cubin output, with -O3 spelled out
(NVRTC's default); the SASS of both cubins is compared at the end. Each NVRTC/CuTe compile bypasses
the result cache (use_cache=False) with a warm worker process, as a long-running pipeline sees it;
NVRTC's precompiled headers (solforge/compile/pch.py) are on unless a row says otherwise.

"wall e2e" is compile_candidate's wall time (worker IPC and cubin checks included), "wall compiler"
the time inside the worker, "cpu" the CPU seconds of the worker and the caller for the compile
(nvcc: CPU of all its processes; CuTe: the compile's forked child). This machine is shared: wall
times follow the load (load average and CPU pressure are printed per section), CPU times much less,
so ratios are given both ways. NVRTC and nvcc runs are interleaved so both see the same load.
p50 = median.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
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
LOADS: list[float] = []
PRESSURE: list[float | None] = []


def p50(xs):
    return statistics.median(xs)


def load() -> float:
    LOADS.append(os.getloadavg()[0])
    PRESSURE.append(cpu_pressure())
    return LOADS[-1]


def cpu_pressure() -> float | None:
    """Share of the last 10 s in which some runnable task waited for a CPU (Linux PSI), in %: unlike
    the load average it says directly how much a compile here had to queue."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def nvrtc_once(cand: dict, **kw) -> tuple[float, float, float, dict]:
    """(wall e2e, wall in the worker, CPU of worker + caller, cubins) of one compile."""
    c0 = time.process_time()
    r = compile_candidate(cand, use_cache=False, **kw)
    caller_cpu = time.process_time() - c0  # validation, IPC, result: part of NVRTC's cost here
    assert r.ok, r.log
    return r.seconds, r.compile_seconds, r.compile_cpu_seconds + caller_cpu, r.cubins


def nvcc_cmd(d: Path, params: dict) -> list[str]:
    return [NVCC, "-cubin", "-arch=sm_90a", "-std=c++17", "-O3", *(f"-D{k}={v}" for k, v in params.items()),
            "-o", str(d / "k.cubin"), str(d / "kernel.cu")]


def nvcc_once(cmd: list[str]) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime


class Series:
    def __init__(self):
        self.wall, self.inner, self.cpu = [], [], []

    def add(self, wall, inner=None, cpu=None):
        self.wall.append(wall)
        if inner is not None:
            self.inner.append(inner)
        if cpu is not None:
            self.cpu.append(cpu)


def bench_kernel(cand: dict, reps: int, sweep: list[dict] | None):
    """NVRTC (PCH), NVRTC without PCH, NVRTC first compile of an include block, nvcc: interleaved."""
    src, params = cand["sources"]["kernel.cu"], cand["params"]
    pch, nopch, cold, nv, sw = Series(), Series(), Series(), Series(), Series()
    nvrtc_once(cand)                       # worker start, PCH of this include block made
    nvrtc_once(cand, pch=False)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "kernel.cu").write_text(src)
        cmd = nvcc_cmd(d, params)
        nvcc_once(cmd)                     # file cache warm
        for i in range(reps):
            w, c, cpu, cubins = nvrtc_once(cand)
            pch.add(w, c, cpu)
            w, c, cpu, ref = nvrtc_once(cand, pch=False)
            nopch.add(w, c, cpu)
            assert ref == cubins, "PCH changed the cubin"
            if sweep:
                w, c, cpu, _ = nvrtc_once({**cand, "params": sweep[i % len(sweep)]})
                sw.add(w, c, cpu)
            if i % 3 == 0:
                # a new option set: new PCH key, so this compile makes the PCH (what a worker pays once)
                w, c, cpu, _ = nvrtc_once({**cand, "options": [f"-DBENCH_COLD_{os.getpid()}_{i}=1"]})
                cold.add(w, c, cpu)
                w, cpu = nvcc_once(cmd)
                nv.add(w, cpu=cpu)
        nv_cubin = (d / "k.cubin").read_bytes()
    return pch, nopch, cold, nv, sw, cubins, nv_cubin


def bench_cute(reps: int) -> tuple[Series, float]:
    t0 = time.perf_counter()
    first = compile_candidate(samples.cute_candidate(block=32), use_cache=False)  # worker: import + warm-up
    start = time.perf_counter() - t0
    assert first.ok, first.log
    s = Series()
    for i in range(reps):
        # a new block size each time, so no cache in the DSL can answer
        r = compile_candidate(samples.cute_candidate(block=64 + 32 * i), use_cache=False)
        assert r.ok, r.log
        s.add(r.seconds, r.compile_seconds, r.compile_cpu_seconds)
    return s, start


def bench_cache_hit(reps: int, cache_dir: Path) -> Series:
    cand = samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4})
    assert compile_candidate(cand, cache_dir=cache_dir).ok
    s = Series()
    for _ in range(reps):
        r = compile_candidate(cand, cache_dir=cache_dir)
        assert r.cache_hit
        s.add(r.seconds)
    return s


def sass(blob: bytes) -> list[str] | None:
    """Instructions of a cubin (cuobjdump from the wheel), addresses and encodings stripped."""
    import nvidia

    tool = next((Path(p) / "cu13" / "bin" for p in nvidia.__path__ if (Path(p) / "cu13/bin/cuobjdump").exists()),
                None)
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(blob)
        f.flush()
        out = subprocess.run([str(tool / "cuobjdump"), "-sass", f.name], capture_output=True, text=True,
                             env={**os.environ, "PATH": f"{tool}{os.pathsep}{os.environ.get('PATH', '')}"}).stdout
    return [re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln).split(";")[0].strip()
            for ln in out.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]


def _psi(v) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def fmt_row(what, s: Series | None, target=None, single=None) -> str:
    if single is not None:
        e2e, inner, cpu, mx = single, None, None, single
    else:
        e2e, mx = p50(s.wall), max(s.wall)
        inner = p50(s.inner) if s.inner else None
        cpu = p50(s.cpu) if s.cpu else None
    ok = "" if target is None else ("yes" if e2e <= target else "NO")
    cpu_ok = "" if target is None or cpu is None else ("yes" if cpu <= target else "NO")
    f = lambda v: "" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    return (f"{what:<58} {f(e2e):>9} {f(inner):>9} {f(cpu):>9} {f(mx):>9} "
            f"{'' if target is None else f'{target * 1e3:.0f}':>7}  {ok:<3} {cpu_ok}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    reps = args.reps
    load0 = load()

    kernels = [
        ("plain kernel (scale)", samples.candidate(samples.SCALE_CU, "scale"), 0.100, None),
        ("bf16/fp8 headers (dequant)",
         samples.candidate(samples.DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4}), 1.5,
         [{"VEC": v} for v in (1, 2, 8, 16)]),
        ("wgmma + TMA inline PTX", samples.candidate(samples.WGMMA_TMA_CU, "wgmma_tma_tile"), None, None),
    ]
    rows, ratios, sass_lines, section_loads = [], [], [], []
    for label, cand, target, sweep in kernels:
        before, psi0 = load(), PRESSURE[-1]
        pch, nopch, cold, nv, sw, cubin, nv_cubin = bench_kernel(cand, reps, sweep)
        section_loads.append(f"{label}: {before:.1f}->{load():.1f} ({_psi(psi0)}->{_psi(PRESSURE[-1])})")
        rows.append(fmt_row(f"NVRTC {label}", pch, target))
        if sweep:
            rows.append(fmt_row(f"NVRTC {label}, new params each compile", sw, target))
        rows.append(fmt_row(f"NVRTC {label}, no PCH", nopch))
        rows.append(fmt_row(f"NVRTC {label}, first with its headers", cold))
        rows.append(fmt_row(f"nvcc  {label} (baseline)", nv))
        ratios.append((label, p50(pch.wall) / p50(nv.wall), p50(pch.cpu) / p50(nv.cpu),
                       p50(nopch.wall) / p50(nv.wall), p50(nopch.cpu) / p50(nv.cpu)))
        a, b = sass(cubin["kernel.cu"]), sass(nv_cubin)
        if a is not None:
            diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
            sass_lines.append(f"  {label:<44} NVRTC {len(a)} / nvcc {len(b)} instructions, "
                              + ("identical" if a == b else f"{diff} differ"))
    before, psi0 = load(), PRESSURE[-1]
    cute, cute_start = bench_cute(max(5, reps // 2))
    rows.append(fmt_row("CuTe DSL elementwise, after import", cute, 0.5))
    rows.append(fmt_row("CuTe DSL worker start (import + warm-up)", None, single=cute_start))
    with tempfile.TemporaryDirectory() as d:
        hits = bench_cache_hit(reps * 4, Path(d))
    rows.append(fmt_row("cache hit (lookup + load cubins)", hits, 0.005))
    section_loads.append(f"CuTe + cache: {before:.1f}->{load():.1f} ({_psi(psi0)}->{_psi(PRESSURE[-1])})")

    nvcc_version = subprocess.run([NVCC, "--version"], capture_output=True, text=True).stdout.splitlines()[-1]
    lines = [
        f"# bench_compile  {time.strftime('%Y-%m-%d %H:%M:%S')}  host={platform.node()} cpus={os.cpu_count()} "
        f"python={platform.python_version()}",
        f"# load average (1 min) start/end {load0:.1f}/{load():.1f}, over the run min/median/max "
        f"{min(LOADS):.1f}/{p50(LOADS):.1f}/{max(LOADS):.1f} on {os.cpu_count()} cores (other work shares them)",
        f"#   per section, load average (CPU pressure: % of the last 10 s some task waited for a CPU): "
        f"{'; '.join(section_loads)}",
        f"# {compiler_identity('cuda')[1]}",
        f"# {compiler_identity('cute')[1]};  nvcc baseline: {NVCC} ({nvcc_version})",
        f"# reps={reps} (nvcc and 'first with its headers': every 3rd rep); arch sm_90a; times in ms; p50 = median",
        "# 'first with its headers': the first compile of an #include block + option set in a worker (makes the"
        " PCH); 'new params each compile': a param sweep reusing that PCH; 'no PCH': params as -D, no PCH",
        "# 'ok' compares the p50 wall e2e with the target, the last column the p50 CPU",
        f"{'what':<58} {'wall e2e':>9} {'compiler':>9} {'cpu':>9} {'max wall':>9} {'target':>7}  ok  cpu ok",
        *rows,
        "",
        "NVRTC / nvcc on the same kernel, target <= 0.1     wall p50   CPU p50   (no PCH: wall   CPU)",
    ]
    for label, rw, rc, nw, nc in ratios:
        ok = "yes" if max(rw, rc) <= 0.1 else ("CPU yes" if rc <= 0.1 else "NO")
        lines.append(f"  {label:<46} {rw:>9.3f} {rc:>9.3f}   ({nw:.3f} {nc:.3f})  {ok}")
    if sass_lines:
        lines.append("SASS of the NVRTC cubin vs the nvcc cubin (same -O3 code generation):")
        lines.extend(sass_lines)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
