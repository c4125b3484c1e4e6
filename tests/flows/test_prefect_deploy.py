"""A real Prefect server on loopback: create the pools, deploy from prefect.yaml, run a deployment
through a process worker, and find its results in DuckDB."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.store import Store

from .prefect_server import prefect

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_deploy_and_run_ingest_through_a_process_worker(tmp_path, sol_execbench_dir, prefect_api):
    # A small tree: two problems of one subset, so the run is quick.
    tree = tmp_path / "tree" / "L1"
    for d in sorted((sol_execbench_dir / "L1").iterdir())[:2]:
        shutil.copytree(d, tree / d.name)
    db = tmp_path / "runs.duckdb"
    env = prefect_api.env
    prefect(["deploy", "--all"], env, REPO)
    out = prefect(["deployment", "ls"], env, REPO).stdout
    for name in ("ingest/ingest-shared", "extract/extract-zoo", "baseline/baseline-eager",
                 "optimize/optimize-compile-only", "optimize/optimize-nightly", "replay/replay-best",
                 "report/report"):
        assert name in out, f"{name} not deployed:\n{out}"
    nightly = prefect(["deployment", "inspect", "optimize/optimize-nightly"], env, REPO).stdout
    assert "0 2 * * *" in nightly and "'gpu'" in nightly, nightly
    prefect(["deployment", "run", "ingest/ingest-shared",
             "--param", f"path={tmp_path / 'tree'}", "--param", f"db={db}"], env, REPO)
    prefect(["worker", "start", "--pool", "cpu", "--run-once"], env, REPO, timeout=300)
    runs = prefect(["flow-run", "ls", "--state", "COMPLETED"], env, REPO).stdout
    assert "ingest" in runs, runs
    store = Store(db)
    rows = store.query("SELECT name, subset FROM problems ORDER BY name")
    assert [r["subset"] for r in rows] == ["L1", "L1"]
    assert store.scalar("SELECT count(*) FROM workloads") > 0
