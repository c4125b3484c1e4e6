"""`solforge optimize` stopped by SIGTERM (`timeout`, a scheduler, a machine going away): the run and
its unfinished attempts are marked interrupted in the database before the process exits (143), so
nothing stays 'running' or 'compiled' and `--resume` finishes them. A real signal to a real process
holding a real DuckDB file."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import duckdb


def test_sigterm_marks_the_run_and_its_attempts_interrupted(tmp_path):
    db = tmp_path / "run.duckdb"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from solforge.cli.optimize import stop_on_sigterm
        from solforge.store import Store

        store = Store({str(db)!r})
        rid = store.create_run(kind="optimize")
        done = store.create_attempt("p", run_id=rid, agent="offline")
        store.mark_attempt(done, "evaluated")
        open_ = store.create_attempt("p", run_id=rid, agent="offline")
        store.mark_attempt(open_, "compiled")
        with stop_on_sigterm(store, lambda: rid):
            print("ready", flush=True)
            time.sleep(60)                       # the loop, busy
        sys.exit(0)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.terminate()
    assert proc.wait(30) == 143
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    assert sorted(r[0] for r in con.execute("SELECT status FROM attempts").fetchall()) == \
        ["evaluated", "interrupted"]
