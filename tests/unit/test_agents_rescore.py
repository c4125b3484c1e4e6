"""Rescoring attempts whose baselines arrived after their evaluation, on a real DuckDB file."""

from __future__ import annotations

import pytest

from solforge.agents.rescore import rescore
from solforge.store import Store


def test_rescore_uses_the_faster_baseline_and_sets_the_problem_score(tmp_path):
    s = Store(tmp_path / "r.duckdb")
    run = s.create_run(kind="optimize", gpu_profile="h200", config={})
    aid = s.create_attempt("p", run_id=run, agent="offline", language="cuda", source_hash="h")
    s.mark_attempt(aid, "compiled")
    s.mark_attempt(aid, "evaluated", outcome="ok")
    s.insert_rows("scores", [
        {"attempt_id": aid, "workload_uuid": "w1", "t_kernel_ms": 2.0, "t_sol_ms": 1.0},
        {"attempt_id": aid, "workload_uuid": "w2", "t_kernel_ms": 4.0, "t_sol_ms": 1.0}])
    s.insert_rows("baselines", [
        {"problem": "p", "workload_uuid": "w1", "variant": "eager", "median_ms": 5.0, "status": "passed"},
        {"problem": "p", "workload_uuid": "w1", "variant": "compile", "median_ms": 3.0, "status": "passed"},
        {"problem": "p", "workload_uuid": "w2", "variant": "eager", "median_ms": 7.0, "status": "passed"},
        # a failed compile baseline must not count as T_b
        {"problem": "p", "workload_uuid": "w2", "variant": "compile", "median_ms": 0.5, "status": "runtime_error"}])
    assert rescore(s) == {"workloads": 2, "attempts": 1}
    rows = {r["workload_uuid"]: r for r in s.query("SELECT * FROM scores")}
    assert rows["w1"]["t_baseline_ms"] == 3.0 and rows["w1"]["baseline_variant"] == "compile"
    assert rows["w1"]["speedup"] == pytest.approx(1.5)
    assert rows["w1"]["sol_score"] == pytest.approx(1 / (1 + (2 - 1) / (3 - 1)))
    assert rows["w2"]["t_baseline_ms"] == 7.0 and rows["w2"]["sol_score"] == pytest.approx(1 / (1 + 3 / 6))
    att = s.query_one("SELECT sol_score FROM attempts WHERE id = ?", [aid])
    assert att["sol_score"] == pytest.approx((rows["w1"]["sol_score"] * rows["w2"]["sol_score"]) ** 0.5)
    assert rescore(s) == {"workloads": 0, "attempts": 0}  # nothing left to fill
    # a faster torch.compile baseline measured later: only --refresh redoes the scores it changes
    s.insert_rows("baselines", [
        {"problem": "p", "workload_uuid": "w2", "variant": "compile", "median_ms": 6.0, "status": "passed"}])
    assert rescore(s) == {"workloads": 0, "attempts": 0}
    assert rescore(s, refresh=True) == {"workloads": 1, "attempts": 1}
    w2 = s.query_one("SELECT * FROM scores WHERE workload_uuid = 'w2'")
    assert w2["t_baseline_ms"] == 6.0 and w2["baseline_variant"] == "compile"
    assert w2["sol_score"] == pytest.approx(1 / (1 + 3 / 5))
    assert rescore(s, refresh=True) == {"workloads": 0, "attempts": 0}


def test_baseline_cost_is_the_summed_fastest_passed_t_b(tmp_path):
    """What the planner orders untried problems by: per problem, the faster passed baseline of each
    workload, summed."""
    from solforge.store.attempt_queries import baseline_cost_ms

    s = Store(tmp_path / "c.duckdb")
    s.insert_rows("baselines", [
        {"problem": "p", "workload_uuid": "w1", "variant": "eager", "median_ms": 5.0, "status": "passed"},
        {"problem": "p", "workload_uuid": "w1", "variant": "compile", "median_ms": 3.0, "status": "passed"},
        {"problem": "p", "workload_uuid": "w2", "variant": "eager", "median_ms": 7.0, "status": "passed"},
        {"problem": "p", "workload_uuid": "w2", "variant": "compile", "median_ms": 0.5, "status": "runtime_error"},
        {"problem": "q", "workload_uuid": "v1", "variant": "eager", "median_ms": 0.25, "status": "passed"}])
    assert baseline_cost_ms(s) == {"p": pytest.approx(10.0), "q": pytest.approx(0.25)}
