"""solforge.orchestrate without Prefect: GPU slots with real spawned processes, transient-error
classification, the content cache and resume on a real DuckDB with real NVRTC compiles, the
leaderboard SQL."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import pytest

from solforge.evaluate.results import HardwareInfo, RunReport
from solforge.orchestrate.errors import GpuLost, gpu_lost, is_transient
from solforge.orchestrate.gpus import GpuPool
from solforge.orchestrate.leaderboard import leaderboard, markdown
from solforge.store import Store


def test_slots_pin_each_spawned_process_to_its_own_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path))
    pool = GpuPool(["0", "1"])
    seen: list[tuple[str, str, float, float]] = []

    def job():
        with pool.slot() as s:
            t0 = time.monotonic()
            out = subprocess.run([sys.executable, "-c", "import os,time; time.sleep(0.3); "
                                  "print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                                 env={"PATH": "/usr/bin:/bin", **s.env}, capture_output=True, text=True)
            seen.append((s.gpu, out.stdout.strip(), t0, time.monotonic()))

    threads = [threading.Thread(target=job) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(gpu == saw for gpu, saw, _, _ in seen)          # the child saw only its slot's GPU
    assert {g for g, *_ in seen} == {"0", "1"}
    for g in ("0", "1"):                                         # never two at once on one GPU
        iv = sorted((a, b) for gg, _, a, b in seen if gg == g)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(iv, iv[1:]))
    # the two GPUs did work at the same time
    a = [(s, e) for g, _, s, e in seen if g == "0"]
    b = [(s, e) for g, _, s, e in seen if g == "1"]
    assert any(min(e1, e2) > max(s1, s2) for s1, e1 in a for s2, e2 in b)
    busy = pool.busy_fractions(min(x[2] for x in seen), max(x[3] for x in seen))
    assert all(0 < v <= 1 for v in busy.values())


def test_a_gpu_held_by_another_process_is_not_handed_out(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys; from solforge.orchestrate.gpus import GpuPool; "
                               "p = GpuPool(['0']); s = p.acquire(); print('held', flush=True); "
                               "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        pool = GpuPool(["0", "1"])
        with pytest.raises(TimeoutError):
            pool.acquire(prefer="0", timeout_s=0.3)
        s = pool.acquire(timeout_s=5)
        assert s.gpu == "1"
        pool.release(s)
    finally:
        holder.stdin.close()
        holder.wait(10)
    s = GpuPool(["0"]).acquire(timeout_s=5)  # the holder exited: its lock went with it
    assert s.gpu == "0"


def test_lanes_hand_out_several_slots_of_one_gpu_each_with_its_share_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path))
    pool = GpuPool(["0", "1"], lanes=2)
    assert len(pool) == 4
    slots = [pool.acquire(timeout_s=2) for _ in range(4)]
    # lane-major: every GPU gets a first lane before any gets a second
    assert [(s.gpu, s.lane) for s in slots[:2]] == [("0", 0), ("1", 0)]
    assert sorted((s.gpu, s.lane) for s in slots) == [("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    assert {s.env["SOLFORGE_GPU_SHARE"] for s in slots if s.gpu == "0"} == {str(tmp_path / "0.share")}
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == s.gpu for s in slots)
    with pytest.raises(TimeoutError):
        pool.acquire(timeout_s=0.2)
    # another process's one-lane pool finds GPU 0's lane 0 taken (the same lock file as before lanes)
    probe = subprocess.run([sys.executable, "-c",
                            "from solforge.orchestrate.gpus import GpuPool\n"
                            "try:\n    GpuPool(['0']).acquire(timeout_s=0.3); print('got')\n"
                            "except TimeoutError:\n    print('busy')"],
                           capture_output=True, text=True, env={**__import__('os').environ})
    assert probe.stdout.strip() == "busy", probe.stderr
    t0 = min(s.acquired_at for s in slots)
    for s in slots:
        pool.release(s)
    busy = pool.busy_fractions(t0, time.monotonic())
    assert all(0.9 < v <= 1.0 for v in busy.values()), busy   # two lanes held at once count once


def test_a_caller_waiting_past_the_pools_deadline_gets_slot_deadline_not_a_slot():
    from solforge.orchestrate.gpus import SlotDeadline

    pool = GpuPool(["0"], cross_process=False)
    held = pool.acquire()
    pool.deadline = time.monotonic() + 0.3
    t0 = time.monotonic()
    with pytest.raises(SlotDeadline):
        pool.acquire()
    assert 0.25 < time.monotonic() - t0 < 5
    assert not is_transient(SlotDeadline("x"))  # a spent budget is never retried
    pool.release(held)
    with pytest.raises(SlotDeadline):  # past the deadline even a free slot is refused
        pool.acquire()


def test_a_pool_without_cross_process_locks_sets_no_share_lock():
    s = GpuPool(["0"], cross_process=False, lanes=3).acquire(timeout_s=1)
    assert "SOLFORGE_GPU_SHARE" not in s.env


def test_only_transient_failures_are_retried():
    class RateLimitError(Exception):  # LiteLLM's name; matched by class name, litellm not imported
        pass

    assert is_transient(ConnectionError("reset")) and is_transient(TimeoutError())
    assert is_transient(RateLimitError("429")) and is_transient(GpuLost("gone"))
    assert not is_transient(ValueError("bad launch expression"))
    assert not is_transient(RuntimeError("nvrtc: error: identifier undefined"))


def test_gpu_lost_is_told_apart_from_a_faulty_kernel():
    hw = HardwareInfo(gpu_name="H200")
    # killed from outside before CUDA came up: the worker, not the candidate
    assert gpu_lost(RunReport(problem="p", results=[], hardware=None, exit_code=-9, killed=False))
    assert gpu_lost(RunReport(problem="p", results=[], hardware=None, exit_code=1,
                              stderr_tail="RuntimeError: No CUDA-capable device is detected"))
    # the candidate faulted after the GPU was up, or we killed it for a timeout: its own failure
    assert not gpu_lost(RunReport(problem="p", results=[], hardware=hw, exit_code=-11))
    assert not gpu_lost(RunReport(problem="p", results=[], hardware=None, exit_code=-9, killed=True))


def _params(db, **kw):
    from solforge.orchestrate.setup import OptimizeParams

    return OptimizeParams(**{"problems": "L1/069_rms_norm", "budget_attempts": 10, "gpus": "",
                             "db": str(db), **kw})


def test_identical_candidate_is_answered_by_the_store_and_a_rerun_resumes(tmp_path, monkeypatch,
                                                                          sol_execbench_dir):
    from solforge.orchestrate.setup import build

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cc"))
    db = tmp_path / "o.duckdb"
    loop = build(_params(db))
    rep = loop.run()
    store = loop.store
    rows = store.query("SELECT id, candidate, source_hash, outcome FROM attempts")
    assert rows and all(r["outcome"] == "compiled" for r in rows)
    assert rep.gpu is False and "timing need a GPU" in rep.notes[0].replace("timing needs", "timing need")
    # the same candidate again, in the same run: no new attempt, the stored one answers
    from solforge.candidate import Candidate

    cand = Candidate.model_validate(rows[0]["candidate"])
    aid, out = loop.try_candidate(loop.problems["069_rms_norm"], "offline", cand, None)
    assert aid == rows[0]["id"] and out.status.value == "compiled" and loop.cache_hits == 1
    assert store.scalar("SELECT count(*) FROM attempts") == len(rows)
    # a second run with the same parameters is the same job: it finds nothing left to do
    loop2 = build(_params(db))
    loop2.run()
    st = loop2.resume_state
    assert st.prior_runs == [rep.run_id] and st.spent_attempts == len(rows)
    assert store.scalar("SELECT count(*) FROM attempts") == len(rows)
    # other parameters: another job (its own budget and key); the store still knows the candidates
    loop3 = build(_params(db, budget_attempts=11))
    loop3.run()
    assert loop3.key != loop.key and loop3.resume_state.prior_runs == []
    assert store.scalar("SELECT count(*) FROM attempts") == len(rows)
    # answers made by another evaluator (changed input generator, launcher, checks) do not count
    from solforge.orchestrate import cache

    problem = loop.problems["069_rms_norm"]
    kw = dict(gpu_identity=loop.gpu_identity, arch=loop.lab.arch, has_gpu=False)
    assert cache.lookup(store, problem, cand.source_hash(), evaluator=cache.evaluator_version(), **kw)
    assert cache.lookup(store, problem, cand.source_hash(), evaluator="0" * 16, **kw) is None


def test_leaderboard_picks_each_problems_best_attempt(tmp_path):
    s = Store(tmp_path / "l.duckdb")
    run = s.create_run(kind="optimize")
    ids = {}
    for name, prob, score, speedups in (("a1", "p", 0.5, [2.0, 8.0]), ("a2", "p", 0.7, [1.0, 4.0]),
                                        ("b1", "q", None, [])):
        aid = s.create_attempt(prob, run_id=run, agent="offline", language="cuda", source_hash=name)
        ids[name] = aid
        s.mark_attempt(aid, "evaluated", outcome="ok" if score else "incorrect", sol_score=score)
        s.insert_rows("scores", [{"attempt_id": aid, "workload_uuid": f"w{i}", "speedup": x}
                                 for i, x in enumerate(speedups)])
    rows = {r["problem"]: r for r in leaderboard(s, run)}
    assert rows["p"]["best_attempt"] == ids["a2"] and rows["p"]["sol_score"] == 0.7
    assert math.isclose(rows["p"]["speedup"], 2.0)  # geometric mean of 1 and 4
    assert rows["p"]["attempts"] == 2 and rows["p"]["correct"] == 2
    assert rows["q"]["best_attempt"] is None and rows["q"]["attempts"] == 1
    md = markdown(list(rows.values()), "t")
    assert "| p | 0.700 | 2.00x |" in md and "| q | - | -x |" in md
    assert leaderboard(s, "another-run") == []


def test_gpu_use_counts_evaluations_not_baselines_and_busy_share():
    from types import SimpleNamespace

    from solforge.orchestrate.loop import OptimizeLoop

    pool = GpuPool(["0", "1"], cross_process=False)
    pool.use["0"].intervals += [(0.0, 10.0, "p:aaaa"), (10.0, 20.0, "p:bbbb")]
    pool.use["1"].intervals += [(0.0, 5.0, "baseline:p"), (5.0, 15.0, "q:cccc")]
    u = OptimizeLoop.gpu_use(SimpleNamespace(pool=pool))
    assert u["evaluations"] == 3 and u["baselines"] == 1
    assert u["span_s"] == 20.0 and abs(u["evaluations_per_minute"] - 9.0) < 1e-9
    assert u["busy_while_work"] == {"0": 1.0, "1": 0.75}


def test_the_optimize_flow_takes_every_optimize_parameter():
    """flows/optimize.py's signature (and so its deployment parameters and its command line, which is
    built from OptimizeParams) names every OptimizeParams field: a field added to the loop and not to
    the flow broke the kill-and-resume test ("unexpected keyword argument 'eval_timeout_for'")."""
    import ast
    from dataclasses import fields
    from pathlib import Path

    from solforge.orchestrate.setup import OptimizeParams

    src = Path(__file__).resolve().parents[2] / "flows" / "optimize.py"
    (fn,) = [n for n in ast.parse(src.read_text()).body
             if isinstance(n, ast.FunctionDef) and n.name == "optimize"]
    flow_params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    missing = {f.name for f in fields(OptimizeParams)} - flow_params
    assert not missing, f"flows/optimize.py:optimize lacks {sorted(missing)}"
