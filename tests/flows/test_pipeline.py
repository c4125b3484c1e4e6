"""The orchestrated loop has no round barrier: when one problem's session is slow, the other GPU keeps
getting work from the other problems. Real parts: kernel families, NVRTC compiles, planner, content
cache, DuckDB, GPU slots (GpuPool, two pretend GPUs); a stand-in evaluator in place of the GPU (named
as such) whose speed the test controls: one problem's first evaluation blocks until an evaluation of
the other problem's second or later session starts while the first problem's first session runs (or
a deadline passes)."""

from __future__ import annotations

import threading
import time

import pytest

from solforge.agents.lab import Lab
from solforge.agents.offline import OfflineWorker
from solforge.agents.outcome import AttemptOutcome, Outcome, WorkloadOutcome
from solforge.agents.planner import Budget, PlannerConfig
from solforge.orchestrate.gpus import GpuPool
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop, Stages

SLOW, FAST = "022_rmsnorm_h512", "021_rmsnorm_h128"


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return load_problems(sol_execbench_dir)


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("compile-cache")  # the second variant reuses the first's cubins


def build_loop(db, problems, compile_cache, *, barrier: bool, hold_s: float, budget: int = 7,
               stages: Stages | None = None, as_task=None):
    """The loop under test and the stand-in's record of evaluations. `stages`: e.g. the Prefect
    flow's (tasks/optimize.py); `as_task` wraps the stand-in like the flow wraps evaluate_pinned."""
    import os

    from solforge.store import Store

    os.environ["SOLFORGE_CACHE_DIR"] = str(compile_cache)
    store = Store(db)
    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, store=store)
    for p in problems:  # T_b known: no baseline is measured
        lab.set_baselines(p, {s.uuid: s.t_sol_ms * 4 for s in lab.roofline(p)})
    evals: list[tuple[str, float, float, str]] = []   # (problem, start, end, gpu)
    fast_evals = []
    slow_running = threading.Event()   # the slow problem's first session, from its start to its end
    fast_during_slow = threading.Event()
    slow_sessions = []

    def standin_evaluate(lab, problem, cand, compiled, pool):
        """Stand-in for evaluate_pinned: holds a GPU slot like it, times nothing."""
        assert compiled is not None and compiled.cubins  # a real compile reached this stage
        with pool.slot(label=f"{problem.name}:{cand.source_hash()[:8]}") as slot:
            t0 = time.monotonic()
            if problem.name == FAST:
                fast_evals.append(t0)
                if slow_running.is_set() and len(fast_evals) >= 2:  # a later session of FAST
                    fast_during_slow.set()
                time.sleep(0.02)
            elif not [e for e in evals if e[0] == SLOW]:  # the slow problem's first evaluation
                # held until a second-or-later evaluation of the fast problem starts while its
                # session runs: counted from the session's start, not this evaluation's (on a
                # loaded machine the slow session's compile may outlast every fast session the
                # budget allows; those ran beside it all the same, so nothing is left to wait for)
                fast_during_slow.wait(hold_s)
            evals.append((problem.name, t0, time.monotonic(), slot.gpu))
        sols = {s.uuid: s for s in lab.roofline(problem)}
        wls = [WorkloadOutcome(w.uuid, "passed", True, max_abs_err=0.0, matched_ratio=1.0,
                               median_ms=sols[w.uuid].t_sol_ms * (1.5 + 0.1 * len(evals)))
               for w in problem.workloads]
        return Outcome(AttemptOutcome.OK, "stand-in evaluation", workloads=wls, gpu_seconds=0.01)

    stages = stages or Stages()
    stages.evaluate = as_task(standin_evaluate) if as_task else standin_evaluate
    session = stages.session

    def watched_session(loop, d):
        first_slow = d.problem == SLOW and not slow_sessions
        if first_slow:
            slow_sessions.append(d)
            slow_running.set()
        try:
            return session(loop, d)
        finally:
            if first_slow:
                slow_running.clear()

    stages.session = watched_session
    stages.prestart = lambda loop: None
    cfg = LoopConfig(budget=Budget(attempts=budget), planner=PlannerConfig(attempts_per_round=1),
                     runs_per_round=2)
    # both problems matched before the run: the loop plans each problem as its match lands, and
    # with a cold trace cache on a loaded machine the fast problem's 7 quick attempts were once all
    # spent before the slow problem's match landed (no slow session at all: nothing this test is about)
    offline = OfflineWorker(lab)
    offline.warm(problems)
    loop = OptimizeLoop(store, problems, lab, {"offline": offline}, cfg,
                        pool=GpuPool(["0", "1"], cross_process=False), stages=stages,
                            key_parts={"test": "pipeline", "barrier": barrier})
    if barrier:  # the rounds this loop had before: every session of a round ends before the next
        loop._drive = loop._drive_rounds
    return loop, evals


