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


# Tests that take more than a few seconds on 2 cores, one node id (or id prefix: a file, a folder) per
# line: the default run (`pytest`, addopts -m "not slow") leaves them out; `scripts/test.sh --all`
# and CI run them. docs/testing.md says how the list is measured and refreshed.
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def _slow_prefixes() -> tuple[str, ...]:
    try:
        lines = SLOW_LIST.read_text().splitlines()
    except OSError:
        return ()
    return tuple(ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip())


def _is_slow(nodeid: str, prefixes: tuple[str, ...]) -> bool:
    return any(nodeid == p or nodeid.startswith(p + "::") or nodeid.startswith(p + "[")
               or (p.endswith("/") and nodeid.startswith(p)) for p in prefixes)


def pytest_collection_modifyitems(config, items):
    prefixes = _slow_prefixes()
    for item in items:
        if _is_slow(item.nodeid, prefixes):
            item.add_marker(pytest.mark.slow)
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
