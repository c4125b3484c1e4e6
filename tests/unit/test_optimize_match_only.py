"""`solforge optimize --match-only`: the matching a GPU box would do first (trace, plan, compile each
problem into the disk cache), done on a machine without a GPU and without touching a GPU, so the box
that unpacks the cache plans from its first second. A real subprocess, a real DuckDB file, a real
NVRTC compile into a real cache directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.problems import write_problem

pytest.importorskip("cuda.bindings.nvrtc")


def _match(tmp_path: Path, problem: Path, cache: Path) -> dict:
    env = {**os.environ, "SOLFORGE_CACHE_DIR": str(cache), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "solforge.cli", "--db", str(tmp_path / "m.duckdb"),
                          "--json", "optimize", "--problems", str(problem), "--match-only",
                          "--arch", "sm_90a", "--gpu-profile", "h200", "--match-jobs", "1"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _entries(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*.json")}


def test_match_only_fills_the_cache_and_a_second_run_reuses_it(tmp_path):
    problem = write_problem(tmp_path / "ds", "sin_add")
    cache = tmp_path / "cache"
    first = _match(tmp_path, problem, cache)
    assert first["matched"] == 1 and first["unmatched"] == [] and first["arch"] == "sm_90a"
    entries = _entries(cache)
    assert any(e.startswith("compiler/") for e in entries), entries
    again = _match(tmp_path, problem, cache)
    assert again["matched"] == 1
    assert _entries(cache) == entries  # every answer read back, nothing matched anew
