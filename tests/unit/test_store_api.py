"""Store API on a real DuckDB file: rows in and out, transactions, the attempt lifecycle."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import datetime

import pytest

from solforge.candidate import Candidate
from solforge.store import (AttemptStatus, EvalStatus, InvalidTransition, RunStatus, Store,
                            StoreError)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "s.duckdb")


def test_insert_and_query_round_trip(store):
    ts = datetime(2026, 1, 2, 3, 4, 5, 678900)
    rows = [
        {"attempt_id": "a1", "workload_uuid": "w1", "status": EvalStatus.PASSED, "correct": True,
         "max_abs_err": 1.5e-3, "median_ms": 0.25, "n_reps": 50, "message": "ok 'quoted' \n☃",
         "created_at": ts},
        {"attempt_id": "a1", "workload_uuid": "w2", "status": "incorrect", "correct": False,
         "max_abs_err": math.inf, "matched_ratio": math.nan},  # non-finite: the VALUES path
    ]
    assert store.insert_rows("eval_results", rows) == 2
    got = store.query("SELECT * FROM eval_results ORDER BY workload_uuid")
    assert got[0]["status"] == "passed" and got[0]["correct"] is True
    assert got[0]["message"] == "ok 'quoted' \n☃" and got[0]["created_at"] == ts
    assert got[0]["n_reps"] == 50 and got[0]["max_abs_err"] == 1.5e-3
    assert got[1]["max_abs_err"] == math.inf and math.isnan(got[1]["matched_ratio"])
    assert got[1]["created_at"] is not None  # column default applied to the missing key


def test_json_and_list_columns(store):
    store.insert_rows("hardware", [
        {"id": "h1", "gpu_name": "H200", "clocks": {"sm_mhz": 1980, "mem": [1, 2]}, "details": None},
        {"id": "h2", "gpu_name": "H200", "clocks": '{"sm_mhz": 1755}', "details": ["x"]},
    ])
    rows = {r["id"]: r for r in store.query("SELECT * FROM hardware")}
    assert rows["h1"]["clocks"] == {"sm_mhz": 1980, "mem": [1, 2]} and rows["h1"]["details"] is None
    assert rows["h2"]["clocks"] == {"sm_mhz": 1755} and rows["h2"]["details"] == ["x"]
    assert store.scalar("SELECT clocks->>'sm_mhz' FROM hardware WHERE id = 'h1'") == "1980"
    with pytest.raises(StoreError, match="not JSON"):
        store.insert_rows("hardware", [{"id": "h3", "clocks": "fast"}])


def test_unknown_table_or_column_is_named(store):
    with pytest.raises(StoreError, match=r"'attempts' has no column\(s\) \['colour'\]"):
        store.insert_rows("attempts", [{"id": "x", "problem": "p", "colour": "red"}])
    with pytest.raises(StoreError, match="unknown table 'nope'"):
        store.insert_rows("nope", [{"a": 1}])


def test_upsert_rows_replaces_by_key(store):
    key = ("problem", "workload_uuid", "gpu_profile")
    store.upsert_rows("roofline", [{"problem": "p", "workload_uuid": "w", "gpu_profile": "h200",
                                    "t_sol_ms": 1.0, "limiter": "memory"}], key)
    store.upsert_rows("roofline", [{"problem": "p", "workload_uuid": "w", "gpu_profile": "h200",
                                    "t_sol_ms": 0.5, "limiter": "compute"},
                                   {"problem": "p", "workload_uuid": "w2", "gpu_profile": "h200",
                                    "t_sol_ms": 2.0}], key)
    rows = store.query("SELECT workload_uuid, t_sol_ms, limiter FROM roofline ORDER BY 1")
    assert rows == [{"workload_uuid": "w", "t_sol_ms": 0.5, "limiter": "compute"},
                    {"workload_uuid": "w2", "t_sol_ms": 2.0, "limiter": None}]


def test_transaction_rolls_back_everything(store):
    with pytest.raises(RuntimeError):
        with store.transaction() as con:
            con.execute("INSERT INTO runs (id) VALUES ('r1')")
            store.insert_rows("runs", [{"id": "r2"}])  # nested: joins the outer transaction
            raise RuntimeError("boom")
    assert store.scalar("SELECT count(*) FROM runs") == 0
    with store.transaction() as con:
        con.execute("INSERT INTO runs (id) VALUES ('r3')")
    assert store.scalar("SELECT count(*) FROM runs") == 1


def test_bulk_insert_larger_than_one_statement(store):
    n = 1000
    store.insert_rows("scores", [{"attempt_id": f"a{i}", "workload_uuid": "w", "speedup": i / 7}
                                 for i in range(n)])
    assert store.scalar("SELECT count(*) FROM scores") == n
    assert store.scalar("SELECT sum(speedup) FROM scores") == pytest.approx(sum(i / 7 for i in range(n)))


def _candidate() -> Candidate:
    return Candidate(problem="p", sources={"k.cu": 'extern "C" __global__ void k() {}'},
                     params={"BLOCK": 128},
                     launches=[{"kernel": "k", "grid": ["1"], "block": ["BLOCK"], "args": []}])


def test_attempt_lifecycle(store):
    run = store.create_run(kind="optimize", config={"budget": 3}, gpu_profile="h200")
    cand = _candidate()
    aid = store.create_attempt("p", run_id=run, agent="offline", candidate=cand)
    a = store.query_one("SELECT * FROM attempts WHERE id = ?", [aid])
    assert a["status"] == AttemptStatus.QUEUED and a["run_id"] == run
    assert a["source_hash"] == cand.source_hash() and a["params"] == {"BLOCK": 128}
    assert a["language"] == "cuda" and a["candidate"]["sources"] == cand.sources

    store.mark_attempt(aid, AttemptStatus.COMPILED, rows={"compile_results": [
        {"attempt_id": aid, "status": "ok", "seconds": 0.3, "arch": "sm_90a", "cache_hit": False}]})
    assert store.scalar("SELECT status FROM attempts WHERE id = ?", [aid]) == "compiled"
    assert store.scalar("SELECT count(*) FROM compile_results WHERE attempt_id = ?", [aid]) == 1
    store.mark_attempt(aid, "evaluated")
    with pytest.raises(InvalidTransition, match="evaluated -> compiled"):
        store.mark_attempt(aid, AttemptStatus.COMPILED)
    with pytest.raises(InvalidTransition, match="evaluated -> evaluated"):
        store.mark_attempt(aid, AttemptStatus.EVALUATED)
    with pytest.raises(StoreError, match="no attempt"):
        store.mark_attempt("missing", AttemptStatus.FAILED)
    with pytest.raises(ValueError):
        store.mark_attempt(aid, "done")  # not a status at all


def test_failed_rows_leave_status_unchanged(store):
    aid = store.create_attempt("p")
    with pytest.raises(StoreError):
        store.mark_attempt(aid, AttemptStatus.COMPILED,
                           rows={"compile_results": [{"attempt_id": aid, "bogus": 1}]})
    assert store.scalar("SELECT status FROM attempts WHERE id = ?", [aid]) == "queued"


def test_mark_attempt_sets_fields(store):
    aid = store.create_attempt("p")
    store.mark_attempt(aid, AttemptStatus.FAILED, error="nvrtc: bad")
    row = store.query_one("SELECT status, error, updated_at > created_at AS later FROM attempts")
    assert row == {"status": "failed", "error": "nvrtc: bad", "later": True}
    with pytest.raises(StoreError, match="not settable"):
        store.mark_attempt(aid, AttemptStatus.FAILED, id="other")


def test_mark_interrupted_only_touches_open_attempts(store):
    run = store.create_run()
    other = store.create_run()
    q = store.create_attempt("p", run_id=run)
    c = store.create_attempt("p", run_id=run)
    store.mark_attempt(c, AttemptStatus.COMPILED)
    e = store.create_attempt("p", run_id=run)
    store.mark_attempt(e, AttemptStatus.EVALUATED)
    o = store.create_attempt("p", run_id=other)
    assert store.mark_interrupted(run) == 2
    st = {r["id"]: r["status"] for r in store.query("SELECT id, status FROM attempts")}
    assert st == {q: "interrupted", c: "interrupted", e: "evaluated", o: "queued"}
    assert store.scalar("SELECT status FROM runs WHERE id = ?", [run]) == RunStatus.INTERRUPTED
    assert store.scalar("SELECT status FROM runs WHERE id = ?", [other]) == RunStatus.RUNNING



def test_histories_mark_interrupted_attempts(store):
    """The planner's history says which attempts ended without a verdict (their run died)."""
    from solforge.agents.history import histories

    run = store.create_run()
    c = store.create_attempt("p", run_id=run)
    store.mark_attempt(c, AttemptStatus.COMPILED)
    store.mark_interrupted(run)
    run2 = store.create_run()
    e = store.create_attempt("p", run_id=run2)
    store.mark_attempt(e, AttemptStatus.COMPILED)
    store.mark_attempt(e, AttemptStatus.EVALUATED)
    got = histories(store, ["p"])["p"]
    assert [a.interrupted for a in got] == [True, False]