def load_problems(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    return [load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / n, subset="FlashInfer-Bench")
            for n in (SLOW, FAST)]


def _run(tmp_path, monkeypatch, problems, compile_cache, *, barrier: bool, hold_s: float,
         budget: int = 7):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(compile_cache))
    db = tmp_path / ("barrier" if barrier else "pipeline") / "o.duckdb"
    loop, evals = build_loop(db, problems, compile_cache, barrier=barrier, hold_s=hold_s, budget=budget)
    report = loop.run()
    return loop, report, loop.store, evals


def _slow_first(loop):
    return min((s for s in loop.session_log if s[0] == SLOW), key=lambda s: s[1])


def test_a_fast_problem_keeps_running_while_a_slow_session_holds_the_other_gpu(
        tmp_path, monkeypatch, problems, compile_cache):
    loop, report, store, evals = _run(tmp_path, monkeypatch, problems, compile_cache,
                                      barrier=False, hold_s=120.0)
    _, s0, s1 = _slow_first(loop)
    fast = sorted((a, b) for p, a, b in loop.session_log if p == FAST)
    # the fast problem's second (and later) session started while the slow one was still running
    assert len(fast) >= 2 and fast[1][0] < s1, (fast, s0, s1)
    slow_eval = next(e for e in evals if e[0] == SLOW)
    seen = (evals, loop.session_log)
    assert slow_eval[2] - slow_eval[1] < 60, ("the slow evaluation waited for its deadline", seen)
    overlapped = [e for e in evals if e[0] == FAST and s0 < e[1] < s1]
    assert len(overlapped) >= 1, seen
    # a fast evaluation during the slow one's ran on the other GPU
    assert all(e[3] != slow_eval[3] for e in overlapped if slow_eval[1] < e[1] < slow_eval[2]), seen
    # one evaluation per GPU at a time, still
    for g in ("0", "1"):
        iv = sorted((a, b) for _, a, b, gg in evals if gg == g)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(iv, iv[1:]))
    # the guarantees the rounds had: the attempt budget exactly, nothing evaluated twice, every
    # decision stored with its reason, the final stop recorded once nothing ran
    rows = store.query("SELECT problem, source_hash, outcome FROM attempts WHERE run_id = ?", [report.run_id])
    assert len(rows) == 7 and report.spent.attempts == 7
    assert all(r["outcome"] == "ok" for r in rows)
    assert len({(r["problem"], r["source_hash"]) for r in rows}) == len(rows)
    assert len(evals) == 7
    dec = store.query("SELECT action, problem, reason FROM planner_decisions WHERE run_id = ? "
                      "ORDER BY created_at", [report.run_id])
    assert all(d["reason"] for d in dec)
    assert sum(d["action"] == "run" for d in dec) == len(loop.session_log)
    assert dec[-1]["action"] == "stop" and "attempt budget spent (7/7)" in dec[-1]["reason"]
    assert "attempt budget spent" in report.stop_reason
    assert report.gpu_use["evaluations"] == 7


def test_with_rounds_the_fast_problem_waits_for_the_slow_one(tmp_path, monkeypatch, problems,
                                                               compile_cache):
    """The same run through the barrier rounds: shows what the test above would catch."""
    loop, report, store, evals = _run(tmp_path, monkeypatch, problems, compile_cache,
                                      barrier=True, hold_s=1.5, budget=4)
    _, s0, s1 = _slow_first(loop)
    fast = sorted((a, b) for p, a, b in loop.session_log if p == FAST)
    assert len(fast) >= 2 and fast[1][0] >= s1
    assert report.spent.attempts == 4


PREFECT_SCRIPT = """
import json, sys, time
from pathlib import Path
sys.path[:0] = ['.', 'tests/flows']
from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote
from tasks.optimize import prefect_stages
import test_pipeline as tp

def as_task(fn):
    t = task(name='evaluate-standin', cache_policy=NO_CACHE)(fn)
    return lambda lab, problem, cand, res, pool: t(quote(lab), quote(problem), quote(cand), quote(res),
                                                   quote(pool))

@flow(name='pipeline-check')
def check(db, cache, shared):
    loop, evals = tp.build_loop(db, tp.load_problems(Path(shared)), cache, barrier=False, hold_s=120,
                                budget=5, stages=prefect_stages(), as_task=as_task)
    rep = loop.run()
    return {'sessions': loop.session_log, 'evals': evals, 'attempts': rep.spent.attempts,
            'stop': rep.stop_reason}

print('RESULT ' + json.dumps(check(sys.argv[1], sys.argv[2], sys.argv[3])))
"""


