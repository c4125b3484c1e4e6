"""Record and replay outside the optimize loop: `solforge evaluate --record` writes its RunReport
through the one attempt writer (orchestrate.attempts), and `solforge replay ATTEMPT` runs a stored
attempt again on this machine's GPU, its problem read back from the store, and compares."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..agents.evaluate_adapter import outcome_of_report
from ..evaluate.api import evaluate_candidate
from ..store import attempt_queries as q
from ..store.problems import load_problem
from . import attempts


def record(store, attempt_id: str, report, compile_result=None) -> None:
    """The evaluator's RunReport (and the compile result) as the attempt's results: evaluated."""
    out = outcome_of_report(report)
    row = attempts.compile_row(store, attempt_id, out, compile_result) if compile_result else None
    attempts.finish(store, attempt_id, out, row)


def replay(store, attempt_id: str, *, workdir: Optional[Path] = None, record_new: bool = False,
           timeout_s: Optional[float] = None) -> dict:
    """Re-run a stored attempt on this machine's GPU and compare with its stored results.

    Returns {"attempt", "new_attempt", "hardware", "rows": [{workload, stored_status, new_status,
    stored_ms, new_ms, ratio, same_status}]}. With record_new, the re-run is stored as a new attempt
    whose parent is the replayed one (a final attempt never changes)."""
    import json

    a = q.get_attempt(store, attempt_id)
    if a is None:
        raise LookupError(f"attempt {attempt_id!r} is not in the store")
    cand = a["candidate"] if isinstance(a["candidate"], dict) else json.loads(a["candidate"])
    problem = load_problem(store, a["problem"])
    stored = {r["workload_uuid"]: r for r in q.latest_eval_results(store, attempt_id)}
    uuids = list(stored) or [w.uuid for w in problem.workloads]
    report, cr = evaluate_candidate(problem, cand, workdir=workdir, workloads=uuids,
                                    timeout_s=timeout_s)
    new_id = None
    if record_new:
        new_id = attempts.open_attempt(store, a["problem"], cand, run_id=a.get("run_id"),
                                       agent="replay", parent=attempt_id)
        record(store, new_id, report, cr)
    rows = []
    for r in report.results:
        s = stored.get(r.workload_uuid, {})
        old_ms, new_ms = s.get("median_ms"), r.median_ms
        rows.append({"workload": r.workload_uuid, "stored_status": s.get("status"),
                     "new_status": r.status.value, "stored_ms": old_ms, "new_ms": new_ms,
                     "ratio": (new_ms / old_ms) if old_ms and new_ms else None,
                     "same_status": s.get("status") == r.status.value})
    return {"attempt": attempt_id, "new_attempt": new_id,
            "hardware": report.hardware.__dict__ if report.hardware else None, "rows": rows}
