"""Flow: ingest a problem tree (SOL-ExecBench, FlashInfer-Trace, data/problems, hf://) into DuckDB."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from tasks.ingest import load_problems, store_problems  # noqa: E402


@flow(name="ingest", log_prints=True)
def ingest(path: str = "../shared/sol_execbench", db: Optional[str] = None) -> dict:
    """Load every problem under `path` and upsert it; bad problems are listed, good ones stored."""
    report = load_problems(path)
    result = store_problems(report, db)
    lines = [f"# Ingest of `{path}`", "", "| subset | problems | workloads |", "|---|---|---|"]
    lines += [f"| {s or '-'} | {c['problems']} | {c['workloads']} |" for s, c in result["counts"].items()]
    lines += ["", f"stored: {result['stored']}", f"errors: {len(result['errors'])}"]
    lines += [f"- {e}" for e in result["errors"][:50]]
    create_markdown_artifact("\n".join(lines), key="ingest-summary")
    print(f"ingested {path}: {result['counts']} stored={result['stored']} errors={len(result['errors'])}")
    return result


if __name__ == "__main__":
    ingest(*sys.argv[1:2])
