"""The evaluator's fork server starts when the run is assembled (setup.build) and is waited for before
the run's clock starts (loop._prestart), so its imports overlap problem selection and neither the wall
budget nor the first evaluation on each GPU pays for them. Real zygote process, CPU only."""

from __future__ import annotations

import time

import pytest

from solforge.evaluate import runner
from solforge.evaluate.phase_totals import flat_seconds


@pytest.fixture
def fresh_zygotes():
    runner.shutdown_zygotes()
    yield
    runner.shutdown_zygotes()


def _params(tmp_path, gpus):
    from solforge.orchestrate.setup import OptimizeParams

    return OptimizeParams(problems="L1/069_rms_norm", gpus=gpus, db=str(tmp_path / "o.duckdb"),
                          budget_attempts=2)


def test_build_starts_the_fork_server_and_the_run_waits_for_it(tmp_path, monkeypatch, fresh_zygotes,
        sol_execbench_dir):  # the run reads L1/069 from the shared tree
    from solforge.orchestrate.loop import _prestart
    from solforge.orchestrate.setup import build

    monkeypatch.setenv("SOLFORGE_EVAL_LAUNCH", "zygote")
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path / "locks"))
    t0 = time.monotonic()
    loop = build(_params(tmp_path, "0"))
    t_built = time.monotonic()
    assert len(runner._ZYGOTES) == 1  # started by build, before any evaluation asked for it
    (z,) = runner._ZYGOTES.values()
    assert t0 <= z.t_start <= t_built
    ev = _prestart(loop)
    assert ev["ready"] is True and ev["cuda"] == "uninitialized", ev
    # the wait is what was left of the start-up when the run began, never more than all of it
    assert 0 <= ev["waited_s"] <= ev["startup_s"] + 0.05, ev
    assert list(runner._ZYGOTES.values()) == [z]  # the same server, not a second one


def test_no_fork_server_without_a_gpu_or_when_spawning(tmp_path, monkeypatch, fresh_zygotes,
        sol_execbench_dir):  # the run reads L1/069 from the shared tree
    from solforge.orchestrate.loop import _prestart
    from solforge.orchestrate.setup import build

    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path / "locks"))
    build(_params(tmp_path, ""))
    assert not runner._ZYGOTES
    monkeypatch.setenv("SOLFORGE_EVAL_LAUNCH", "spawn")
    loop = build(_params(tmp_path, "0"))
    assert not runner._ZYGOTES
    assert _prestart(loop) == {}
    assert not runner._ZYGOTES


def test_cpu_usage_is_summed_over_processes_apart_from_the_phases():
    one = {"seconds": {"cuda_init": 0.25}, "driver_s": 1.0, "total_s": 2.0,
           "cpu": {"user_s": 0.5, "sys_s": 0.25, "nivcsw": 7, "host_busy_cpu_s": 3.0,
                   "host_steal_s": 0.0}}
    two = {"seconds": {"cuda_init": 0.5}, "driver_s": 1.0, "total_s": 1.0,
           "cpu": {"user_s": 1.0, "sys_s": 0.5, "host_busy_cpu_s": 1.0, "host_steal_s": 0.125}}
    flat = flat_seconds({"screen": one, "rest": two, "total_s": 3.5})
    assert flat == {"cuda_init": 0.75, "driver": 2.0, "cpu_user": 1.5, "cpu_sys": 0.75, "n_preempted": 7,
                    "host_busy_cpu": 4.0, "host_steal": 0.125, "total": 3.5}
    assert flat_seconds(flat) == flat  # already flat: kept as it is
    assert "cpu_user" not in flat_seconds({"seconds": {"load": 0.5}, "total_s": 1.0})
