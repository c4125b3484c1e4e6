"""Replay tasks: which stored attempts to run again, and loading their problems back."""

from __future__ import annotations

from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE


@task(name="select-attempts", cache_policy=NO_CACHE)
def select_attempts(store, attempt_ids: Optional[list[str]], problems: Optional[str]) -> list[dict]:
    if attempt_ids:
        marks = ",".join("?" * len(attempt_ids))
        return store.query(f"SELECT id, problem, agent, candidate FROM attempts WHERE id IN ({marks}) "
                           f"AND candidate IS NOT NULL ORDER BY created_at", list(attempt_ids))
    # the best scored attempt of each problem (matching the glob), else its latest compiled one
    return store.query(
        "SELECT id, problem, agent, candidate FROM attempts WHERE candidate IS NOT NULL "
        "AND outcome IN ('ok', 'compiled') AND (? IS NULL OR problem GLOB ?) "
        "QUALIFY row_number() OVER (PARTITION BY problem ORDER BY sol_score DESC NULLS LAST, "
        "created_at DESC) = 1 ORDER BY problem", [problems, problems])


@task(name="load-problems-by-name", cache_policy=NO_CACHE)
def load_stored_problems(store, names: list[str]) -> list:
    """Problems by name: from the directory each was ingested from, else from the shared tree."""
    from pathlib import Path
    from types import SimpleNamespace

    from solforge import settings
    from solforge.cli.optimize import select_problems
    from solforge.errors import InputError
    from solforge.problem import load_problem_dir

    out = []
    for r in store.query("SELECT name, subset, source FROM problems WHERE list_contains(?, name)", [names]):
        if r["source"] and Path(r["source"]).is_dir():
            out.append(load_problem_dir(Path(r["source"]), subset=r["subset"]))
    for name in sorted(set(names) - {p.name for p in out}):
        try:
            out += select_problems(SimpleNamespace(problems=name, subset=None, limit=1, with_family=False),
                                   settings.get().shared_dir)
        except InputError:
            pass  # not ingested and not in the shared tree: reported as missing by the flow
    return out
