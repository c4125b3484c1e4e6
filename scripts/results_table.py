#!/usr/bin/env python3
"""The README's results table, regenerated from a DuckDB file of `solforge optimize` runs.

    .venv/bin/python scripts/results_table.py data/results/db/optimize_h200.duckdb

Per problem: its best attempt (v_leaderboard), the geomean speedup over workloads against T_b (the
faster of eager and torch.compile where both were measured; which one is in the last column), the
SOL score on the H200 profile, and correctness (share of evaluated attempts correct on every workload).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solforge.roofline.score import geomean  # noqa: E402
from solforge.store import Store  # noqa: E402

_T_B = """
SELECT attempt_id, string_agg(DISTINCT baseline_variant, '+' ORDER BY baseline_variant) AS tb
FROM scores WHERE baseline_variant IS NOT NULL GROUP BY attempt_id
"""


def main(db: str, exclude: str | None = None) -> None:
    s = Store(db)
    tb = {r["attempt_id"]: r["tb"] for r in s.query(_T_B)}
    rows = s.query("SELECT * FROM v_leaderboard ORDER BY best_sol_score DESC NULLS LAST, problem")
    print("| problem | attempts | correct | speedup (geomean) | SOL score | T_b from |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        sp, sol = r["best_speedup_geomean"], r["best_sol_score"]
        print(f"| {r['problem']} | {r['attempts']} | {r['correctness'] or 0:.0%} | "
              f"{'%.2fx' % sp if sp else '-'} | {'%.3f' % sol if sol is not None else '-'} | "
              f"{tb.get(r['best_attempt_id'], '-')} |")
    print("\n" + summary(rows))
    if exclude:
        kept = [r for r in rows if not re.search(exclude, r["problem"])]
        print(f"without the problems matching {exclude!r}: " + summary(kept))


def summary(rows: list[dict]) -> str:
    scored = [r for r in rows if r["best_speedup_geomean"]]
    if not scored:
        return "no scored problems"
    g = geomean(r["best_speedup_geomean"] for r in scored)
    sols = sorted(r["best_sol_score"] for r in scored if r["best_sol_score"] is not None)
    return (f"{len(rows)} problems, {len(scored)} with a scored correct kernel; geomean speedup over "
            f"those {g:.2f}x; {sum(r['best_speedup_geomean'] > 1 for r in scored)} faster than T_b; "
            f"median SOL score {sols[len(sols) // 2]:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", nargs="?", default="solforge.duckdb")
    ap.add_argument("--exclude", help="regex over problem names: also print the summary without them "
                                      "(e.g. '01[4-7]_gqa': references that are Python loops)")
    a = ap.parse_args()
    main(a.db, a.exclude)
