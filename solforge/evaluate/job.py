"""The one builder of an evaluation job (job.json: what the driver is asked to do for one candidate).

Every path that evaluates a candidate builds its job here: the optimize loop (through
Lab.eval_job), the reference-cache fill, and `solforge evaluate` / replay (api.evaluate_candidate).
T_sol goes in once, for the SOL floor guard the driver applies (a time under sol_floor_fraction x
T_sol is rejected); scoring reads T_sol from the same roofline rows on the CPU side, it never comes
back through the driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional


def blob_roots(problem, shared_dir: Optional[Path] = None) -> list[str]:
    """Where the driver looks for a workload's blob files (safetensors inputs): the folder the
    problem was ingested from, then the shared dataset's trees that hold blobs."""
    roots = []
    src = getattr(problem, "source", None)
    if src and Path(src).is_dir():
        roots.append(str(Path(src).resolve()))
    if shared_dir is not None:
        for d in (Path(shared_dir) / "flashinfer_trace", Path(shared_dir)):
            if d.is_dir() and str(d) not in roots:
                roots.append(str(d))
    return roots


def build_job(problem, settings, *, t_sol_ms: Optional[dict] = None,
              workloads: Optional[Iterable[str]] = None, overrides: Optional[dict] = None,
              timing: Optional[bool] = None, shared_dir: Optional[Path] = None) -> dict:
    """job.json for one candidate of `problem`. `settings`: solforge.settings.Settings (the
    evaluation defaults); `overrides`: EvalConfig fields that win over them (reps, budgets);
    `t_sol_ms`: {workload uuid: T_sol} for the SOL floor guard; `workloads`: a subset of uuids."""
    eval_settings = {"correctness_rounds": settings.correctness_rounds, "rep_count": settings.rep_count,
                     "warmup_ms": settings.warmup_ms, "sol_floor_fraction": settings.sol_floor_fraction,
                     **(overrides or {})}
    if timing is not None:
        eval_settings["timing"] = timing
    job = {"problem": problem.name, "settings": eval_settings,
           "t_sol_ms": {u: t for u, t in (t_sol_ms or {}).items() if t is not None},
           "candidate_kind": "cuda"}  # CuTe kernels are cubins too: same launcher
    if workloads is not None:
        job["workloads"] = list(workloads)
    roots = blob_roots(problem, shared_dir)
    if roots:
        job["blob_roots"] = roots
    return job
