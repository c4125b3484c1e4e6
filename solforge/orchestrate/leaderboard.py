"""The leaderboard (solforge.store.attempt_queries.leaderboard): per problem, its best attempt (highest SOL score), the geometric-mean
speedup over the eager baseline and the attempt counts. Optimize runs publish it for their own
attempts; the report flow for the whole store."""

from __future__ import annotations

from typing import Optional

def leaderboard(store, run_id: Optional[str] = None) -> list[dict]:
    from ..store.attempt_queries import leaderboard as rows

    return rows(store, run_id)


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
