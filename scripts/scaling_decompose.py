#!/usr/bin/env python3
"""Where the two-GPU run's equal-work time goes, from the DBs of scripts/scaling_run_h200x2.sh: the
first N evaluations of both runs (N = all the shorter one did) split into what each GPU-second was for.

    .venv/bin/python scripts/scaling_decompose.py ONE.duckdb[.gz] TWO.duckdb[.gz] [--out MD]

t(N) ~ (GPU-seconds of the first N evaluations) / (GPU-seconds per wall second), so the equal-work
ratio t1/t2 = (occupancy ratio) x (GPU-seconds 1 GPU / GPU-seconds 2 GPUs). The 2-GPU run's extra
GPU-seconds are split into:
  launch waits   the `launch` phase of each evaluation (the first evaluation on each GPU waited for the
                 fork server's imports here until the fork server was waited for before the clock)
  same work      the other phases of the candidates both runs evaluated among their first N
  other work     candidates only one run evaluated among its first N (a different schedule)
Also: the kernels' own GPU times of the same (candidate, workload) in both runs (eval_results
median_ms), to tell a slower GPU from a slower host.
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import sys
from pathlib import Path

from scaling_summary import EVALUATED, connect


def evaluations(path: Path) -> list[dict]:
    con = connect(path)
    rows = con.execute(
        f"SELECT created_at, updated_at, gpu_seconds, problem, source_hash, eval_phases FROM attempts "
        f"WHERE {EVALUATED} ORDER BY updated_at").fetchall()
    t0 = min(r[0] for r in rows)
    out = []
    for c, u, g, prob, h, ph in rows:
        ph = json.loads(ph) if isinstance(ph, str) else (ph or {})
        out.append({"end": (u - t0).total_seconds(), "g": g, "key": (prob, h), "ph": ph})
    return out


def kernel_times(path: Path) -> dict:
    rows = connect(path).execute(
        "SELECT a.problem, a.source_hash, e.workload_uuid, e.median_ms FROM attempts a "
        "JOIN eval_results e ON e.attempt_id = a.id WHERE e.median_ms IS NOT NULL "
        "AND a.gpu_seconds IS NOT NULL").fetchall()
    return {(p, h, w): ms for p, h, w, ms in rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one", type=Path)
    ap.add_argument("two", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    one, two = evaluations(a.one), evaluations(a.two)
    n = min(len(one), len(two))
    o, t = one[:n], two[:n]
    t1, t2 = o[-1]["end"], t[-1]["end"]
    g1, g2 = sum(e["g"] for e in o), sum(e["g"] for e in t)
    l1 = sum(e["ph"].get("launch", 0) for e in o)
    l2 = sum(e["ph"].get("launch", 0) for e in t)
    d1, d2 = {e["key"]: e for e in o}, {e["key"]: e for e in t}
    com = set(d1) & set(d2)

    def work(d, keys):
        return sum(d[k]["g"] - d[k]["ph"].get("launch", 0) for k in keys)

    s1, s2 = work(d1, com), work(d2, com)
    x1, x2 = work(d1, set(d1) - com), work(d2, set(d2) - com)
    lines = [f"# Equal work, decomposed: {a.one.name} (1 GPU) vs {a.two.name} (2 GPUs), first N = {n}", "",
             f"t(N): {t1:.1f} s vs {t2:.1f} s, ratio {t1 / t2:.3f}; GPU-seconds per wall second "
             f"{g1 / t1:.3f} vs {g2 / t2:.3f} (occupancy ratio {(g2 / t2) / (g1 / t1):.3f}); GPU-seconds "
             f"{g1:.1f} vs {g2:.1f} ({g2 / g1:.3f}x)", "",
             "| GPU-seconds of the first N | 1 GPU | 2 GPUs | 2 GPUs - 1 GPU |", "|---|---|---|---|",
             f"| launch waits (`launch` phase) | {l1:.1f} | {l2:.1f} | {l2 - l1:+.1f} |",
             f"| same work: the {len(com)} candidates both evaluated, other phases | {s1:.1f} | {s2:.1f} | "
             f"{s2 - s1:+.1f} ({(s2 / s1 - 1) * 100:+.1f}%) |",
             f"| other work: {n - len(com)} candidates only one run evaluated | {x1:.1f} | {x2:.1f} | {x2 - x1:+.1f} |",
             f"| all | {g1:.1f} | {g2:.1f} | {g2 - g1:+.1f} |", ""]
    occ = (g2 / t2) / (g1 / t1)
    # the occupancy as measured, the GPU-seconds without what a change would remove
    lines.append(f"Ratio without the launch waits in both runs: {occ * (g1 - l1) / (g2 - l2):.3f}; "
                 f"also without the same-work growth: {occ * (g1 - l1) / (g2 - l2 - (s2 - s1)):.3f} "
                 "(occupancy as measured)")
    k1, k2 = kernel_times(a.one), kernel_times(a.two)
    ks = [k for k in k1 if k in k2]
    if ks:
        r = [k2[k] / k1[k] for k in ks]
        lines += ["", f"Kernel GPU times of the same (candidate, workload) in both runs: {len(ks)} pairs, "
                      f"median ratio {st.median(r):.4f}, mean {st.mean(r):.4f} (2 GPUs / 1 GPU)"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
