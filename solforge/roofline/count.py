"""Counts of every workload of a problem: analytic formulas first (analytic.py), then traced
workloads with per-op fits for the rest (fit.py), else tracing each one (estimate.py). Its own module
because it sits above all three: estimate.py holds the types and the tracer that analytic.py and
fit.py build on, so it must not import them back."""

from __future__ import annotations

from typing import Optional

from ..problem.loader import Problem
from .analytic import analytic_count
from .estimate import CountStatus, WorkloadCount, _exec_reference, count_workload
from .fit import count_fitted
from .trace import patch_cuda_init


def count_problem_here(problem: Problem, fit: bool = True) -> list[WorkloadCount]:
    """Counts of every workload, the reference run IN THIS PROCESS: only for the sandbox's entry point
    (sandboxed.count); everyone else calls sandboxed.count_problem. fit=True traces a few workloads and predicts the others from per-op
    monomial fits checked on an extra traced workload (fit.py); it falls back to tracing each workload
    whenever the fit is not exact. fit=False traces every workload."""
    patch_cuda_init()
    defn = problem.definition
    try:
        module = _exec_reference(defn.reference, defn.name)
    except Exception as e:  # noqa: BLE001
        return [WorkloadCount(w.uuid, i, CountStatus.UNSUPPORTED,
                              reason=f"reference does not import: {type(e).__name__}: {e}")
                for i, w in enumerate(problem.workloads)]
    out: list[Optional[WorkloadCount]] = []
    todo = []
    for i, w in enumerate(problem.workloads):
        c = analytic_count(w, i)
        if c is not None:
            c.method = "analytic"
        else:
            todo.append(i)
        out.append(c)
    if todo:
        traced = count_fitted([problem.workloads[i] for i in todo], todo, module) if fit else \
            [count_workload(problem.workloads[i], i, module) for i in todo]
        for i, c in zip(todo, traced):
            out[i] = c
    return out  # type: ignore[return-value]
