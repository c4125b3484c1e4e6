"""Flow: extract — model zoo (data/models/*.json) -> problem directories (data/problems), then ingest
them into DuckDB so the optimize flow can pick them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from tasks.extract import extract_models  # noqa: E402
from tasks.ingest import load_problems, store_problems  # noqa: E402


@flow(name="extract", log_prints=True)
def extract(zoo_dir: Optional[str] = None, out_dir: str = "data/problems", check: bool = False,
            only: Optional[list[str]] = None, ingest: bool = True, db: Optional[str] = None) -> dict:
    """Extract every zoo model (or `only` these) into `out_dir`; `check` runs each reference on
    meta tensors; `ingest` loads the written problems into the store."""
    rep = extract_models(zoo_dir, out_dir, check, only)
    stored = store_problems(load_problems(out_dir), db) if ingest else None
    lines = [f"# Extraction into `{out_dir}`", "",
             f"models: {len(rep.get('models', []))}, problems written: {rep.get('problems_written')}, "
             f"shared: {rep.get('shared')}, stale removed: {rep.get('removed_stale')}",
             f"checks failed: {len(rep.get('checks_failed', []))}, errors: {len(rep.get('errors', []))}"]
    lines += [f"- {e}" for e in (rep.get("errors", []) + rep.get("checks_failed", []))[:50]]
    if stored:
        lines.append(f"\nstored: {stored['stored']}")
    create_markdown_artifact("\n".join(lines), key="extract-summary")
    return {"extract": rep, "ingest": stored}


if __name__ == "__main__":
    extract(*sys.argv[1:2])
