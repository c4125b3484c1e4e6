#!/usr/bin/env python
"""Time `solforge sol --gpu <gpu> --no-cache` cold over every shared problem (issue 4: < 60 s).

Each run is a fresh `python -m solforge.cli sol` process with no counts cache (--no-cache), so it pays
the torch import, the reference imports and every trace. Prints, per GPU profile: wall seconds, CPU
seconds (the process and its worker processes), the CPU seconds other jobs took meanwhile (/proc/stat),
the load averages before and after as `uptime` shows them (the box is shared), how many workloads were
traced / fitted / analytic / unsupported, then min/median/max per profile, and writes the same lines
to data/results/cpu_benchmarks/bench_sol.txt (--out).

    .venv/bin/python benchmarks/bench_sol.py [--gpu h200 --gpu b200] [--repeat 2] [--jobs 2] [--root ...]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _cpu_ticks() -> int | None:
    """Busy CPU ticks of the whole machine so far (/proc/stat: all but idle and iowait)."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(f) - f[3] - (f[4] if len(f) > 4 else 0)


def _uptime_load(la) -> str:
    return "/".join(f"{x:.2f}" for x in la)


def run_once(gpu: str, jobs: int, root: str | None, csv_path: Path) -> dict:
    cmd = [sys.executable, "-m", "solforge.cli", "sol", "--gpu", gpu, "--no-cache", "--jobs", str(jobs),
           "--csv", str(csv_path), "--json"]
    if root:
        cmd += ["--root", root]
    load0 = os.getloadavg()
    busy0 = _cpu_ticks()
    c0 = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    c1 = os.times()
    busy1 = _cpu_ticks()
    load1 = os.getloadavg()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = list(csv.DictReader(csv_path.open()))
    methods = Counter(r["method"] if r["status"] == "ok" else "unsupported" for r in rows)
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    # CPU seconds the whole machine spent busy during the run, minus ours: what other jobs took
    others = None
    if busy0 and busy1:
        others = max(0.0, (busy1 - busy0) / os.sysconf("SC_CLK_TCK") - cpu)
    return {"gpu": gpu, "wall_s": wall, "cpu_s": cpu, "others_cpu_s": others,
            "load_before": load0, "load_after": load1, "problems": len({r["problem"] for r in rows}),
            "workloads": len(rows), "methods": dict(methods), "cmd": " ".join(cmd[1:])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", help="profiles to time (default: h200 and b200)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="time each profile this many times (the box is "
                                                          "shared: one run says little about the spread)")
    ap.add_argument("--root", default=None, help="problem folder (default: the CLI's default)")
    ap.add_argument("--out", default=str(REPO / "data" / "results" / "cpu_benchmarks" / "bench_sol.txt"))
    args = ap.parse_args(argv)
    lines = [f"bench_sol: cold `solforge sol --no-cache` over all problems, jobs={args.jobs}, "
             f"{os.cpu_count()} CPUs, {platform.platform()}, python {platform.python_version()}",
             f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    print(lines[0], flush=True)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in [g for _ in range(args.repeat) for g in (args.gpu or ["h200", "b200"])]:
            r = run_once(gpu, args.jobs, args.root, Path(tmp) / f"{gpu}.csv")
            runs.append(r)
            others = "" if r["others_cpu_s"] is None else f", other jobs' CPU {r['others_cpu_s']:.0f} s"
            line = (f"{time.strftime('%H:%M:%S')} {gpu}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s"
                    f"{others}, load average (1/5/15 min, as uptime) "
                    f"{_uptime_load(r['load_before'])} before / "
                    f"{_uptime_load(r['load_after'])} after; {r['problems']} problems, "
                    f"{r['workloads']} workloads: " +
                    ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items())) +
                    f"; {'PASS' if r['wall_s'] < 60 else 'OVER'} (< 60 s)")
            print(line, flush=True)
            lines.append(line)
            lines.append(f"  command: python {r['cmd']}")
    for gpu in sorted({r["gpu"] for r in runs}):
        w = sorted(r["wall_s"] for r in runs if r["gpu"] == gpu)
        line = (f"summary {gpu}: {len(w)} cold runs, wall min {w[0]:.1f} / median {w[len(w) // 2]:.1f} / "
                f"max {w[-1]:.1f} s; {sum(x < 60 for x in w)}/{len(w)} under 60 s, "
                f"{sum(x <= 40 for x in w)}/{len(w)} at most 40 s")
        print(line, flush=True)
        lines.append(line)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
