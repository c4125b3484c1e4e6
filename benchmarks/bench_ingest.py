#!/usr/bin/env python3
"""Time a cold ingest of the SOL-ExecBench problems (and the FlashInfer-Trace tree) and print the
counts per subset.

Cold means a fresh Python process per repeat: imports and every cache start empty. Each repeat
reports wall time and CPU time (user+sys) of the ingest call alone, and of the process including
its imports. CPU time is the steadier number when the machine is shared.

    .venv/bin/python benchmarks/bench_ingest.py [--repeats 5] [--out data/results/cpu_benchmarks/bench_ingest.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir
CHILD = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from solforge.problem.sources import ingest_path
t1, c1 = time.perf_counter(), time.process_time()
r = ingest_path(sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_s": t1 - t0, "ingest_s": t2 - t1, "ingest_cpu_s": c2 - c1,
                  "total_s": t2 - t0, "total_cpu_s": c2 - c0, "counts": r.counts_by_subset(),
                  "errors": len(r.errors), "warnings": len(r.warnings)}))
"""


def run_once(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                         cwd=REPO, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(path: Path, repeats: int) -> tuple[list[str], dict]:
    runs = [run_once(path) for _ in range(repeats)]
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("import_s", "ingest_s", "ingest_cpu_s", "total_s", "total_cpu_s")}
    first = runs[0]
    assert all(r["counts"] == first["counts"] for r in runs), "counts differ between runs"
    n_p = sum(c["problems"] for c in first["counts"].values())
    n_w = sum(c["workloads"] for c in first["counts"].values())
    lines = [f"{path}: {n_p} problems, {n_w} workloads, {first['errors']} errors, "
             f"{first['warnings']} warnings"]
    for subset, c in first["counts"].items():
        lines.append(f"  {subset:<18} {c['problems']:>4} problems {c['workloads']:>6} workloads")
    lines.append(f"  ingest  median wall {med['ingest_s']:.2f} s, cpu {med['ingest_cpu_s']:.2f} s "
                 f"(runs: {', '.join('%.2f' % r['ingest_s'] for r in runs)})")
    lines.append(f"  process median wall {med['total_s']:.2f} s, cpu {med['total_cpu_s']:.2f} s "
                 f"(imports {med['import_s']:.2f} s)")
    return lines, med


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shared", type=Path, default=_shared_dir())
    ap.add_argument("--out", type=Path, help="also write the report here")
    ap.add_argument("--target-s", type=float, default=10.0, help="fail if the median ingest is slower")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    head = [f"# bench_ingest  {time.strftime('%Y-%m-%d %H:%M:%S')}  python {platform.python_version()}  "
            f"{os.cpu_count()} cpus  load(1m) {load:.2f}  repeats {args.repeats} (cold processes)",
            f"# command: .venv/bin/python benchmarks/bench_ingest.py --repeats {args.repeats}"]
    lines, med = bench(args.shared / "sol_execbench", args.repeats)
    fi_lines, _ = bench(args.shared / "flashinfer_trace", args.repeats)
    verdict = "OK" if med["ingest_s"] < args.target_s else "SLOW"
    report = "\n".join(head + lines + fi_lines +
                       [f"target: SOL-ExecBench ingest median < {args.target_s:.0f} s -> {verdict}"])
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
