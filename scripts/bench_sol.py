#!/usr/bin/env python
"""Time `solforge sol --gpu <gpu> --no-cache` cold over every shared problem (issue 4: < 60 s).

Each run is a fresh `python -m solforge.cli sol` process with no counts cache (--no-cache), so it pays
the torch import, the reference imports and every trace. Prints, per GPU profile: wall seconds, CPU
seconds (the process and its worker processes), the 1-minute load average before and after (the box is
shared), how many workloads were traced / fitted / analytic / unsupported, and writes the same lines to
data/results/bench_sol.txt (--out).

    .venv/bin/python scripts/bench_sol.py [--gpu h200 --gpu b200] [--repeat 2] [--jobs 2] [--root ...]
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


def run_once(gpu: str, jobs: int, root: str | None, csv_path: Path) -> dict:
    cmd = [sys.executable, "-m", "solforge.cli", "sol", "--gpu", gpu, "--no-cache", "--jobs", str(jobs),
           "--csv", str(csv_path), "--json"]
    if root:
        cmd += ["--root", root]
    load0 = os.getloadavg()[0]
    c0 = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    c1 = os.times()
    load1 = os.getloadavg()[0]
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = list(csv.DictReader(csv_path.open()))
    methods = Counter(r["method"] if r["status"] == "ok" else "unsupported" for r in rows)
    return {"gpu": gpu, "wall_s": wall,
            "cpu_s": (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system),
            "load_before": load0, "load_after": load1, "problems": len({r["problem"] for r in rows}),
            "workloads": len(rows), "methods": dict(methods), "cmd": " ".join(cmd[1:])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="append", help="profiles to time (default: h200 and b200)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="time each profile this many times (the box is "
                                                          "shared: one run says little about the spread)")
    ap.add_argument("--root", default=None, help="problem folder (default: the CLI's default)")
    ap.add_argument("--out", default=str(REPO / "data" / "results" / "bench_sol.txt"))
    args = ap.parse_args(argv)
    lines = [f"bench_sol: cold `solforge sol --no-cache` over all problems, jobs={args.jobs}, "
             f"{os.cpu_count()} CPUs, {platform.platform()}, python {platform.python_version()}",
             f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    print(lines[0], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in [g for _ in range(args.repeat) for g in (args.gpu or ["h200", "b200"])]:
            r = run_once(gpu, args.jobs, args.root, Path(tmp) / f"{gpu}.csv")
            line = (f"{gpu}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, load average (1 min) "
                    f"{r['load_before']:.1f} before / {r['load_after']:.1f} after; {r['problems']} problems, "
                    f"{r['workloads']} workloads: " +
                    ", ".join(f"{k} {v}" for k, v in sorted(r["methods"].items())) +
                    f"; {'PASS' if r['wall_s'] < 60 else 'OVER'} (< 60 s)")
            print(line, flush=True)
            lines.append(line)
            lines.append(f"  command: python {r['cmd']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
