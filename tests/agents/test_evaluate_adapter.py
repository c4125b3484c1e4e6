"""The evaluation path through the real spawned runner. Without a GPU the driver cannot load a CUDA
candidate, so every workload must come back as a runtime error, per workload, with the reason — the
plumbing (stage, spawn, JSON lines, RunReport -> Outcome, eval_results rows) is what is tested here."""

from __future__ import annotations

import pytest

from solforge.agents.evaluate_adapter import outcome_of_report
from solforge.agents.outcome import AttemptOutcome
from solforge.candidate import Candidate
from solforge.orchestrate.evaluation import evaluate_pinned
from solforge.orchestrate.gpus import GpuPool
from solforge.evaluate.results import EvalResult, RunReport

from .conftest import RMSNORM_H128, candidate_json


def test_runner_path_on_a_cpu_machine(cpu_lab, rmsnorm_problem):
    cand = Candidate.model_validate(candidate_json(RMSNORM_H128))
    compiled_out, compiled = cpu_lab.compile(cand)
    assert compiled_out.status is AttemptOutcome.COMPILED
    out = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, GpuPool(["0"], cross_process=False))
    assert out.status is AttemptOutcome.RUNTIME_ERROR and "CUDA" in out.message
    assert [w.uuid for w in out.workloads] == [w.uuid for w in rmsnorm_problem.workloads]
    assert len(out.eval_rows) == len(rmsnorm_problem.workloads)
    assert all(r["status"] in ("runtime_error", "skipped") for r in out.eval_rows)
    assert out.gpu_seconds > 0 and out.sol_score is None


def _r(uuid, status, **kw):
    return EvalResult(uuid, status, correct=status == "passed", **kw)


def test_report_to_outcome():
    ok = outcome_of_report(RunReport("p", [_r("a", "passed", median_ms=0.01), _r("b", "passed", median_ms=0.02)]))
    assert ok.status is AttemptOutcome.OK and ok.workloads[1].median_ms == 0.02
    bad = outcome_of_report(RunReport("p", [_r("a", "passed", median_ms=0.01),
                                            _r("b", "incorrect", max_abs_err=3.0, message="diff")]))
    assert bad.status is AttemptOutcome.INCORRECT and "1/2" in bad.message and "3.0" in bad.message
    assert bad.workloads[0].median_ms == 0.01
    rej = outcome_of_report(RunReport("p", [_r("a", "rejected", message="[sol_floor] too fast")]))
    assert rej.status is AttemptOutcome.RUNTIME_ERROR and "sol_floor" in rej.message
    to = outcome_of_report(RunReport("p", [_r("a", "timeout")], killed=True))
    assert to.status is AttemptOutcome.TIMEOUT
    empty = outcome_of_report(RunReport("p", [], exit_code=1, stderr_tail="Segmentation fault"))
    assert empty.status is AttemptOutcome.RUNTIME_ERROR and "Segmentation" in empty.message


def test_lanes_lengthen_the_wall_cap_not_the_own_time_limit(cpu_lab, rmsnorm_problem, monkeypatch):
    """With N lanes on a GPU an evaluation may wait for N-1 other timings: its limits count its own
    time (the waits reported by the driver left out), so they stay the per-candidate ones, and only
    the plain wall-clock cap is N times longer; a workload limit applies as well."""
    from solforge.evaluate import runner

    seen = []

    def run_stage(stage, timeout_s, env=None, wall_cap_s=None, workload_timeout_s=None, workloads=None):
        seen.append((timeout_s, wall_cap_s, workload_timeout_s))
        return RunReport(rmsnorm_problem.name, [])
    monkeypatch.setattr(runner, "run_stage", run_stage)
    monkeypatch.setenv("SOLFORGE_WORKLOAD_TIMEOUT_S", "25")
    cand = Candidate.model_validate(candidate_json(RMSNORM_H128))
    _, compiled = cpu_lab.compile(cand)
    for lanes in (1, 3):
        evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled,
                        GpuPool(["0"], cross_process=False, lanes=lanes), timeout_s=40.0)
    assert seen == [(40.0, 40.0, 25.0), (40.0, 120.0, 25.0)]


def test_out_of_memory_beside_other_lanes_runs_again_alone(cpu_lab, rmsnorm_problem, monkeypatch):
    """An evaluation that ran out of device memory while other lanes' evaluations shared its GPU is
    run again holding every lane of that GPU, and the second verdict is the attempt's; the first
    try's seconds stay on the bill. On one lane the out-of-memory verdict is final."""
    from solforge.evaluate import runner

    uuids = [w.uuid for w in rmsnorm_problem.workloads]
    calls, pool = [], None

    def run_stage(stage, timeout_s, env=None, wall_cap_s=None, workload_timeout_s=None, workloads=None):
        held = pool.lanes - sum(1 for k in pool._free if k[0] == "0")
        calls.append((held, wall_cap_s))
        if len(calls) == 1:
            return RunReport(rmsnorm_problem.name, [_r(u, "oom", message="CUDA out of memory")
                                                    for u in uuids])
        return RunReport(rmsnorm_problem.name, [_r(u, "passed", median_ms=0.01) for u in uuids])
    monkeypatch.setattr(runner, "run_stage", run_stage)
    cand = Candidate.model_validate(candidate_json(RMSNORM_H128))
    _, compiled = cpu_lab.compile(cand)

    pool = GpuPool(["0"], cross_process=False, lanes=3)
    out = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert calls == [(1, 120.0), (3, 40.0)]          # first on one lane, then on all three
    assert out.status is AttemptOutcome.OK
    assert out.eval_phases["shared_oom_retry"] > 0
    assert sorted(pool._free) == [("0", 0), ("0", 1), ("0", 2)]   # every lane handed back

    calls.clear()
    pool = GpuPool(["0"], cross_process=False, lanes=1)
    out = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert len(calls) == 1 and out.status is AttemptOutcome.RUNTIME_ERROR
    assert "shared_oom_retry" not in out.eval_phases


