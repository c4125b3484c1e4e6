"""T_sol and T_baseline per workload for the agents, from the store when it has them, else counted.

Order: the store's roofline table (written by `solforge sol`), then solforge.roofline counted here
(the reference traced on meta tensors: no GPU), then nothing (the prompt shows '?'). Baselines come
only from measurements (the store's baselines table): a T_b from another GPU would make a wrong score.
"""

from __future__ import annotations

import logging
from typing import Optional

from .prompts import WorkloadSol

log = logging.getLogger(__name__)


def workload_sols(problem, gpu_profile: str, store=None) -> list[WorkloadSol]:
    sols = [WorkloadSol(w.uuid, {k: w.axes[k] for k in problem.definition.var_axes if k in w.axes})
            for w in problem.workloads]
    filled = _from_store(problem, gpu_profile, store, sols) if store is not None else False
    if not filled:
        _counted(problem, gpu_profile, sols)
    if store is not None:
        _baselines(problem, store, sols)
    return sols


def _from_store(problem, gpu_profile: str, store, sols: list[WorkloadSol]) -> bool:
    try:
        from ..store import report_queries as rq  # only with a store: the GPU box has no duckdb

        rows = rq.roofline_rows(store, problem.name, gpu_profile)
    except Exception as e:  # noqa: BLE001 - an old database without the table
        log.debug("no roofline rows: %s", e)
        return False
    by = {r["workload_uuid"]: r for r in rows}
    for s in sols:
        r = by.get(s.uuid)
        if r and r["t_sol_ms"] is not None:
            s.t_sol_ms, s.bound, s.source = r["t_sol_ms"], r.get("limiter") or "", "store"
    return all(s.t_sol_ms is not None for s in sols)


_COUNTS: dict[str, dict] = {}  # problem content hash -> {uuid: WorkloadCount}; counting traces the
                               # reference (seconds), and the counts do not depend on the GPU


def _counted(problem, gpu_profile: str, sols: list[WorkloadSol]) -> None:
    try:
        from ..roofline.sandboxed import count_problem
        from ..roofline.estimate import roofline
        from ..roofline.hardware import load_profile

        profile = load_profile(gpu_profile)
        key = problem.content_hash
        if key not in _COUNTS:
            _COUNTS[key] = {c.uuid: c for c in count_problem(problem)}
        counts = _COUNTS[key]
    except Exception as e:  # noqa: BLE001 - no roofline: the prompt says '?'
        log.warning("roofline for %s unavailable: %s", problem.name, e)
        return
    for s in sols:
        c = counts.get(s.uuid)
        if c is None or s.t_sol_ms is not None:
            continue
        r = roofline(problem.name, c, profile)
        if r.t_sol_ms is not None:
            s.t_sol_ms, s.bound, s.source = r.t_sol_ms, r.limiter, "counted"


def _baselines(problem, store, sols: list[WorkloadSol]) -> None:
    try:
        # T_b is the faster of eager and torch.compile (each variant's latest measurement).
        from ..store import report_queries as rq  # only with a store: the GPU box has no duckdb

        rows = rq.fastest_baseline_rows(store, problem.name)
    except Exception as e:  # noqa: BLE001
        log.debug("no baselines: %s", e)
        return
    by = {r["workload_uuid"]: r for r in rows}
    for s in sols:
        if s.uuid in by:
            s.t_base_ms, s.t_base_variant = by[s.uuid]["median_ms"], by[s.uuid]["variant"]


def t_base_of(sols: list[WorkloadSol]) -> dict[str, Optional[float]]:
    return {s.uuid: s.t_base_ms for s in sols}
