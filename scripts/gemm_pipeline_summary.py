#!/usr/bin/env python3
"""FlashInfer-Bench GEMMs 004-011 through `solforge optimize`: per problem, its leaderboard attempt's
geomean speedup against T_b over all workloads and over the small-M ones (M <= 64), from a result DB.

    .venv/bin/python scripts/gemm_pipeline_summary.py data/results/db/optimize_cumulative_h200_s5.duckdb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solforge.roofline.score import geomean  # noqa: E402
from solforge.store import Store  # noqa: E402


def _x(g) -> str:
    return "-" if g is None else f"{g:.3f}x"


def main(db: str, small_m: int = 64) -> int:
    s = Store(db)
    rows = s.query("SELECT l.problem, l.best_attempt_id AS aid, s.speedup, w.axes FROM v_leaderboard l "
                   "JOIN scores s ON s.attempt_id = l.best_attempt_id JOIN workloads w "
                   "ON w.problem = l.problem AND w.uuid = s.workload_uuid "
                   "WHERE l.problem LIKE '0%_gemm_%' AND s.speedup IS NOT NULL ORDER BY l.problem")
    by: dict[str, list] = {}
    for r in rows:
        m = int(json.loads(r["axes"])["M"]) if isinstance(r["axes"], str) else int(r["axes"]["M"])
        by.setdefault(r["problem"], []).append((m, r["speedup"], r["aid"]))
    print(f"| problem | attempt | workloads | all M | M <= {small_m} |")
    print("|---|---|---|---|---|")
    alls, smalls = [], []
    for p, v in by.items():
        a, sm = geomean(x for _, x, _ in v), geomean(x for m, x, _ in v if m <= small_m)
        alls.append(a)
        smalls.append(sm)
        print(f"| {p} | {v[0][2][:8]} | {len(v)} | {_x(a)} | {_x(sm)} |")
    print(f"| geomean over problems | | | **{_x(geomean(alls))}** | **{_x(geomean(smalls))}** |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
