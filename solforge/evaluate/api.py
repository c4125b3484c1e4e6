"""The CPU-side entry points: evaluate a Candidate (compile, stage, spawn, collect), record the
results in the store, and replay a stored attempt on the current GPU. Never imports torch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

from .results import EvalResult, EvalStatus, RunReport
from .runner import run_stage, stage_candidate


def evaluate_candidate(problem, candidate, *, workdir: Optional[Path] = None,
                       workloads: Optional[list[str]] = None, t_sol_ms: Optional[dict] = None,
                       timeout_s: Optional[float] = None, workload_timeout_s: Optional[float] = None,
                       timing: bool = True, settings=None) -> tuple[RunReport, object]:
    """(RunReport, CompileResult). A compile failure yields a report with every workload skipped."""
    from .. import settings as settings_mod
    from ..candidate import Candidate
    from ..compile import compile_candidate

    cfg = settings or settings_mod.get()
    cand = candidate if isinstance(candidate, Candidate) else Candidate.model_validate(candidate)
    cr = compile_candidate(cand)
    uuids = workloads or [w.uuid for w in problem.workloads]
    if not cr.ok:
        rs = [EvalResult(u, EvalStatus.SKIPPED, problem=problem.name,
                         message=f"not evaluated: compile {cr.status.value}") for u in uuids]
        return RunReport(problem.name, rs, log=[cr.log[-2000:]]), cr
    job = {"workloads": uuids, "t_sol_ms": t_sol_ms or {},
           "settings": {"correctness_rounds": cfg.correctness_rounds, "rep_count": cfg.rep_count,
                        "warmup_ms": cfg.warmup_ms, "sol_floor_fraction": cfg.sol_floor_fraction,
                        "timing": timing},
           "blob_roots": [str(cfg.shared_dir / "flashinfer_trace"), str(cfg.shared_dir)]}
    root = Path(workdir or tempfile.mkdtemp(prefix="solforge-eval-"))
    stage = stage_candidate(root / cand.source_hash()[:16], problem, candidate=cand,
                            compile_result=cr, job=job)
    report = run_stage(stage, timeout_s=timeout_s or cfg.eval_timeout_s,
                       workload_timeout_s=workload_timeout_s)
    return report, cr


def record(store, attempt_id: str, report: RunReport) -> None:
    """Write the hardware row and one eval_results row per workload; mark the attempt evaluated."""
    from ..store.status import AttemptStatus

    hw_id = None
    if report.hardware is not None:
        hw = report.hardware.to_row()
        hw_id = hw["id"]
        if not store.query("SELECT id FROM hardware WHERE id = ?", [hw_id]):
            store.insert_rows("hardware", [hw])
    rows = [r.to_row(attempt_id, hw_id) for r in report.results]
    from .phase_totals import flat_seconds

    store.mark_attempt(attempt_id, AttemptStatus.EVALUATED, rows={"eval_results": rows},
                       eval_launch=report.launch or None, eval_mode=report.mode or None,
                       eval_phases=flat_seconds(report.phases) or None)


def problem_from_store(store, name: str):
    """Rebuild a Problem (definition + workloads) from the problems/workloads tables."""
    from ..problem.definition import Definition
    from ..problem.loader import Problem
    from ..problem.workload import Workload, resolve

    p = store.query_one("SELECT * FROM problems WHERE name = ?", [name])
    if p is None:
        raise LookupError(f"problem {name!r} is not in the store")
    defn = Definition.model_validate(p["definition"])
    wrows = store.query("SELECT workload FROM workloads WHERE problem = ? ORDER BY workload_index",
                        [name])
    wls = [resolve(defn, Workload.model_validate(r["workload"])) for r in wrows]
    return Problem(defn, wls, p.get("source") or "store", p.get("subset"))


def replay(store, attempt_id: str, *, workdir: Optional[Path] = None, record_new: bool = False,
           timeout_s: Optional[float] = None) -> dict:
    """Re-run a stored attempt on this machine's GPU and compare with its stored results.

    Returns {"attempt", "new_attempt", "hardware", "rows": [{workload, stored_status, new_status,
    stored_ms, new_ms, ratio, same_status}]}. With record_new, the re-run is stored as a new attempt
    whose parent is the replayed one (a final attempt never changes)."""
    a = store.query_one("SELECT * FROM attempts WHERE id = ?", [attempt_id])
    if a is None:
        raise LookupError(f"attempt {attempt_id!r} is not in the store")
    cand = a["candidate"] if isinstance(a["candidate"], dict) else json.loads(a["candidate"])
    problem = problem_from_store(store, a["problem"])
    stored = {r["workload_uuid"]: r for r in store.query(
        "SELECT * FROM eval_results WHERE attempt_id = ? QUALIFY row_number() OVER "
        "(PARTITION BY workload_uuid ORDER BY created_at DESC) = 1", [attempt_id])}
    uuids = list(stored) or [w.uuid for w in problem.workloads]
    report, _ = evaluate_candidate(problem, cand, workdir=workdir, workloads=uuids,
                                   timeout_s=timeout_s)
    new_id = None
    if record_new:
        new_id = store.create_attempt(a["problem"], run_id=a.get("run_id"), parent_id=attempt_id,
                                      agent="replay", language=a.get("language"), candidate=cand)
        record(store, new_id, report)
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
