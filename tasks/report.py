"""Report tasks: the leaderboard from SQL, and the report module's hook when it exists."""

from __future__ import annotations

from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE

from solforge.orchestrate import leaderboard as lb


@task(name="leaderboard-sql", cache_policy=NO_CACHE)
def leaderboard_rows(store, run_id: Optional[str] = None) -> list[dict]:
    return lb.leaderboard(store, run_id)


@task(name="build-report", cache_policy=NO_CACHE)
def build_report(db: Optional[str], out_dir: str) -> Optional[dict]:
    """HOOK: solforge.report (owner: reports) builds the full report when it exists; the contract
    expected here is `solforge.report.build(db_path, out_dir) -> dict` (paths written, summary).
    Until then None: the flow publishes the SQL leaderboard alone."""
    try:
        from solforge import report
    except ImportError:
        return None
    build = getattr(report, "build", None)
    return build(db, out_dir) if build else None