@pytest.mark.slow
def test_the_prefect_flows_stages_run_without_a_barrier_too(prefect_api, tmp_path, sol_execbench_dir,
                                                            compile_cache):
    """The same pipeline with the optimize flow's stages (every stage a Prefect task run; the planner
    task runs in the flow's thread while session tasks run in theirs), on the real server."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**prefect_api.env, "SOLFORGE_GPU_LOCK_DIR": str(tmp_path / "locks")}
    p = subprocess.run([sys.executable, "-c", PREFECT_SCRIPT, str(tmp_path / "p.duckdb"), str(compile_cache),
                        str(sol_execbench_dir)], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    r = json.loads(p.stdout.split("RESULT ", 1)[1].splitlines()[0])
    slow = min((s for s in r["sessions"] if s[0] == SLOW), key=lambda s: s[1])
    fast = sorted(s[1] for s in r["sessions"] if s[0] == FAST)
    assert len(fast) >= 2 and fast[1] < slow[2], r
    assert r["attempts"] == 5 and "attempt budget spent (5/5)" in r["stop"]
    names = {t["name"].rsplit("-", 1)[0] for t in prefect_api.call("POST", "/task_runs/filter", {})}
    assert {"plan-round", "propose", "compile", "evaluate-standin", "score", "store-result"} <= names, names


def test_sessions_queued_for_a_gpu_stop_at_the_wall_budget(tmp_path, monkeypatch, problems, compile_cache):
    """One GPU slot, two sessions: the second waits for the slot the first holds past the wall budget.
    It stops at the budget (its attempt interrupted, for a resumed run to finish) instead of
    starting an evaluation after it."""
    from solforge.store import Store

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(compile_cache))
    store = Store(tmp_path / "wall.duckdb")
    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, store=store)
    for p in problems:
        lab.set_baselines(p, {s.uuid: s.t_sol_ms * 4 for s in lab.roofline(p)})
    started = []

    def quick(lab, problem, cand, compiled, pool, hold_s=0.0):
        with pool.slot(label=problem.name):
            started.append((problem.name, time.monotonic()))
            time.sleep(hold_s)
        sols = {s.uuid: s for s in lab.roofline(problem)}
        wls = [WorkloadOutcome(w.uuid, "passed", True, max_abs_err=0.0, matched_ratio=1.0,
                               median_ms=sols[w.uuid].t_sol_ms * 2) for w in problem.workloads]
        return Outcome(AttemptOutcome.OK, "stand-in evaluation", workloads=wls, gpu_seconds=hold_s)

    stages = Stages()
    stages.evaluate = lambda *a: quick(*a, hold_s=8.0)
    stages.prestart = lambda loop: None
    worker = OfflineWorker(lab)
    worker.warm(problems)  # matched before the clock: the budget below is for the sessions alone
    wall = 6.0
    loop = OptimizeLoop(store, problems, lab, {"offline": worker},
                        LoopConfig(budget=Budget(attempts=20, wall_seconds=wall),
                                   planner=PlannerConfig(attempts_per_round=1), runs_per_round=2),
                        pool=GpuPool(["0"], cross_process=False), stages=stages,
                        key_parts={"test": "wall"})
    t0 = time.monotonic()
    report = loop.run()
    took = time.monotonic() - t0
    assert len(started) == 1, started               # nothing started after the budget
    assert started[0][1] - t0 < wall
    assert took < wall + 8.0 + 5.0, took             # the one evaluation in flight, then the end
    rows = store.query("SELECT problem, status FROM attempts WHERE run_id = ?", [report.run_id])
    assert sorted(r["status"] for r in rows) == ["evaluated", "interrupted"], rows
    assert "wall-clock budget spent" in report.stop_reason
    # the same job resumed: the interrupted attempt is finished first, as a child of it
    stuck = store.scalar("SELECT id FROM attempts WHERE run_id = ? AND status = 'interrupted'",
                         [report.run_id])
    stages.evaluate = quick
    again = OptimizeLoop(store, problems, lab, {"offline": worker},
                         LoopConfig(budget=Budget(attempts=20, wall_seconds=wall),
                                    planner=PlannerConfig(attempts_per_round=1), runs_per_round=2),
                         pool=GpuPool(["0"], cross_process=False), stages=stages,
                         key_parts={"test": "wall"})
    again.run()
    assert again.resumed == 1
    assert store.scalar("SELECT status FROM attempts WHERE parent_id = ?", [stuck]) == "evaluated"
