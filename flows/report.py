"""Flow: report — the leaderboard of the whole store (best attempt per problem: SOL score, speedup,
counts) as a table artifact and a markdown artifact; plus the full report from solforge.report when
that module exists (tasks/report.py: build_report is the hook)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.utilities.annotations import quote  # noqa: E402

from solforge.orchestrate import leaderboard as lb  # noqa: E402
from tasks.common import open_store  # noqa: E402
from tasks.report import build_report, leaderboard_rows  # noqa: E402


@flow(name="report", log_prints=True)
def report(run_id: Optional[str] = None, out_dir: str = "reports", db: Optional[str] = None) -> dict:
    """run_id: only this run's attempts (None: every attempt in the store). out_dir: where the
    HTML report from solforge.report is written."""
    store = open_store(db)
    rows = leaderboard_rows(quote(store), run_id)
    built = build_report(quote(store), out_dir, run_id)
    title = f"Leaderboard of run `{run_id[:8]}`" if run_id else "Leaderboard (all runs)"
    if built is None:
        notes = ["solforge.report is not importable here: leaderboard from SQL only"]
    elif "error" in built:
        notes = [f"solforge.report failed ({built['error']}): leaderboard from SQL only"]
    else:
        notes = [f"full report: {built['html']}"]
    create_table_artifact(lb.table_rows(rows), key="leaderboard", description=title)
    create_markdown_artifact(lb.markdown(rows, title, notes), key="leaderboard-summary")
    print(lb.markdown(rows, title, notes))
    return {"problems": len(rows), "scored": sum(r["sol_score"] is not None for r in rows),
            "report": built}


if __name__ == "__main__":
    report(*sys.argv[1:2])
