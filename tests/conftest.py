"""Shared fixtures: where the shared dataset lives, and GPU tests that skip themselves without a GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SOLFORGE_SHARED_DIR", REPO.parent / "shared"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no internet: use the bundled cost map


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "sol_execbench").is_dir():
        pytest.skip(f"shared dataset not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def sol_execbench_dir(shared_dir) -> Path:
    return shared_dir / "sol_execbench"


@pytest.fixture(scope="session")
def flashinfer_trace_dir(shared_dir) -> Path:
    return shared_dir / "flashinfer_trace"
