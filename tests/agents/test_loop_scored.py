"""The loop's GPU branch on a CPU machine: real families, real NVRTC compiles, real roofline, real
DuckDB — and a stand-in evaluator in place of the GPU (timings from a formula over the params, named
as such). What is tested is the loop's bookkeeping for timed attempts: compiled -> evaluated,
eval_results and scores rows, attempts.sol_score, lineage, the offline search order, GPU budget."""

from __future__ import annotations

import math

import pytest

from solforge.agents.lab import Lab
from solforge.agents.offline import OfflineWorker
from solforge.agents.outcome import AttemptOutcome, Outcome, WorkloadOutcome
from solforge.agents.planner import Budget, PlannerConfig
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop

BASELINE_FACTOR = 4.0  # T_b = 4 x T_sol for every workload


def slowdown(params: dict) -> float:
    """The stand-in's T_k / T_sol: best at TPR=128, ROWS=2 (not the family's first guess). A point of
    another family (the compiler's generic plan, which has no TPR) is slower than every rmsnorm point,
    so the refinement the test follows is rmsnorm's."""
    if "TPR" not in params:
        return 3.5
    return 1.2 + 0.6 * abs(math.log2(params.get("TPR", 128) / 128)) + 0.3 * abs(params.get("ROWS", 2) - 2)


@pytest.fixture
def standin_lab(store, tmp_path, monkeypatch, rms_problem):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def evaluate(problem, cand, compiled):
        assert compiled is not None and compiled.cubins  # the loop hands over real cubins
        calls.append(dict(cand.params))
        sols = {s.uuid: s for s in lab.roofline(problem)}
        wls = [WorkloadOutcome(w.uuid, "passed", True, max_abs_err=1e-3, matched_ratio=1.0,
                               median_ms=sols[w.uuid].t_sol_ms * slowdown(cand.params))
               for w in problem.workloads]
        lab.score(problem, wls)
        return Outcome(AttemptOutcome.OK, "stand-in evaluation", workloads=wls, gpu_seconds=1.0)

    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, evaluator=evaluate, store=store)
    lab.set_baselines(rms_problem, {s.uuid: s.t_sol_ms * BASELINE_FACTOR
                                    for s in lab.roofline(rms_problem)})
    lab.calls = calls
    return lab


