#!/usr/bin/env python
"""Compare our B200 speed of light with NVIDIA's published per-workload sol_ms (SOL-ExecBench).

For every shared problem: count (cached), price on the b200 profile, ratio = ours / NVIDIA's per
workload, then per problem the geometric mean over its workloads. Prints the distribution (median,
quantiles, share within [0.5, 2], worst outliers) and writes data/results/roofline_validation/roofline_validation_b200.csv
(one row per problem) and data/results/roofline_validation/roofline_b200_workloads.csv (one row per workload).

    .venv/bin/python benchmarks/validate_roofline.py --no-cache [--root ../shared/sol_execbench] [--jobs 2]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solforge.roofline.batch import count_many, problem_dirs  # noqa: E402
from solforge.roofline.hardware import load_profile  # noqa: E402
from solforge.roofline.score import geomean  # noqa: E402
from solforge.roofline.table import price, rows_for_csv, write_csv  # noqa: E402
from solforge.settings import get  # noqa: E402


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _compare_one(path: str) -> dict:
    """Count one problem both ways: fitted (fit.py) and every workload traced; report differences."""
    import torch

    from solforge.problem.loader import load_problem_dir
    from solforge.roofline.sandboxed import count_problem

    torch.set_num_threads(1)
    d = Path(path)
    p = load_problem_dir(d, d.parent.name)
    t0 = time.perf_counter()
    fitted = count_problem(p, fit=True)
    t1 = time.perf_counter()
    traced = count_problem(p, fit=False)
    t2 = time.perf_counter()

    def rel(a: float, b: float) -> float:
        return abs(a - b) / max(abs(a), abs(b), 1e-300)

    diffs = []
    for a, b in zip(fitted, traced):
        if a.status != b.status:
            diffs.append(f"workload {a.index} ({a.method}): {a.status.value} vs traced {b.status.value}")
            continue
        worst = max([rel(a.bytes, b.bytes)] + [rel(a.flops.get(u, 0.0), b.flops.get(u, 0.0))
                                               for u in set(a.flops) | set(b.flops)])
        if worst > 1e-6:
            diffs.append(f"workload {a.index} ({a.method}): relative difference {worst:.2e}")
    return {"problem": f"{d.parent.name}/{d.name}", "workloads": len(fitted),
            "fitted": sum(c.method == "fit" for c in fitted), "fit_s": t1 - t0, "trace_s": t2 - t1,
            "diffs": diffs}


def compare_trace(dirs: list[Path], jobs: int, out: Path) -> int:
    """--compare-trace: fitted counts against tracing every workload, for every problem."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from solforge.roofline.sandboxed import warm

    warm()
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        rows = list(ex.map(_compare_one, [str(d) for d in dirs]))
    n = sum(r["workloads"] for r in rows)
    nf = sum(r["fitted"] for r in rows)
    lines = [f"fitted vs traced, every workload of {len(rows)} problems: {n} workloads, {nf} fitted "
             f"(the rest traced or analytic); counting time {sum(r['fit_s'] for r in rows):.0f} s fitted, "
             f"{sum(r['trace_s'] for r in rows):.0f} s traced (CPU-bound, one process each)",
             f"problems with a difference (relative > 1e-6 in FLOPs of a unit or bytes, or status): "
             f"{sum(1 for r in rows if r['diffs'])}"]
    for r in rows:
        for d in r["diffs"]:
            lines.append(f"  {r['problem']}: {d}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(get().shared_dir / "sol_execbench"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--cache-dir", default=str(get().cache_dir), help="counts cache (default ~/.cache/solforge)")
    ap.add_argument("--cached-only", action="store_true",
                    help="use only problems whose counts are already cached (a partial report)")
    ap.add_argument("--max-workloads", type=int, default=None,
                    help="count only the first N workloads of each problem (a sample, to save time)")
    ap.add_argument("--no-latency", action="store_true",
                    help="price without the profile's fixed per-kernel latency (pure roofline)")
    ap.add_argument("--out", default=str(REPO / "data" / "results" / "roofline_validation" / "roofline_validation_b200.csv"))
    ap.add_argument("--workloads-out", default=str(REPO / "data" / "results" / "roofline_validation" / "roofline_b200_workloads.csv"))
    ap.add_argument("--compare-trace", action="store_true",
                    help="instead: count every problem fitted and fully traced, report any difference "
                         "(writes data/results/roofline_validation/roofline_fit_vs_trace.txt)")
    args = ap.parse_args(argv)
    if args.compare_trace:
        return compare_trace(problem_dirs(Path(args.root)), args.jobs,
                             REPO / "data" / "results" / "roofline_validation" / "roofline_fit_vs_trace.txt")

    profile = load_profile("b200")
    if args.no_latency:
        profile = profile.model_copy(update={"latency_s": 0.0})
    dirs = problem_dirs(Path(args.root))
    t0, c0, load0 = time.perf_counter(), os.times(), os.getloadavg()[0]
    if args.cached_only:
        from solforge.problem.loader import load_problem_dir
        from solforge.roofline.batch import cached_only

        counted = [pc for d in dirs
                   if (pc := cached_only(load_problem_dir(d, d.parent.name), Path(args.cache_dir)))]
    else:
        items = dirs
        if args.max_workloads:
            from solforge.problem.loader import load_problem_dir

            items = []
            for d in dirs:
                p = load_problem_dir(d, d.parent.name)
                p.workloads = p.workloads[:args.max_workloads]
                items.append(p)
        counted = count_many(items, None if args.no_cache else Path(args.cache_dir), jobs=args.jobs)
    seconds, c1 = time.perf_counter() - t0, os.times()
    cpu = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user", "children_system"))
    load = max(load0, os.getloadavg()[0])

    per_problem, all_rows = [], []
    for pc in counted:
        rls = price(pc, profile)
        rows = rows_for_csv(pc, rls)
        all_rows += rows
        ratios = [r["ratio_to_nvidia"] for r in rows if r["ratio_to_nvidia"]]
        unsupported = sum(1 for r in rls if r.t_sol_ms is None)
        limiters: dict[str, int] = {}
        for r in rls:
            if r.limiter:
                limiters[r.limiter] = limiters.get(r.limiter, 0) + 1
        per_problem.append({
            "problem": pc.name, "subset": pc.subset, "workloads": len(rls),
            "compared": len(ratios), "unsupported": unsupported,
            "ratio_geomean": geomean(ratios),
            "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            "ours_ms_geomean": geomean([r.t_sol_ms for r in rls if r.t_sol_ms]),
            "nvidia_ms_geomean": geomean([r["nvidia_sol_ms"] for r in rows if r["nvidia_sol_ms"]]),
            "limiters": ";".join(f"{k}={v}" for k, v in sorted(limiters.items())),
            "method": ",".join(sorted({c.method for c in pc.counts})),
            "reason": next((r.reason for r in rls if r.reason and r.t_sol_ms is None), ""),
        })

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = list(per_problem[0].keys())
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in per_problem:
            w.writerow({k: ("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v))
                        for k, v in r.items()})
    write_csv(Path(args.workloads_out), all_rows)

    ratios = [r["ratio_geomean"] for r in per_problem if r["ratio_geomean"]]
    wl_ratios = [r["ratio_to_nvidia"] for r in all_rows if r["ratio_to_nvidia"]]
    n = len(ratios)
    within = sum(1 for x in ratios if 0.5 <= x <= 2.0)
    print(f"B200 profile: {profile.display_name}; latency term {profile.latency_s * 1e6:.2f} us")
    print(f"problems: {len(per_problem)} of {len(dirs)}, compared: {n}, workloads compared: {len(wl_ratios)} "
          f"of {len(all_rows)}, unsupported workloads: {sum(r['unsupported'] for r in per_problem)}")
    methods: dict[str, int] = {}
    for r in all_rows:
        k = r["method"] if r["status"] == "ok" else "unsupported"
        methods[k] = methods.get(k, 0) + 1
    print(f"counting time: {seconds:.1f} s wall, {cpu:.1f} s CPU, load average {load:.1f} "
          f"(jobs={args.jobs}, cache={'off' if args.no_cache else 'on'}); workloads by method: "
          + ", ".join(f"{k} {v}" for k, v in sorted(methods.items())))
    print("per-problem ratio ours/NVIDIA (geomean over workloads):")
    print(f"  median {statistics.median(ratios):.3f}   geomean {geomean(ratios):.3f}")
    print("  quantiles  " + "  ".join(f"p{int(q * 100):02d}={quantile(ratios, q):.3f}"
                                       for q in (0.05, 0.10, 0.25, 0.5, 0.75, 0.90, 0.95)))
    print(f"  within [0.5, 2]: {within}/{n} = {within / n:.1%}   within [0.8, 1.25]: "
          f"{sum(1 for x in ratios if 0.8 <= x <= 1.25) / n:.1%}")
    wl_within = sum(1 for x in wl_ratios if 0.5 <= x <= 2.0)
    print(f"per-workload: median {statistics.median(wl_ratios):.3f}, within [0.5, 2]: "
          f"{wl_within / len(wl_ratios):.1%}")
    worst = sorted(per_problem, key=lambda r: -abs(math.log(r["ratio_geomean"]))
                   if r["ratio_geomean"] else 0)[:15]
    print("worst outliers:")
    for r in worst:
        if r["ratio_geomean"]:
            print(f"  {r['ratio_geomean']:8.3f}  {r['subset']:17s} {r['problem'][:60]:60s} {r['limiters']}")
    fails = [r for r in per_problem if r["unsupported"]]
    if fails:
        print("unsupported:")
        for r in fails:
            print(f"  {r['problem']}: {r['unsupported']}/{r['workloads']} {r['reason'][:150]}")
    print(f"wrote {out} and {args.workloads_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
