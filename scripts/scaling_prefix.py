#!/usr/bin/env python3
"""Two GPUs vs one at equal work: the time each optimize run took to finish its first N evaluations.

Evaluations per minute over a whole wall-clock budget compare different work: the run on two GPUs gets
further into the planner's schedule, where the budget goes to the problems with the most SOL left to
gain (the GEMMs: 6-7 s evaluations instead of 2-3 s). The first N evaluations of both runs follow the
same schedule (exploration round: each problem's first guesses), so t_1gpu(N) / t_2gpu(N) is the
speed-up on the same work. Also printed: GPU-seconds of evaluation per wall second (slot occupancy).

    .venv/bin/python scripts/scaling_prefix.py ONE.duckdb[.gz] TWO.duckdb[.gz] [--step 4] [--skip 2] [--out FILE]

The last lines: the ratio at the largest N both runs reached (with an attempt budget the same for both,
`OPT_EXTRA="--budget-attempts B"` in scripts/scaling_run_h200x2.sh, that is all of the work), and the
steady rate from the --skip-th finish on (the one-off start-up left out of both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaling_summary import EVALUATED, connect


def finish_times(path: Path) -> tuple[list[float], float]:
    """Seconds from the first evaluation's start to each evaluation's end, sorted; total GPU-seconds."""
    rows = connect(path).execute(
        f"SELECT created_at, updated_at, gpu_seconds FROM attempts WHERE {EVALUATED} "
        "ORDER BY updated_at").fetchall()
    if not rows:
        raise SystemExit(f"{path}: no evaluated attempts")
    t0 = min(r[0] for r in rows)
    return [(r[1] - t0).total_seconds() for r in rows], sum(r[2] for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one", type=Path)
    ap.add_argument("two", type=Path)
    ap.add_argument("--step", type=int, default=4)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--skip", type=int, default=2,
                    help="the steady-rate line starts its clock at this many finishes (default 2: "
                         "each GPU of the two-GPU run has finished its first evaluation)")
    a = ap.parse_args(argv)
    t1, g1 = finish_times(a.one)
    t2, g2 = finish_times(a.two)
    n = min(len(t1), len(t2))
    lines = [f"# equal work: time to finish the first N evaluations, 1 GPU ({a.one.name}) vs 2 GPUs ({a.two.name})",
             f"# 1 GPU: {len(t1)} evaluations in {t1[-1]:.1f} s, {g1 / t1[-1]:.2f} GPU-seconds per second; "
             f"2 GPUs: {len(t2)} in {t2[-1]:.1f} s, {g2 / t2[-1]:.2f} GPU-seconds per second "
             f"(ratio {g2 / t2[-1] / (g1 / t1[-1]):.3f})",
             "N      t_1gpu_s  t_2gpu_s  speed-up"]
    ks = sorted(set(list(range(10, n + 1, a.step)) + [n]))
    ratios = []
    for k in ks:
        r = t1[k - 1] / t2[k - 1]
        ratios.append(r)
        lines.append(f"{k:<6} {t1[k - 1]:9.1f} {t2[k - 1]:9.1f} {r:9.3f}")
    ratios.sort()
    lines.append(f"# at N = {n} (all the shorter run did): {t1[n - 1] / t2[n - 1]:.3f}x; "
                 f"median over the N above {ratios[len(ratios) // 2]:.3f}x, min {ratios[0]:.3f}x")
    m = a.skip
    if n > m + 1:
        # evaluations m+1..n: the clock starts at the m-th finish, so the one-off start-up (the first
        # evaluation on each GPU: fork server, first CUDA context, pipeline fill) is out of both
        r1 = (n - m) / (t1[n - 1] - t1[m - 1]) * 60
        r2 = (n - m) / (t2[n - 1] - t2[m - 1]) * 60
        lines.append(f"# steady rate, evaluations {m + 1}..{n} (clock from finish #{m}): 1 GPU "
                     f"{r1:.1f}/min, 2 GPUs {r2:.1f}/min: {r2 / r1:.3f}x")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
