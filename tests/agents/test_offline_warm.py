"""OfflineWorker.warm: every problem matched to its kernel families in child processes before the
planner asks, within a deadline; answers come back through the disk cache. Problems written here."""

from __future__ import annotations

import os
import time

from solforge.agents.offline import OfflineWorker

import json
import textwrap

from .conftest import write_unservable_problem

SCALE = """
import torch

def run(x):
    return x * 2.0 + 1.0
"""

SLOW = """
import time
import torch

def run(x):
    time.sleep(300)  # tracing this takes minutes: past any test deadline
    return x + 1.0
"""


def _problem(tmp, name, ref):
    """A one-input elementwise problem over a var axis, two workloads."""
    from solforge.problem import load_problem_dir

    d = tmp / name
    d.mkdir(parents=True)
    defn = {"name": name, "axes": {"n": {"type": "var"}},
            "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
            "outputs": {"out": {"shape": ["n"], "dtype": "float32"}}, "reference": textwrap.dedent(ref)}
    (d / "definition.json").write_text(json.dumps(defn))
    (d / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"{name}-{i}", "axes": {"n": n}, "inputs": {"x": {"type": "random"}}}) + "\n"
        for i, n in enumerate((1000, 4097))))
    return load_problem_dir(d, subset="written")


def test_warm_matches_in_children_through_the_disk_cache(tmp_path, cpu_lab):
    served = _problem(tmp_path, "scale_shift", SCALE)
    unserved = load_unserved(tmp_path)
    w = OfflineWorker(cpu_lab)
    got = w.warm([served, unserved], deadline_s=300, jobs=2)
    assert got["matched"] == 2 and got["unmatched"] == []
    # the parent read the children's answers: the compiler's outcome is on disk, not only in memory
    assert list((tmp_path / "cache" / "compiler").glob("*.json"))
    assert w.has_family(served) and not w.has_family(unserved)
    assert any(fs.family.name == "compiler" for fs in w._state(served).families)


def _sandboxes_under(tmp) -> tuple[list, list]:
    """The sandbox folders left in tmp, and the live processes whose command line names one."""
    dirs = sorted(p.name for p in tmp.glob("solforge-sandbox-*"))
    procs = []
    for d in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if d.isdigit() and str(tmp) in cmd and "sandbox" in cmd:
            procs.append(int(d))
    return dirs, procs


def test_warm_leaves_out_what_misses_the_deadline(tmp_path, cpu_lab, monkeypatch):
    fast, slow = _problem(tmp_path, "scale_shift", SCALE), _problem(tmp_path, "slow_trace", SLOW)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the matching children's sandbox folders go here
    w = OfflineWorker(cpu_lab)
    t0 = time.monotonic()
    got = w.warm([fast, slow], deadline_s=60, jobs=2)
    assert time.monotonic() - t0 < 80  # the slow one's child was stopped, not waited for
    assert got["unmatched"] == ["slow_trace"] and got["matched"] == 1
    assert w.has_family(fast) and not w.has_family(slow)
    # and its sandboxed trace with it: no process tracing on to its own limit, no folder left
    end = time.monotonic() + 15
    while _sandboxes_under(tmp) != ([], []) and time.monotonic() < end:
        time.sleep(0.2)
    assert _sandboxes_under(tmp) == ([], [])


def test_warm_with_no_time_left_matches_nothing(tmp_path, cpu_lab):
    a, b = _problem(tmp_path, "a", SCALE), _problem(tmp_path, "b", SCALE)
    w = OfflineWorker(cpu_lab)
    got = w.warm([a, b], deadline_s=0)
    assert got["matched"] == 0 and sorted(got["unmatched"]) == ["a", "b"]
    assert not w.has_family(a) and not w._search["b"].families


def load_unserved(tmp_path):
    from solforge.problem import load_problem_dir

    return load_problem_dir(write_unservable_problem(tmp_path / "row_eigenvalues"), subset="written")


def test_warm_in_the_background_lands_each_problem_as_it_is_matched(tmp_path, cpu_lab):
    """wait=False: the fast problem is served while the slow one is still tracing; an attempt
    remembered for a problem still being matched is kept until its match lands."""
    fast, slow = _problem(tmp_path, "scale_shift", SCALE), _problem(tmp_path, "slow_trace", SLOW)
    first = next(fs for fs in OfflineWorker(cpu_lab)._state(fast).families
                 if fs.family.name == "compiler").space[0]  # traced here once: the children read it
    w = OfflineWorker(cpu_lab)
    t0 = time.monotonic()
    got = w.warm([fast, slow], deadline_s=120, jobs=2, wait=False)
    assert got == {"matching": 2} and time.monotonic() - t0 < 5
    assert w.pending("scale_shift") and not w.has_family(fast)  # asking does not trace in-process
    w.remember(fast, {"notes": "family=compiler", "params": dict(first)}, 0.7)
    while w.pending("scale_shift"):
        assert time.monotonic() - t0 < 100, "the fast problem never landed"
        w.wait_matched(timeout=5.0)
    assert w.pending("slow_trace") and w.pending_count() == 1
    assert w.has_family(fast)
    assert 0.7 in [v for fs in w._state(fast).families for v in fs.tried.values()]
    res = w.matching_result(stop=True)  # the run ended: the slow child is stopped, not waited for
    assert time.monotonic() - t0 < 110
    assert res["matched"] == 1 and res["unmatched"] == ["slow_trace"] and not w.has_family(slow)


