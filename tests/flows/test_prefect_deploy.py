"""A real Prefect server on loopback: create the pools, deploy from prefect.yaml, run a deployment
through a process worker, and find its results in DuckDB."""

from __future__ import annotations

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
    deps = {(d["name"], d["work_pool_name"], d.get("work_queue_name")): d
            for d in prefect_api.call("POST", "/deployments/filter", {})}
    names = {n for n, *_ in deps}
    for name in ("ingest-shared", "extract-zoo", "baseline-eager", "optimize-compile-only",
                 "optimize-nightly", "replay-best", "report"):
        assert name in names, f"{name} not deployed: {sorted(names)}"
    nightly = next(d for (n, *_), d in deps.items() if n == "optimize-nightly")
    assert nightly["work_pool_name"] == "gpu" and nightly["work_queue_name"] == "multi-gpu"
    assert [s["schedule"].get("cron") for s in nightly["schedules"]] == ["0 2 * * *"]
    prefect(["deployment", "run", "ingest/ingest-shared",
             "--param", f"path={tmp_path / 'tree'}", "--param", f"db={db}"], env, REPO)
    prefect(["worker", "start", "--pool", "cpu", "--run-once"], env, REPO, timeout=300)
    runs = prefect_api.call("POST", "/flow_runs/filter", {"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}})
    assert any(r["parameters"].get("db") == str(db) for r in runs), runs
    store = Store(db)
    rows = store.query("SELECT name, subset FROM problems ORDER BY name")
    assert [r["subset"] for r in rows] == ["L1", "L1"]
    assert store.scalar("SELECT count(*) FROM workloads") > 0
