"""The CPU-side entry point: evaluate a Candidate (compile, stage, spawn, collect) on this machine's
GPU. Never imports torch, and never the store: recording and replaying stored attempts is
solforge.orchestrate.replay's."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

from .job import build_job
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
    job = build_job(problem, cfg, t_sol_ms=t_sol_ms, workloads=uuids, timing=timing,
                    shared_dir=cfg.shared_dir)
    root = Path(workdir or tempfile.mkdtemp(prefix="solforge-eval-"))
    stage = stage_candidate(root / cand.source_hash()[:16], problem, candidate=cand,
                            compile_result=cr, job=job)
    report = run_stage(stage, timeout_s=timeout_s or cfg.eval_timeout_s,
                       workload_timeout_s=workload_timeout_s)
    return report, cr
