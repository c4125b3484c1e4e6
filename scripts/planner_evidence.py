#!/usr/bin/env python3
"""Where did the planner put the budget? From an optimize run's DuckDB file: per problem, attempts
before and after the exploration round (every problem tried once), the SOL-score gain of the first
round and the planner's stated reasons for its later picks.

    .venv/bin/python scripts/planner_evidence.py [DB] > data/results/planner_decisions_h200x2.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SQL_EXPLORE_END = """
SELECT max(created_at) FROM planner_decisions WHERE action = 'run' AND reason LIKE 'not tried yet%'
"""
SQL_PER_PROBLEM = """
SELECT a.problem,
       count(*) FILTER (WHERE a.created_at <= ?) AS explore_attempts,
       count(*) FILTER (WHERE a.created_at > ?) AS later_attempts,
       max(a.sol_score) FILTER (WHERE a.created_at <= ?) - min(a.sol_score) FILTER (WHERE a.created_at <= ?)
           AS explore_gain,
       max(a.sol_score) AS best_sol
FROM attempts a WHERE a.agent = 'offline' GROUP BY 1 ORDER BY later_attempts DESC, explore_gain DESC NULLS LAST
"""
SQL_LATER = """
SELECT problem, round(priority, 4) AS priority, reason FROM planner_decisions
WHERE action = 'run' AND created_at > ? ORDER BY created_at, priority DESC
"""


def main(argv: list[str]) -> int:
    import duckdb

    db = argv[0] if argv else str(REPO / "data/results/db/optimize_h200x2.duckdb")
    con = duckdb.connect(db, read_only=True)
    t = con.execute(SQL_EXPLORE_END).fetchone()[0]
    print(f"# planner decisions of {Path(db).name}; exploration round ended {t}")
    print(f"{'problem':55s} {'explore':>7s} {'later':>5s} {'gain':>6s} {'best':>6s}")
    for p, e, l, g, b in con.execute(SQL_PER_PROBLEM, [t, t, t, t]).fetchall():
        print(f"{p:55s} {e:7d} {l:5d} {'' if g is None else f'{g:6.3f}':>6s} "
              f"{'' if b is None else f'{b:6.3f}':>6s}")
    print("\n# later picks, with the planner's reason (stored in planner_decisions.reason)")
    for p, pr, r in con.execute(SQL_LATER, [t]).fetchall():
        print(f"- {p} ({pr}): {r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
