"""The 070 views on a real DuckDB file, with a small history whose right answers are known by hand.

`make_store` is also used by the other report tests (and tests/browser) to get the same history.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from solforge.store import Store

T0 = datetime(2026, 1, 1, 12, 0, 0)


def _t(s: int) -> datetime:
    return T0 + timedelta(seconds=s)


def make_store(path) -> Store:
    """Two problems in two subsets.

    p_one (L1, 2 workloads): a1 correct, speedups 2 and 8 (geomean 4), SOL 0.6 / 0.8 (mean 0.7);
      a2 wrong on w2; a3 correct, speedups 1 and 1, SOL 0.5 / 0.5 — best is a1.
      a2's w2 has an older passing eval row: only the newest row counts.
    p_two (L2, 2 workloads): a4 compile error; a5 evaluated on w1 only (not complete, so not correct);
      a6 correct, speedups 0.5 and 0.5 (geomean 0.5), SOL 0.3 / 0.4.
    LLM: a1 two calls ($0.50 + $0.25, one failed), a4 one call ($1.00). Planner: two rounds of one run.
    """
    s = Store(path)
    s.insert_rows("problems", [
        {"name": "p_one", "subset": "L1", "content_hash": "h1", "definition": {"name": "p_one"},
         "n_workloads": 2},
        {"name": "p_two", "subset": "L2", "content_hash": "h2", "definition": {"name": "p_two"},
         "n_workloads": 2}])
    run = s.create_run(kind="optimize", id="run1")
    att = [("a1", "p_one", "evaluated", "ok", 0.7), ("a2", "p_one", "evaluated", "incorrect", None),
           ("a3", "p_one", "evaluated", "ok", 0.5), ("a4", "p_two", "failed", "compile_error", None),
           ("a5", "p_two", "evaluated", "ok", None), ("a6", "p_two", "evaluated", "ok", 0.35)]
    s.insert_rows("attempts", [
        {"id": a, "run_id": run, "problem": p, "agent": "llm", "model": "m", "language": "cuda",
         "status": st, "outcome": oc, "sol_score": sc, "created_at": _t(i), "updated_at": _t(i),
         "gpu_seconds": 1.5, "error": "boom" if st == "failed" else None}
        for i, (a, p, st, oc, sc) in enumerate(att)])
    s.insert_rows("compile_results", [
        {"attempt_id": "a4", "status": "error", "log": "kernel.cu(3): error: x", "created_at": _t(3)}])

    def ev(a, w, ok, ms, t, status=None):
        return {"attempt_id": a, "workload_uuid": w, "status": status or ("passed" if ok else "incorrect"),
                "correct": ok, "median_ms": ms, "created_at": _t(t), "message": None if ok else "mismatch"}
    s.insert_rows("eval_results", [
        ev("a1", "w1", True, 0.5, 10), ev("a1", "w2", True, 0.25, 10),
        ev("a2", "w1", True, 0.5, 11), ev("a2", "w2", True, 0.5, 5), ev("a2", "w2", False, 0.5, 11),
        ev("a3", "w1", True, 1.0, 12), ev("a3", "w2", True, 2.0, 12),
        ev("a5", "w1", True, 1.0, 14),
        ev("a6", "w1", True, 2.0, 15), ev("a6", "w2", True, 4.0, 15)])

    def sc(a, w, sp, sol, t):
        return {"attempt_id": a, "workload_uuid": w, "speedup": sp, "sol_score": sol,
                "t_kernel_ms": 1.0, "t_baseline_ms": sp, "created_at": _t(t)}
    s.insert_rows("scores", [sc("a1", "w1", 2.0, 0.6, 10), sc("a1", "w2", 8.0, 0.8, 10),
                             sc("a3", "w1", 1.0, 0.5, 12), sc("a3", "w2", 1.0, 0.5, 12),
                             sc("a5", "w1", 3.0, 0.9, 14),
                             sc("a6", "w1", 0.5, 0.3, 15), sc("a6", "w2", 0.5, 0.4, 15)])
    s.insert_rows("llm_calls", [
        {"id": "c1", "attempt_id": "a1", "run_id": run, "model": "m", "prompt_tokens": 100,
         "completion_tokens": 10, "cost_usd": 0.5, "status": "ok", "created_at": _t(9)},
        {"id": "c2", "attempt_id": "a1", "run_id": run, "model": "m", "prompt_tokens": 50,
         "completion_tokens": 0, "cost_usd": 0.25, "status": "error", "created_at": _t(9)},
        {"id": "c3", "attempt_id": "a4", "run_id": run, "model": "m", "prompt_tokens": 10,
         "completion_tokens": 5, "cost_usd": 1.0, "status": "ok", "created_at": _t(13)}])
    s.insert_rows("planner_decisions", [
        {"id": f"d{i}", "run_id": run, "problem": p, "worker": "llm", "action": "run",
         "reason": "r", "created_at": _t(t),
         "budget": {"budget": {"attempts": 10, "gpu_seconds": None, "dollars": 5.0},
                    "spent": {"attempts": n, "gpu_seconds": g, "dollars": d}}}
        for i, (p, t, n, g, d) in enumerate([("p_one", 0, 0, 0.0, 0.0), ("p_two", 13, 3, 4.5, 0.75)])])
    s.finish_run(run)
    return s


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "views.duckdb")


def test_attempt_summary_rolls_up_latest_rows(store):
    rows = {r["attempt_id"]: r for r in store.query("SELECT * FROM v_attempt_summary")}
    assert rows["a1"]["all_correct"] and math.isclose(rows["a1"]["speedup_geomean"], 4.0)
    assert math.isclose(rows["a1"]["sol_score"], 0.7)
    assert math.isclose(rows["a1"]["cost_usd"], 0.75) and rows["a1"]["llm_calls"] == 2
    assert rows["a2"]["all_correct"] is False  # its newest w2 row is wrong
    assert rows["a2"]["n_evaluated"] == 2 and rows["a2"]["n_correct"] == 1
    assert rows["a5"]["all_correct"] is False  # one of two workloads evaluated
    assert rows["a4"]["n_evaluated"] == 0 and rows["a4"]["all_correct"] is False


def test_best_per_problem_and_leaderboard(store):
    best = {r["problem"]: r for r in store.query("SELECT * FROM v_best_per_problem")}
    assert best["p_one"]["attempt_id"] == "a1"
    assert best["p_two"]["attempt_id"] == "a6"  # a5's higher score does not count: incomplete
    lb = store.query("SELECT * FROM v_leaderboard")
    assert [r["problem"] for r in lb] == ["p_one", "p_two"]
    one = lb[0]
    assert one["attempts"] == 3 and one["correct_attempts"] == 2
    assert math.isclose(one["correctness"], 2 / 3)
    assert math.isclose(one["best_speedup_geomean"], 4.0) and math.isclose(one["best_sol_score"], 0.7)
    assert math.isclose(lb[1]["cost_usd"], 1.0) and math.isclose(lb[1]["gpu_seconds"], 4.5)


def test_timeline_running_best(store):
    tl = store.query("SELECT attempt_no, best_sol_score_so_far, best_speedup_so_far, cost_usd_so_far "
                     "FROM v_attempt_timeline WHERE problem = 'p_one' ORDER BY attempt_no")
    assert [r["attempt_no"] for r in tl] == [1, 2, 3]
    assert [r["best_sol_score_so_far"] for r in tl] == pytest.approx([0.7, 0.7, 0.7])
    assert [r["cost_usd_so_far"] for r in tl] == pytest.approx([0.75, 0.75, 0.75])
    tl2 = store.query("SELECT best_sol_score_so_far AS b FROM v_attempt_timeline "
                      "WHERE problem = 'p_two' ORDER BY attempt_no")
    assert [r["b"] for r in tl2] == [None, None, pytest.approx(0.35)]


def test_llm_spend(store):
    (row,) = store.query("SELECT * FROM v_llm_spend")
    assert row["calls"] == 3 and row["failed_calls"] == 1 and row["attempts"] == 2
    assert math.isclose(row["cost_usd"], 1.75) and row["prompt_tokens"] == 160


def test_failures_by_kind(store):
    kinds = {(r["stage"], r["kind"]): r for r in store.query("SELECT * FROM v_failures_by_kind")}
    assert set(kinds) == {("attempt", "compile_error"), ("attempt", "incorrect"),
                          ("compile", "error"), ("evaluate", "incorrect")}
    assert kinds[("evaluate", "incorrect")]["n"] == 1  # the older passing row of a2/w2 is not a failure
    assert kinds[("compile", "error")]["latest_message"].startswith("kernel.cu(3)")


def test_views_reach_an_existing_database(tmp_path):
    """A store made before 070 gets the views the next time it is opened."""
    from solforge.store import migrate

    import shutil

    import duckdb

    old = tmp_path / "migrations_before_070"
    old.mkdir()
    for m in migrate.discover():
        if m.version < 70:
            shutil.copy(m.path, old / m.path.name)
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    migrate.migrate(con, old)
    con.close()
    s = Store(path)
    assert "070_views.sql" in s.applied_migrations
    assert s.query("SELECT * FROM v_leaderboard") == []


def test_a_screened_attempt_is_not_a_failure(tmp_path):
    """outcome 'screened' (optimize --screen: not faster than the best on the workloads it ran, the
    rest not run) is a verdict of the search: v_failures lists neither it nor its unrun workloads,
    while an incorrect attempt beside it stays listed."""
    s = make_store(tmp_path / "s.duckdb")
    s.insert_rows("attempts", [{"id": "a7", "run_id": "run1", "problem": "p_one",
                                "status": "evaluated", "outcome": "screened", "created_at": _t(70),
                                "updated_at": _t(71), "error": "screened: screened out"}])
    s.insert_rows("eval_results", [
        {"attempt_id": "a7", "workload_uuid": "w1", "status": "passed", "correct": True,
         "median_ms": 1.0, "created_at": _t(71)},
        {"attempt_id": "a7", "workload_uuid": "w2", "status": "skipped", "correct": None,
         "message": "not evaluated: screened out", "created_at": _t(71)}])
    rows = s.query("SELECT stage, kind, attempt_id FROM v_failures")
    assert not [r for r in rows if r["attempt_id"] == "a7"]
    assert ("attempt", "incorrect") in {(r["stage"], r["kind"]) for r in rows}
    s.close()