_CRASH = """
import os, sys
from solforge.store import Store, AttemptStatus
s = Store(sys.argv[1])
run = s.create_run(kind="crash-test")
a = s.create_attempt("p", run_id=run)
b = s.create_attempt("p", run_id=run)
s.mark_attempt(b, AttemptStatus.COMPILED)
print(run, a, b, flush=True)
os._exit(1)  # die holding the connection and the lock, with no cleanup at all
"""


def test_crash_leaves_attempts_visible_and_reapable(tmp_path):
    db = tmp_path / "crash.duckdb"
    out = subprocess.run([sys.executable, "-c", _CRASH, str(db)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stderr
    run, a, b = out.stdout.split()
    s = Store(db, lock_timeout_s=10)  # the dead process's lock went with it
    st = {r["id"]: r["status"] for r in s.query("SELECT id, status FROM attempts")}
    assert st == {a: "queued", b: "compiled"}
    assert s.reap_dead_runs() == [run]
    assert {r["status"] for r in s.query("SELECT status FROM attempts")} == {"interrupted"}
    assert s.reap_dead_runs() == []


def test_finish_run_failed_interrupts_open_attempts(store):
    run = store.create_run()
    a = store.create_attempt("p", run_id=run)
    store.finish_run(run, RunStatus.FAILED, error="planner crashed")
    r = store.query_one("SELECT status, error, finished_at FROM runs")
    assert r["status"] == "failed" and r["error"] == "planner crashed" and r["finished_at"]
    assert store.scalar("SELECT status FROM attempts WHERE id = ?", [a]) == "interrupted"


def test_threads_share_one_store(tmp_path):
    """Threads in one process (a Prefect thread runner) share the lease; no row is lost."""
    import threading

    s = Store(tmp_path / "t.duckdb")
    errors = []

    def work(tag):
        try:
            other = Store(tmp_path / "t.duckdb")  # a second Store object on the same file
            for i in range(20):
                aid = other.create_attempt("p", agent=tag)
                if i % 2:
                    other.mark_attempt(aid, AttemptStatus.FAILED, error=tag)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = s.query("SELECT agent, status, count(*) AS n FROM attempts GROUP BY ALL ORDER BY ALL")
    assert rows == [{"agent": f"t{i}", "status": st, "n": 10} for i in range(4)
                    for st in ("failed", "queued")]


def test_a_session_cut_off_by_its_runs_death_is_owed_on_resume(store):
    """A 'run' decision whose session never returned (ended_at NULL) in a run that died leaves its
    problem the attempts it did not make; a session that returned, or a run still going, owes none."""
    import time

    from solforge.orchestrate import resume

    def decide(run, problem, n):
        store.insert_rows("planner_decisions", [{
            "id": f"{run}-{problem}-{time.monotonic_ns()}", "run_id": run, "problem": problem,
            "worker": "offline", "language": "cuda", "reason": "t", "action": "run", "attempts": n}])

    cfg = {"resume_key": "job"}
    run1 = store.create_run(kind="optimize", config=cfg)
    decide(run1, "cut", 4)
    store.mark_attempt(store.create_attempt("cut", run_id=run1), AttemptStatus.COMPILED)
    decide(run1, "ended", 4)
    store.create_attempt("ended", run_id=run1)
    resume.session_ended(store, run1, "ended")     # returned after one attempt: owes nothing
    store.mark_interrupted(run1)
    # a later session of a problem supersedes the earlier one in the same job
    run0 = store.create_run(kind="optimize", config=cfg)
    decide(run0, "again", 4)
    store.finish_run(run0)
    st = resume.prepare(store, "job", has_gpu=False)
    assert {k: (v.worker, v.attempts) for k, v in st.owed.items()} == {"cut": ("offline", 3)}
    # a resumed run that starts the owed session and is killed again after 2 more: 1 owed
    run2 = store.create_run(kind="optimize", config=cfg)
    decide(run2, "cut", 3)
    for _ in range(2):
        store.create_attempt("cut", run_id=run2)
    store.mark_interrupted(run2)
    assert {k: v.attempts for k, v in resume.prepare(store, "job", has_gpu=False).owed.items()} == {"cut": 1}
