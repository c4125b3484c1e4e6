"""The leaderboard from SQL: per problem, its best attempt (highest SOL score), the geometric-mean
speedup over the eager baseline and the attempt counts. Optimize runs publish it for their own
attempts; the report flow for the whole store."""

from __future__ import annotations

from typing import Optional

_SQL = """
WITH a AS (
  SELECT * FROM attempts WHERE (? IS NULL OR run_id = ?)
), per AS (
  SELECT s.attempt_id, exp(avg(ln(s.speedup))) AS speedup, count(*) AS n_scored
  FROM scores s WHERE s.speedup > 0 GROUP BY s.attempt_id
), best AS (
  SELECT a.problem, a.id, a.agent, a.language, a.sol_score, per.speedup
  FROM a LEFT JOIN per ON per.attempt_id = a.id WHERE a.sol_score IS NOT NULL
  QUALIFY row_number() OVER (PARTITION BY a.problem ORDER BY a.sol_score DESC, a.created_at) = 1
), counts AS (
  SELECT problem, count(*) AS attempts,
         count(*) FILTER (WHERE outcome = 'ok') AS correct,
         count(*) FILTER (WHERE outcome = 'compiled' OR outcome = 'ok') AS compiled,
         count(*) FILTER (WHERE status = 'interrupted') AS interrupted
  FROM a GROUP BY problem
)
SELECT c.problem, c.attempts, c.compiled, c.correct, c.interrupted, b.id AS best_attempt,
       b.agent, b.language, b.sol_score, b.speedup
FROM counts c LEFT JOIN best b ON b.problem = c.problem
ORDER BY b.sol_score DESC NULLS LAST, c.problem
"""


def leaderboard(store, run_id: Optional[str] = None) -> list[dict]:
    return store.query(_SQL, [run_id, run_id])


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def markdown(rows: list[dict], title: str, notes: Optional[list[str]] = None) -> str:
    lines = [f"# {title}", ""]
    lines += [f"> {n}" for n in notes or []]
    if notes:
        lines.append("")
    scored = [r for r in rows if r["sol_score"] is not None]
    lines.append(f"{len(rows)} problem(s), {len(scored)} with a correct, timed kernel.")
    lines += ["", "| problem | SOL score | speedup | attempts | compiled | correct | interrupted | best |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = f"`{r['best_attempt'][:8]}` {r['agent']}/{r['language']}" if r["best_attempt"] else "-"
        lines.append(f"| {r['problem']} | {_f(r['sol_score'], '.3f')} | {_f(r['speedup'], '.2f')}x | "
                     f"{r['attempts']} | {r['compiled']} | {r['correct']} | {r['interrupted']} | {best} |")
    return "\n".join(lines) + "\n"


def table_rows(rows: list[dict]) -> list[dict]:
    """JSON-safe rows for a table artifact."""
    return [{"problem": r["problem"], "sol_score": r["sol_score"], "speedup": r["speedup"],
             "attempts": r["attempts"], "compiled": r["compiled"], "correct": r["correct"],
             "interrupted": r["interrupted"], "best_attempt": r["best_attempt"]} for r in rows]
