"""Replay tasks: which stored attempts to run again, and their problems, read back from the store."""

from __future__ import annotations

from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE


@task(name="select-attempts", cache_policy=NO_CACHE)
def select_attempts(store, attempt_ids: Optional[list[str]], problems: Optional[str]) -> list[dict]:
    """The given attempts; else the best scored attempt of each problem the selector names (names,
    SUBSET/name or globs: solforge.problem.select; None: every problem), else its latest compiled."""
    from solforge.problem.select import select
    from solforge.store import attempt_queries as q
    from solforge.store.problems import problem_index

    if attempt_ids:
        return q.attempts_by_id(store, attempt_ids)
    rows = q.best_attempt_per_problem(store)
    if not problems:
        return rows
    keep = {n for n, _ in select(problem_index(store), problems)}
    return [r for r in rows if r["problem"] in keep]


@task(name="load-problems-by-name", cache_policy=NO_CACHE)
def load_stored_problems(store, names: list[str]) -> list:
    """Problems by name, from the store (the flow reports the ones it does not have)."""
    from solforge.store.problems import load_problems

    return load_problems(store, names)
