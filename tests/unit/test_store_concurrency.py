"""Several processes writing one DuckDB file at once: every row lands, nobody errors."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest

from solforge.store import AttemptStatus, Store, StoreBusy

N_PER_PROCESS = int(os.environ.get("SOLFORGE_TEST_CONCURRENCY_N", "500"))


def _writer(db: str, tag: str, n: int, queue) -> None:
    try:
        s = Store(db)
        run = s.create_run(kind="concurrency-test", note=tag)
        seen = []
        for i in range(n):
            aid = s.create_attempt(f"problem-{i % 7}", run_id=run, agent=tag, language="cuda",
                                   params={"i": i, "writer": tag})
            if i % 4 == 0:
                s.mark_attempt(aid, AttemptStatus.COMPILED, rows={"compile_results": [
                    {"attempt_id": aid, "status": "ok", "seconds": 0.01 * i, "arch": "sm_90a"}]})
            if i % 25 == 0:  # reads in between the writes see our own rows, and others' so far
                seen.append(s.scalar("SELECT count(*) FROM attempts WHERE agent = ?", [tag]))
        s.finish_run(run)
        queue.put((tag, run, seen, None))
    except BaseException as e:  # noqa: BLE001 - report any failure to the parent
        queue.put((tag, None, None, f"{type(e).__name__}: {e}"))


def test_two_processes_write_at_once(tmp_path):
    db = str(tmp_path / "c.duckdb")
    Store(db).close()  # migrate first, so both writers race on rows, not on schema
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(db, tag, N_PER_PROCESS, q)) for tag in ("a", "b")]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    elapsed = time.monotonic() - t0
    errors = [r[3] for r in results if r[3]]
    assert not errors, errors
    s = Store(db)
    for tag, run, seen, _ in results:
        # each read saw exactly the rows this writer had committed before it
        assert seen == [i + 1 for i in range(0, N_PER_PROCESS, 25)]
        rows = s.query("SELECT status, count(*) AS n FROM attempts WHERE run_id = ? GROUP BY 1",
                       [run])
        counts = {r["status"]: r["n"] for r in rows}
        # finish_run(FINISHED) leaves statuses alone; every 4th was marked compiled
        n_compiled = len(range(0, N_PER_PROCESS, 4))
        assert counts == {"compiled": n_compiled, "queued": N_PER_PROCESS - n_compiled}
        params = s.query("SELECT params FROM attempts WHERE run_id = ?", [run])
        assert sorted(p["params"]["i"] for p in params) == list(range(N_PER_PROCESS))
        assert s.scalar("SELECT status FROM runs WHERE id = ?", [run]) == "finished"
    assert s.scalar("SELECT count(*) FROM compile_results") == 2 * len(range(0, N_PER_PROCESS, 4))
    assert s.scalar("SELECT count(DISTINCT id) FROM attempts") == 2 * N_PER_PROCESS
    print(f"2 x {N_PER_PROCESS} attempts in {elapsed:.1f} s")


_HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _hold_file(db: str, seconds: float) -> subprocess.Popen:
    """Another program (not solforge) holding the DuckDB file open, like the duckdb CLI would."""
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, db, str(seconds)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_foreign_holder_times_out_with_clear_error(tmp_path):
    db = str(tmp_path / "f.duckdb")
    Store(db).close()
    holder = _hold_file(db, 30)
    try:
        with pytest.raises(StoreBusy, match="held open by another program"):
            Store(db, lock_timeout_s=0.5).query("SELECT 1")
    finally:
        holder.kill()
        holder.wait()


def test_waits_for_foreign_holder_then_writes(tmp_path):
    db = str(tmp_path / "w.duckdb")
    Store(db).close()
    holder = _hold_file(db, 1.0)
    try:
        s = Store(db, lock_timeout_s=30)
        aid = s.create_attempt("p")  # retried with backoff until the holder lets go
        assert s.scalar("SELECT status FROM attempts WHERE id = ?", [aid]) == "queued"
    finally:
        holder.wait(timeout=30)


def _forked_write(db: str, q) -> None:
    try:
        q.put(Store(db).create_attempt("from-child"))
    except BaseException as e:  # noqa: BLE001
        q.put(f"error: {type(e).__name__}: {e}")


def test_forked_child_while_parent_holds_the_lease(tmp_path):
    """A fork (Prefect process pool, multiprocessing 'fork') while the parent's connection is open."""
    db = str(tmp_path / "fork.duckdb")
    s = Store(db)
    parent = s.create_attempt("from-parent")  # the lease is open right now
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_forked_write, args=(db, q))
    p.start()
    child = q.get(timeout=120)
    p.join(timeout=60)
    assert not str(child).startswith("error"), child
    assert p.exitcode == 0
    assert {r["id"] for r in s.query("SELECT id FROM attempts")} == {parent, child}
    s.create_attempt("after")  # the parent's lease still works
    assert s.scalar("SELECT count(*) FROM attempts") == 3


def test_fork_inside_a_transaction_is_refused_in_the_child(tmp_path):
    db = str(tmp_path / "fork2.duckdb")
    s = Store(db)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with s.transaction() as con:
        con.execute("INSERT INTO runs (id) VALUES ('r')")
        p = ctx.Process(target=_forked_write, args=(db, q))
        p.start()
    msg = q.get(timeout=120)
    p.join(timeout=60)
    assert str(msg).startswith("error: StoreBusy") and "spawn" in msg
    assert s.scalar("SELECT count(*) FROM runs") == 1 and s.scalar("SELECT count(*) FROM attempts") == 0
