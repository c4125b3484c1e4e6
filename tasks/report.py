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
def build_report(store, out_dir: str, run_id: Optional[str] = None) -> Optional[dict]:
    """HOOK into solforge.report (owner: reports): its analysis + self-contained HTML, written to
    out_dir/report.html. None when that module is not importable; {"error": ...} when it fails, so the
    SQL leaderboard is still published."""
    from pathlib import Path

    try:
        from solforge.report import analysis, html
    except ImportError:
        return None
    try:
        data = analysis.load(store, run_id)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / (f"report-{run_id[:8]}.html" if run_id else "report.html")
        path.write_text(html.render(data))
        return {"html": str(path.resolve())}
    except Exception as e:  # noqa: BLE001 - the report is extra; the leaderboard still goes out
        return {"error": f"{type(e).__name__}: {e}"}