def test_loop_runs_sessions_while_matching_goes_on(tmp_path, store, cpu_lab):
    """One problem whose trace outlasts the run's wall budget does not hold the others: before,
    every problem was matched before planning and a run like this one made no attempt at all."""
    from solforge.agents.planner import Budget, PlannerConfig
    from solforge.orchestrate.loop import LoopConfig, OptimizeLoop

    fast, slow = _problem(tmp_path, "scale_shift", SCALE), _problem(tmp_path, "slow_trace", SLOW)
    loop = OptimizeLoop(store, [fast, slow], cpu_lab, {"offline": OfflineWorker(cpu_lab)},
                        LoopConfig(budget=Budget(attempts=4, wall_seconds=60), planner=PlannerConfig()))
    report = loop.run()
    rows = store.query("SELECT problem, status FROM attempts WHERE run_id = ?", [report.run_id])
    assert rows and {r["problem"] for r in rows} == {"scale_shift"}
    assert all(r["status"] == "compiled" for r in rows)
    assert loop.matching["unmatched"] == ["slow_trace"]
    assert any("not matched to a kernel family" in n for n in report.notes)
    dec = store.query("SELECT problem, action FROM planner_decisions WHERE run_id = ?", [report.run_id])
    assert "slow_trace" not in {d["problem"] for d in dec if d["action"] == "run"}


def test_a_child_whose_compiler_trace_timed_out_says_its_answer_is_not_kept(tmp_path, monkeypatch):
    # a trace past its time box is not on disk: the parent would trace again for as long
    from solforge.agents import offline
    from solforge.compiler.api import CompileOutcome
    from solforge.kernels import compiled

    prob = _problem(tmp_path, "scale_shift", SCALE)
    monkeypatch.setattr(offline.OfflineWorker, "families_for", staticmethod(lambda p: []))
    for out, kept in ((CompileOutcome(reason="tracing the reference took over 300 s", stage="trace"),
                       False),
                      (CompileOutcome(reason="trace failed in the sandbox: crash", stage="trace"), True),
                      (CompileOutcome(reason="plan: unsupported op", stage="plan"), True),
                      (None, True)):
        monkeypatch.setattr(compiled, "_outcome", lambda p, params=None, o=out: o)
        assert offline._match_in_child(prob) is kept


def test_the_end_of_a_run_does_not_wait_for_a_slow_landing(tmp_path, cpu_lab):
    # The matching thread reads each landed answer in this process; where that is slow (an answer it
    # must compute itself), stopping at the run's end waits a bounded time, not for the landing.
    import threading

    a, b = _problem(tmp_path, "a", SCALE), _problem(tmp_path, "b", SCALE)
    w = OfflineWorker(cpu_lab)
    inside, release = threading.Event(), threading.Event()
    real = w._state

    def slow_state(problem):
        inside.set()
        release.wait(120)
        return real(problem)

    w._state = slow_state
    w.warm([a, b], deadline_s=300, jobs=2, wait=False)
    assert inside.wait(240), "no match landed"
    t0 = time.monotonic()
    got = w.matching_result(stop=True, stop_wait_s=2.0)
    assert time.monotonic() - t0 < 10
    assert got.get("left_running") and set(got["unmatched"]) <= {"a", "b"} and got["unmatched"]
    release.set()


def test_a_match_landing_between_plan_and_wait_starts_on_the_free_place(tmp_path, store, cpu_lab):
    """Two places, one running session; a problem's match lands just after the plan that could not
    start it yet. The free place starts it at once, not when the running session ends (the wait
    counted what was still matching from its own start, saw nothing pending and waited for the
    slowest session: CI saw a fast problem idle for a slow session's whole 120 s)."""
    import threading

    from solforge.agents.planner import Action, Budget, Decision, PlannerConfig, Worker
    from solforge.orchestrate.loop import LoopConfig, OptimizeLoop, Stages

    a, b = _problem(tmp_path, "first", SCALE), _problem(tmp_path, "landing", SCALE)
    pending = {"landing"}
    started = {}
    b_started = threading.Event()

    def plan(states, budget, spent, cfg, n):
        names = {s.name for s in states}
        runs = [nm for nm in ("first", "landing") if nm in names and nm not in started
                and nm not in pending][:n]
        for nm in runs:
            started[nm] = None
        pending.discard("landing")  # lands right after this plan looked
        if not runs:
            return [Decision(Action.STOP, None, None, None, 0, 0.0, "both ran")]
        return [Decision(Action.RUN, nm, Worker.OFFLINE, None, 1, 1.0, "stand-in") for nm in runs]

    def session(loop, d):
        started[d.problem] = time.monotonic()
        if d.problem == "first":
            b_started.wait(20.0)  # held until the landed problem starts beside it
        else:
            b_started.set()

    loop = OptimizeLoop(store, [a, b], cpu_lab, {},
                        LoopConfig(budget=Budget(attempts=4), planner=PlannerConfig(), runs_per_round=2),
                        stages=Stages(session=session, plan=plan))
    loop._matching = lambda: len(pending)
    t0 = time.monotonic()
    loop.run()
    first = next(s for s in loop.session_log if s[0] == "first")
    assert started["landing"] is not None and started["landing"] < first[2]
    assert time.monotonic() - t0 < 15, "the landed problem waited for the running session to end"


def test_matching_children_run_below_the_run():
    """The matching children work beside the run's evaluations: they run MATCH_NICE lower."""
    import os

    from solforge.agents.offline import MATCH_NICE, match_pool

    with match_pool(1) as ex:
        child = ex.submit(os.nice, 0).result(timeout=120)
    assert child == min(19, os.nice(0) + MATCH_NICE)
