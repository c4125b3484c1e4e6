"""benchmarks/eval_throughput.py without a GPU: per-configuration settings and the summary it
reports (evaluations per GPU-minute, phases per evaluation, timing ratio against the old path)."""

from __future__ import annotations

import json

import pytest

from tests.unit import bench_module


@pytest.fixture(scope="module")
def bench():
    return bench_module.load("eval_throughput")


def test_configs_change_only_the_measurement_settings(bench, tmp_path):
    from solforge.evaluate.evaluator import EvalConfig

    (tmp_path / "job.json").write_text(json.dumps({"settings": {"rep_count": 20, "warmup_ms": 25}}))
    bench._set_config(tmp_path, "before")
    bench._set_config(tmp_path, "after")        # twice: the base settings stay the optimize flow's
    job = json.loads((tmp_path / "job.json").read_text())
    cfg = EvalConfig.from_dict(job["settings"])
    assert (cfg.rep_count, cfg.warmup_ms, cfg.warmup_calls, cfg.timing_queued) == (20, 25, 10, True)
    bench._set_config(tmp_path, "before")
    cfg = EvalConfig.from_dict(json.loads((tmp_path / "job.json").read_text())["settings"])
    assert (cfg.warmup_calls, cfg.timing_queued, cfg.timing_backend) == (0, False, "kineto")


def _rec(cfg, wall, ms, phases):
    return {"config": cfg, "stage": "00_x", "problem": "x", "workloads": 2, "wall_s": wall,
            "phases": phases, "statuses": ["passed", "passed"], "backends": ["kineto"],
            "sessions": ["one per workload" if cfg.endswith("one_session") else "one per measurement"],
            "median_ms": {"a": ms, "b": 2 * ms}}


def test_summary_counts_evaluations_per_gpu_minute(bench):
    recs = [_rec("before", 3.0, 0.010, {"timing_profile": 1.5, "total": 3.0}),
            _rec("before", 3.0, 0.010, {"timing_profile": 1.5, "total": 3.0}),
            _rec("after", 1.0, 0.0099, {"timing_profile": 0.25, "total": 1.0}),
            _rec("after", 0.5, 0.0101, {"timing_profile": 0.25, "inputs": 0.1, "total": 0.5})]
    s = bench.summarize(recs)
    assert s["before"]["evals_per_gpu_minute"] == pytest.approx(20.0)
    assert s["after"]["evals_per_gpu_minute"] == pytest.approx(80.0)
    assert s["after"]["phase_s_per_eval"] == {"inputs": 0.05, "timing_profile": 0.25,
                                              "total": 0.75}
    assert s["after"]["median_time_ratio_vs_before"] == pytest.approx(1.0, abs=0.011)
    md = bench.render({"summary": s, "candidates": [{"problem": "x"}]})
    assert "| after | 2 | 2 | 1.5 | **80.0** |" in md and "timing_profile" in md


def test_lanes_count_the_batch_wall_time_as_gpu_seconds(bench):
    # four evaluations of 2 s each, run two at a time: the GPU was held 4 s, not 8
    recs = [_rec("lanes2", 2.0, 0.010, {"gpu_wait": 0.5, "total": 2.0}) for _ in range(4)]
    s = bench.summarize(recs, {"lanes2": 4.0})
    assert s["lanes2"]["gpu_seconds"] == pytest.approx(4.0)
    assert s["lanes2"]["evals_per_gpu_minute"] == pytest.approx(60.0)
    assert bench.summarize(recs)["lanes2"]["evals_per_gpu_minute"] == pytest.approx(30.0)


def test_one_session_config_and_its_column(bench, tmp_path):
    """after_one_session sets EvalConfig.one_session; the summary says which sessions each ran."""
    import json

    from solforge.evaluate.evaluator import EvalConfig

    (tmp_path / "job.json").write_text(json.dumps({"settings": {"rep_count": 20}}))
    bench._set_config(tmp_path, "after_one_session")
    cfg = EvalConfig.from_dict(json.loads((tmp_path / "job.json").read_text())["settings"])
    assert cfg.one_session and cfg.timing_backend == "kineto" and cfg.warmup_calls == 10
    bench._set_config(tmp_path, "after_kineto")
    assert not EvalConfig.from_dict(json.loads((tmp_path / "job.json").read_text())["settings"]).one_session
    s = bench.summarize([_rec("after_one_session", 1.0, 0.01, {"total": 1.0}),
                         _rec("after_kineto", 1.0, 0.01, {"total": 1.0})])
    assert s["after_one_session"]["sessions"] == ["one per workload"]
    md = bench.render({"summary": s, "candidates": [{"problem": "x"}]})
    assert "| one per workload |" in md and "| one per measurement |" in md


def test_profile_rows_are_summed_per_function_per_evaluation(bench, tmp_path):
    """The profile configuration turns the driver's cProfile on; its rows are averaged over the
    evaluations that carry them and listed most own time first."""
    from solforge.evaluate.evaluator import EvalConfig

    (tmp_path / "job.json").write_text(json.dumps({"settings": {"rep_count": 20}}))
    bench._set_config(tmp_path, "profile")
    settings = json.loads((tmp_path / "job.json").read_text())["settings"]
    assert settings["cprofile"] > 0 and EvalConfig.from_dict(settings).warmup_calls == 10
    a, b = _rec("profile", 1.0, 0.01, {"total": 1.0}), _rec("profile", 1.0, 0.01, {"total": 1.0})
    a["profile"] = [{"func": "x.py:1:f", "calls": 4, "own_s": 0.3, "cum_s": 0.5},
                    {"func": "y.py:2:g", "calls": 1, "own_s": 0.1, "cum_s": 0.1}]
    b["profile"] = [{"func": "x.py:1:f", "calls": 2, "own_s": 0.1, "cum_s": 0.3}]
    rows = bench.profile_table([a, b, _rec("after_spare", 1.0, 0.01, {"total": 1.0})])
    assert [r["func"] for r in rows] == ["x.py:1:f", "y.py:2:g"]
    assert rows[0]["own_s"] == pytest.approx(0.2) and rows[0]["calls"] == pytest.approx(3)
    md = bench.render({"summary": bench.summarize([a, b]), "candidates": [{"problem": "x"}],
                       "records": [a, b]})
    assert "| `x.py:1:f` | 0.2000 | 0.4000 | 3 |" in md


def test_a_driver_that_cannot_start_stops_the_benchmark_with_its_reason(bench):
    """A box without the wheels: the driver exits before any workload, every result is 'not
    evaluated'; the benchmark says why once instead of timing those failures as evaluations."""
    from solforge.evaluate.results import EvalResult, EvalStatus, RunReport

    dead = RunReport(problem="x", exit_code=1, stderr_tail="Traceback...\nModuleNotFoundError: No module named 'pydantic'\n",
                     results=[EvalResult("a", EvalStatus.SKIPPED, message="not evaluated: the process ended (exit code 1)")])
    assert bench.driver_broken(dead) == "exit code 1: ModuleNotFoundError: No module named 'pydantic'"
    ran = RunReport(problem="x", exit_code=0,
                    results=[EvalResult("a", EvalStatus.SKIPPED, message="not evaluated: the reference failed")])
    assert bench.driver_broken(ran) == ""
    crashed_later = RunReport(problem="x", exit_code=3, results=[
        EvalResult("a", EvalStatus.PASSED), EvalResult("b", EvalStatus.SKIPPED, message="not evaluated: the process ended (exit code 3)")])
    assert bench.driver_broken(crashed_later) == ""
