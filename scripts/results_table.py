#!/usr/bin/env python3
"""The README's results table, regenerated from a DuckDB file of `solforge optimize` runs.

    .venv/bin/python scripts/results_table.py data/results/db/optimize_h200.duckdb

Per problem: its best attempt (v_leaderboard), the geomean speedup over workloads against T_b (the
faster of eager and torch.compile where both were measured; which one is in the last column), the
SOL score on the H200 profile, and correctness (share of evaluated attempts correct on every workload).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solforge.roofline.score import geomean  # noqa: E402
from solforge.store import Store  # noqa: E402

_T_B = """
SELECT attempt_id, string_agg(DISTINCT baseline_variant, '+' ORDER BY baseline_variant) AS tb
FROM scores WHERE baseline_variant IS NOT NULL GROUP BY attempt_id
"""


def main(db: str) -> None:
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
    scored = [r for r in rows if r["best_speedup_geomean"]]
    g = geomean(r["best_speedup_geomean"] for r in scored)
    sols = sorted(r["best_sol_score"] for r in scored if r["best_sol_score"] is not None)
    print(f"\n{len(rows)} problems, {len(scored)} with a scored correct kernel; geomean speedup over "
          f"those {g:.2f}x; {sum(r['best_speedup_geomean'] > 1 for r in scored)} faster than T_b; "
          f"median SOL score {sols[len(sols) // 2]:.3f}" if scored else "\nno scored problems")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "solforge.duckdb")