def test_every_workload_skipped_is_not_called_incorrect():
    """An attempt none of whose workloads ran (inputs or the reference failed) is not "incorrect on
    0/N": its message says they were not evaluated, and why."""
    out = outcome_of_report(RunReport("p", [
        _r("a", "skipped", message="not evaluated: making inputs failed: ValueError: no"),
        _r("b", "skipped", message="not evaluated: making inputs failed: ValueError: no")]))
    assert out.status is AttemptOutcome.INCORRECT
    assert out.message.startswith("not evaluated on 2/2 workloads") and "ValueError" in out.message
    assert "incorrect on" not in out.message


def test_out_of_memory_while_making_inputs_is_an_oom_verdict():
    """Device memory running out while a workload's inputs are made is the OOM verdict (which the
    lanes of a shared GPU retry alone), not a workload skipped for bad inputs."""
    import pytest
    import torch

    from solforge.evaluate import evaluator

    class Factory:
        def __init__(self, exc):
            self.exc = exc

        def make(self, r):
            raise self.exc

    with pytest.raises(torch.cuda.OutOfMemoryError):
        evaluator._make(Factory(torch.cuda.OutOfMemoryError("CUDA out of memory.")), 0)
    with pytest.raises(evaluator._InputsFailed):
        evaluator._make(Factory(ValueError("bad shape")), 0)
    status, _ = evaluator.classify_exception(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    assert status.value == "oom"


def test_screening_runs_a_few_workloads_first_once_a_best_is_known(cpu_lab, rmsnorm_problem,
                                                                    monkeypatch):
    """With screening on, a run's first evaluation runs every workload (no GPU model reported yet);
    once the store holds a timed best on that GPU model, a candidate runs on K workloads first: twice
    as slow as the best there, it stops ("screened", the rest not run, no SOL score); as fast, it runs
    the rest too and is an ordinary verdict over every workload."""
    from solforge.evaluate import runner
    from solforge.evaluate.results import HardwareInfo
    from solforge.orchestrate import attempts
    from solforge.store import attempt_queries

    uuids = [w.uuid for w in rmsnorm_problem.workloads]
    assert len(uuids) > 3
    hw = HardwareInfo(gpu_name="NVIDIA H200", driver="580", cuda_runtime="13.0",
                      compute_capability="9.0")
    calls, speed = [], {"ms": 0.01}

    def run_stage(stage, timeout_s, env=None, wall_cap_s=None, workload_timeout_s=None, workloads=None):
        calls.append(workloads)
        return RunReport(rmsnorm_problem.name,
                         [_r(u, "passed", median_ms=speed["ms"]) for u in (workloads or uuids)],
                         hardware=hw, wall_s=0.5)
    monkeypatch.setattr(runner, "run_stage", run_stage)
    cand = Candidate.model_validate(candidate_json(RMSNORM_H128))
    _, compiled = cpu_lab.compile(cand)
    pool = GpuPool(["0"], cross_process=False)
    cpu_lab.screen_workloads = 3

    first = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert calls == [None] and first.status is AttemptOutcome.OK
    assert cpu_lab.last_hardware_id == hw.hardware_id
    # the best on record, through the store's own write path
    aid = attempts.open_attempt(cpu_lab.store, rmsnorm_problem.name, cand, run_id=None, agent="offline")
    for w in first.workloads:                           # as Lab.score fills them from the roofline
        w.sol_score = 0.7
    attempts.finish(cpu_lab.store, aid, first)
    best = attempt_queries.best_times(cpu_lab.store, rmsnorm_problem.name, hw.hardware_id)
    assert best == {u: 0.01 for u in uuids}
    assert attempt_queries.best_times(cpu_lab.store, rmsnorm_problem.name, "another-gpu") == {}

    calls.clear()
    speed["ms"] = 0.02                                  # twice as slow: screened out
    slow = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert len(calls) == 1 and len(calls[0]) == 3
    assert slow.status is AttemptOutcome.SCREENED and not slow.status.failed
    assert "screened out" in slow.message and slow.sol_score is None
    assert sum(w.status == "passed" for w in slow.workloads) == 3
    assert len(slow.workloads) == len(uuids)

    calls.clear()
    speed["ms"] = 0.0101                                # within the margin: every workload
    even = evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert [len(c) for c in calls] == [3, len(uuids) - 3]
    assert even.status is AttemptOutcome.OK and len(even.workloads) == len(uuids)
    assert even.gpu_seconds == pytest.approx(1.0)       # both processes on the bill

    calls.clear()
    cpu_lab.screen_workloads = 0                        # off: one process over every workload
    evaluate_pinned(cpu_lab, rmsnorm_problem, cand, compiled, pool, timeout_s=40.0)
    assert calls == [None]
