"""Extract tasks: model zoo -> SOL-ExecBench-format problem directories (solforge.extract)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from prefect import task
from prefect.cache_policies import NO_CACHE

from solforge.extract import extract_all


@task(name="extract-models", cache_policy=NO_CACHE)
def extract_models(zoo_dir: Optional[str], out_dir: str, check: bool = False,
                   only: Optional[list[str]] = None) -> dict:
    # Deterministic (config files in, directories out): never retried.
    return extract_all(Path(zoo_dir) if zoo_dir else None, Path(out_dir), check=check, only=only).to_dict()
