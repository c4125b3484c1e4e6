"""Baseline tasks: T_b of each workload (the reference in eager PyTorch or torch.compile), timed on a
GPU slot, written to the baselines table."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE

from .common import retry_transient


@task(name="measure-baseline", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10,
      retry_condition_fn=retry_transient)
def measure_baseline(problem, variant: str, pool, reps: int = 20) -> list[dict]:
    # the reference is a dataset's code: timed in the sandbox on the first visible GPU, holding
    # that GPU's slot
    from solforge.evaluate.baseline import time_problem_isolated

    src = getattr(problem, "source", None)
    roots = [str(src)] if src and Path(src).is_dir() else []
    with pool.slot(prefer=pool.gpus[0], label=f"baseline:{problem.name}"):
        return [r.to_json() for r in time_problem_isolated(problem, variant, reps=reps, blob_roots=roots)]


@task(name="store-baselines", cache_policy=NO_CACHE)
def store_baselines(store, rows: list[dict], hardware_id: Optional[str] = None) -> int:
    cols = store.columns("baselines")
    return store.insert_rows("baselines", [{**{k: v for k, v in r.items() if k in cols},
                                            "hardware_id": hardware_id} for r in rows])
