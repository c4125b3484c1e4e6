"""Rich tables for `solforge report` (stderr, like every human-facing solforge output)."""

from __future__ import annotations

from rich.markup import escape

from ..cli.output import console, table
from .analysis import ReportData


def _f(v, digits: int = 3, pct: bool = False, x: bool = False) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if pct:
        return f"{100 * v:.0f}%"
    if x:
        return f"{v:.2f}x"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def show(d: ReportData, top: int = 30) -> None:
    con = console()
    scope = f"run {d.run}" if d.run else "all runs"
    con.print(f"[bold]solforge report[/bold] — {escape(d.db)} ({scope})")
    if d.empty:
        con.print("nothing scored yet: no attempts in this store (`solforge optimize` makes some)")
        return
    if not d.scored:
        con.print(f"nothing scored yet: {d.attempts.height} attempt(s), none with a correct, timed "
                  "result (correctness and timing need a GPU; `solforge doctor` checks this machine)",
                  highlight=False, markup=False)
    table("Summary per subset (best correct attempt per problem)",
          ["subset", "problems", "solved", "beat baseline", "over 2x", "geomean speedup",
           "median SOL", "attempts", "LLM $"],
          [[str(r["subset"]), r["problems"], r["solved"], _f(r["share_beat_baseline"], pct=True),
            _f(r["share_over_2x"], pct=True), _f(r["geomean_speedup"], x=True),
            _f(r["median_sol_score"]), r["attempts"], f"{r['cost_usd'] or 0:.2f}"]
           for r in d.subsets.iter_rows(named=True)])
    rows = d.problems.head(top)
    table(f"Leaderboard (top {rows.height} of {d.problems.height})",
          ["problem", "subset", "best speedup", "best SOL", "attempts", "correct", "best attempt"],
          [[r["problem"], str(r["subset"]), _f(r["best_speedup"], x=True),
            _f(r["best_sol_score"]), r["attempts"], _f(r["correctness"], pct=True),
            (r["best_attempt_id"] or "")[:12]] for r in rows.iter_rows(named=True)])
    if d.failures is not None and d.failures.height:
        table("Failures by kind", ["stage", "kind", "rows", "problems", "latest message"],
              [[r["stage"], str(r["kind"]), r["n"], r["problems"],
                (r["latest_message"] or "")[:80]] for r in d.failures.iter_rows(named=True)])
    if d.llm_runs is not None and d.llm_runs.height:
        table("LLM spend", ["run", "model", "calls", "failed", "$"],
              [[(r["run_id"] or "")[:12], str(r["model"]), r["calls"], r["failed_calls"],
                f"{r['cost_usd'] or 0:.2f}"] for r in d.llm_runs.iter_rows(named=True)])