@pytest.fixture(scope="module")
def rms_problem(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    return load_problem_dir(sol_execbench_dir / "L1" / "069_rms_norm", subset="L1")


def test_timed_attempts_are_scored_stored_and_refined(store, standin_lab, rms_problem):
    loop = OptimizeLoop(store, [rms_problem], standin_lab, {"offline": OfflineWorker(standin_lab)},
                        LoopConfig(budget=Budget(attempts=6),
                                   planner=PlannerConfig(attempts_per_round=3)))
    report = loop.run()
    rows = store.query("SELECT * FROM attempts WHERE run_id = ? ORDER BY created_at", [report.run_id])
    assert len(rows) == 6 and all(r["status"] == "evaluated" and r["outcome"] == "ok" for r in rows)
    n_wl = len(rms_problem.workloads)
    for r in rows:
        sc = store.query("SELECT sol_score, speedup, t_kernel_ms, t_sol_ms, t_baseline_ms FROM scores "
                         "WHERE attempt_id = ?", [r["id"]])
        assert len(sc) == n_wl
        assert store.scalar("SELECT count(*) FROM eval_results WHERE attempt_id = ?", [r["id"]]) == n_wl
        assert store.scalar("SELECT count(*) FROM compile_results WHERE attempt_id = ? AND status = 'ok'",
                            [r["id"]]) == 1
        # S = 1/(1 + (k-1)/(B-1)) with k = T_k/T_sol, B = T_b/T_sol, the same for every workload
        k = slowdown(r["params"])
        assert r["sol_score"] == pytest.approx(1 / (1 + (k - 1) / (BASELINE_FACTOR - 1)), rel=1e-6)
        assert all(s["speedup"] == pytest.approx(BASELINE_FACTOR / k) for s in sc)
        assert r["gpu_seconds"] == 1.0
    # round 1 starts from the family's best guess; round 2 refines the best of round 1
    first_round, second_round = rows[:3], rows[3:]
    guess = OfflineWorker.families_for(rms_problem)[0].param_space(rms_problem)[0]
    assert guess.items() <= first_round[0]["params"].items()  # (plus the family's fixed params)
    best1 = max(first_round, key=lambda r: r["sol_score"])
    assert all(r["parent_id"] == best1["id"] for r in second_round)
    assert "neighbour of best" in second_round[0]["candidate"]["notes"]
    assert len({r["source_hash"] for r in rows}) == 6  # never the same point twice
    assert report.spent.gpu_seconds == 6.0
    assert report.problems["069_rms_norm"].best_sol_score == pytest.approx(max(r["sol_score"] for r in rows))
    dec = store.query("SELECT action, metrics FROM planner_decisions WHERE run_id = ? AND action = 'run' "
                      "ORDER BY created_at", [report.run_id])
    assert dec[1]["metrics"]["best_sol"] == pytest.approx(best1["sol_score"])


def test_gpu_second_budget_stops_the_run(store, standin_lab, rms_problem):
    loop = OptimizeLoop(store, [rms_problem], standin_lab, {"offline": OfflineWorker(standin_lab)},
                        LoopConfig(budget=Budget(gpu_seconds=4.0), planner=PlannerConfig(attempts_per_round=2)))
    report = loop.run()
    assert report.spent.gpu_seconds == 4.0 and report.spent.attempts == 4
    assert "GPU-second budget spent" in report.stop_reason


def test_wall_clock_budget_stops_between_attempts(store, standin_lab, rms_problem):
    import time

    inner = standin_lab._evaluator

    def slow(problem, cand, compiled):
        time.sleep(0.5)
        return inner(problem, cand, compiled)

    standin_lab._evaluator = slow
    loop = OptimizeLoop(store, [rms_problem], standin_lab, {"offline": OfflineWorker(standin_lab)},
                        LoopConfig(budget=Budget(wall_seconds=1.0),
                                   planner=PlannerConfig(attempts_per_round=9)))
    report = loop.run()
    assert 1 <= report.spent.attempts < 9  # stopped inside the session, between attempts
    assert "wall-clock budget spent" in report.stop_reason
    # nothing left half-done: evaluated, or interrupted with its reason (the budget ended while it
    # waited for the GPU) for a resumed run to finish
    rows = store.query("SELECT status, error FROM attempts WHERE run_id = ?", [report.run_id])
    assert all(r["status"] == "evaluated" or (r["status"] == "interrupted" and "wall budget" in r["error"])
               for r in rows), rows


def test_scores_name_the_faster_baseline(store, tmp_path, monkeypatch, rms_problem):
    """T_b = the faster of eager and torch.compile from the store, and the scores row says which."""
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    probe = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, evaluator=None, store=None)
    t_sol = {s.uuid: s.t_sol_ms for s in probe.roofline(rms_problem)}
    uuids = sorted(t_sol)
    faster = {u: ("compile" if i % 2 else "eager") for i, u in enumerate(uuids)}
    store.insert_rows("baselines", [
        {"problem": rms_problem.name, "workload_uuid": u, "variant": v, "status": "passed",
         "median_ms": t_sol[u] * (BASELINE_FACTOR if v == faster[u] else 2 * BASELINE_FACTOR)}
        for u in uuids for v in ("eager", "compile")])

    def evaluate(problem, cand, compiled):
        wls = [WorkloadOutcome(w.uuid, "passed", True, max_abs_err=1e-3, matched_ratio=1.0,
                               median_ms=t_sol[w.uuid] * 2.0) for w in problem.workloads]
        lab.score(problem, wls)
        return Outcome(AttemptOutcome.OK, "stand-in evaluation", workloads=wls, gpu_seconds=1.0)

    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, evaluator=evaluate, store=store)
    OptimizeLoop(store, [rms_problem], lab, {"offline": OfflineWorker(lab)},
                 LoopConfig(budget=Budget(attempts=1), planner=PlannerConfig(attempts_per_round=1))).run()
    rows = store.query("SELECT workload_uuid, baseline_variant, t_baseline_ms, speedup FROM scores")
    assert len(rows) == len(uuids)
    for r in rows:
        assert r["baseline_variant"] == faster[r["workload_uuid"]]
        assert r["t_baseline_ms"] == pytest.approx(t_sol[r["workload_uuid"]] * BASELINE_FACTOR)
        assert r["speedup"] == pytest.approx(BASELINE_FACTOR / 2.0)
