"""The optimize loop with the offline worker on real problems: real kernel families, real NVRTC
compiles, a real DuckDB store. Without a GPU it plans, checks and compiles, and says timing needs one."""

from __future__ import annotations

import json

import pytest

from solforge.agents.lab import NO_GPU
from solforge.agents.offline import OfflineWorker
from solforge.agents.planner import Budget, PlannerConfig
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop


@pytest.fixture(scope="module")
def problems(sol_execbench_dir, tmp_path_factory):
    from solforge.problem import load_problem_dir

    from .conftest import write_unservable_problem

    names = [("L1", "069_rms_norm"), ("FlashInfer-Bench", "004_gemm_n128_k2048")]
    # and a problem nothing serves (an eigensolver)
    unserved = write_unservable_problem(tmp_path_factory.mktemp("written") / "row_eigenvalues")
    return [load_problem_dir(sol_execbench_dir / s / n, subset=s) for s, n in names] + \
        [load_problem_dir(unserved, subset="written")]


def test_offline_loop_without_gpu(store, cpu_lab, problems):
    loop = OptimizeLoop(store, problems, cpu_lab, {"offline": OfflineWorker(cpu_lab)},
                        LoopConfig(budget=Budget(attempts=10), planner=PlannerConfig()))
    report = loop.run()
    assert report.gpu is False and any(NO_GPU in n for n in report.notes)
    rows = store.query("SELECT * FROM attempts WHERE run_id = ? ORDER BY created_at", [report.run_id])
    by = {}
    for r in rows:
        by.setdefault(r["problem"], []).append(r)
    assert set(by) == {"069_rms_norm", "004_gemm_n128_k2048"}  # the written one has no family
    for name, rs in by.items():
        assert rs[0]["outcome"] == "compiled" and rs[0]["status"] == "compiled", rs[0]["error"]
        assert rs[0]["agent"] == "offline" and rs[0]["candidate"]["notes"].startswith("family=")
        comp = store.query("SELECT status, cubin_hash FROM compile_results WHERE attempt_id = ?",
                           [rs[0]["id"]])
        assert comp[0]["status"] == "ok" and comp[0]["cubin_hash"]
    dec = store.query("SELECT problem, action, worker, reason FROM planner_decisions WHERE run_id = ? "
                      "ORDER BY created_at", [report.run_id])
    att = [d for d in dec if d["problem"] == "row_eigenvalues"]
    assert att and all(d["action"] == "skip" and "no kernel family" in d["reason"] for d in att)
    assert any(d["action"] == "run" and d["worker"] == "offline" for d in dec)
    assert dec[-1]["action"] == "stop"
    run = store.query("SELECT status, config, git_commit, torch_version FROM runs WHERE id = ?",
                      [report.run_id])[0]
    assert run["status"] == "finished" and run["config"]["gpu"] is False
    # provenance (issue #6, migration 080): the commit and torch version of what ran
    pv = run["config"]["provenance"]
    assert run["git_commit"] == pv["commit"] and run["torch_version"] == pv["torch"]
    assert set(pv) >= {"commit", "commit_source", "torch", "cuda"}
    assert report.problems["069_rms_norm"].compiled >= 1


def test_second_run_builds_on_the_first(store, cpu_lab, problems):
    """Lineage across runs: a new attempt's parent is the best earlier one; without a GPU the
    planner does not spend again on a problem that already has a compiled candidate."""
    cfg = LoopConfig(budget=Budget(attempts=3), planner=PlannerConfig())
    first = OptimizeLoop(store, problems[:1], cpu_lab, {"offline": OfflineWorker(cpu_lab)}, cfg).run()
    second = OptimizeLoop(store, problems[:1], cpu_lab, {"offline": OfflineWorker(cpu_lab)},
                          LoopConfig(budget=Budget(attempts=3))).run()
    assert first.spent.attempts >= 1 and second.spent.attempts == 0
    reasons = [r["reason"] for r in store.query(
        "SELECT reason FROM planner_decisions WHERE run_id = ?", [second.run_id])]
    assert any("need a GPU" in r for r in reasons)


def test_optimize_cli_json(tmp_path, sol_execbench_dir, capsys, monkeypatch):
    from solforge.cli import main

    monkeypatch.setenv("SOLFORGE_SHARED_DIR", str(sol_execbench_dir.parent))
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("solforge.agents.lab.gpu_available", lambda: False)
    rc = main(["--json", "optimize", "--problems", "L1/069_rms*", "--budget-attempts", "2",
               "--db", str(tmp_path / "cli.duckdb")])
    assert rc == 0
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    # without a GPU the offline worker compiles each serving family's first guess: the rmsnorm
    # family's and the compiler's plan
    assert rep["gpu"] is False and rep["spent"]["attempts"] == 2
    assert rep["problems"][0]["problem"] == "069_rms_norm"
    assert "need a GPU" in cap.err


def test_optimize_cli_dry_run_and_bad_selection(tmp_path, sol_execbench_dir, capsys, monkeypatch):
    from solforge.cli import main

    monkeypatch.setenv("SOLFORGE_SHARED_DIR", str(sol_execbench_dir.parent))
    monkeypatch.setenv("SOLFORGE_DB_PATH", str(tmp_path / "dry.duckdb"))  # not the checkout's default
    assert main(["--json", "optimize", "--problems", "L1/0[67]*", "--with-family", "--dry-run"]) == 0
    listed = json.loads(capsys.readouterr().out)
    row = next(r for r in listed if r["problem"] == "069_rms_norm")
    assert row["subset"] == "L1" and "rmsnorm" in row["families"]
    assert listed and all(r["families"] for r in listed)
    assert main(["optimize", "--problems", "nope*", "--db", str(tmp_path / "x.duckdb")]) == 2
    assert "no problem matches" in capsys.readouterr().err
