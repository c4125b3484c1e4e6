"""The whole loop on a GPU: offline search on a real problem, evaluated, scored and stored.
Skipped without a GPU (tests/conftest.py)."""

from __future__ import annotations

import pytest

from solforge.agents.lab import Lab
from solforge.agents.offline import OfflineWorker
from solforge.agents.planner import Budget, PlannerConfig
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop


@pytest.mark.gpu
def test_offline_loop_on_gpu_scores_attempts(store, rmsnorm_problem, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOLFORGE_REP_COUNT", "10")
    lab = Lab(arch="sm_90a", gpu_profile="h200", store=store)
    assert lab.has_gpu
    loop = OptimizeLoop(store, [rmsnorm_problem], lab, {"offline": OfflineWorker(lab)},
                        LoopConfig(budget=Budget(attempts=4), planner=PlannerConfig(attempts_per_round=2)))
    report = loop.run()
    rows = store.query("SELECT * FROM attempts WHERE run_id = ? ORDER BY created_at", [report.run_id])
    assert rows and all(r["status"] in ("evaluated", "failed") for r in rows)
    ok = [r for r in rows if r["outcome"] == "ok"]
    assert ok, [(r["outcome"], r["error"]) for r in rows]
    assert all(0.0 < r["sol_score"] <= 1.0 for r in ok) and all(r["gpu_seconds"] > 0 for r in ok)
    n_wl = len(rmsnorm_problem.workloads)
    assert store.scalar("SELECT count(*) FROM eval_results WHERE attempt_id = ?", [ok[0]["id"]]) == n_wl
    assert store.scalar("SELECT count(*) FROM scores WHERE attempt_id = ?", [ok[0]["id"]]) == n_wl
    assert store.scalar("SELECT count(*) FROM baselines WHERE problem = ?", [rmsnorm_problem.name]) >= 1
    assert report.spent.gpu_seconds > 0
    assert rows[1]["parent_id"] is not None  # later attempts refine the best so far
