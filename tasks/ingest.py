"""Ingest tasks: load problems from a path or hf:// URI, then upsert them into the store."""

from __future__ import annotations

from typing import Optional

from prefect import task

from solforge.problem.ingest import IngestReport
from solforge.problem.sources import ingest_path
from solforge.store.problems import upsert_problems

from .common import open_store, retry_transient


@task(name="load-problems", retries=2, retry_delay_seconds=5, retry_condition_fn=retry_transient)
def load_problems(path: str) -> IngestReport:
    # Retried only on transient errors (an hf:// download that drops); bad files are in the report.
    return ingest_path(path)


@task(name="store-problems")
def store_problems(report: IngestReport, db: Optional[str]) -> dict:
    summary = upsert_problems(open_store(db), report.problems)
    return {
        "source": report.source,
        "counts": report.counts_by_subset(),
        "stored": summary.as_dict(),
        "errors": [e.describe() for e in report.errors],
        "warnings": len(report.warnings),
    }
