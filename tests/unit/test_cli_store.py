"""`solforge attempts` and `solforge sql` on a temp DuckDB file."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from solforge.store import AttemptStatus, Store

from solforge.cli import main


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "a.duckdb"
    s = Store(path)
    run1, run2 = s.create_run(kind="optimize"), s.create_run(kind="optimize")
    ids = {}
    for i in range(6):
        aid = s.create_attempt("p_gemm" if i % 2 else "p_norm", run_id=run1 if i < 4 else run2,
                               agent="offline", language="cuda")
        if i % 3 == 1:
            s.mark_attempt(aid, AttemptStatus.COMPILED)
        if i == 5:
            s.mark_attempt(aid, AttemptStatus.FAILED, error="nvrtc: [error] bad\nline 2")
        ids[i] = aid
    s.close()
    return path, run1, run2, ids


def _json(db_path, *args):
    rc, out, err = run_cli("--db", db_path, "--json", *args)
    assert rc == 0, err
    return json.loads(out)


def test_attempts_filters(db):
    path, run1, run2, ids = db
    assert {r["id"] for r in _json(path, "attempts")} == set(ids.values())
    assert {r["id"] for r in _json(path, "attempts", "--run", run2)} == {ids[4], ids[5]}
    assert {r["id"] for r in _json(path, "attempts", "--problem", "p_gemm")} == {ids[1], ids[3], ids[5]}
    assert {r["id"] for r in _json(path, "attempts", "--problem", "p_%")} == set(ids.values())
    assert {r["id"] for r in _json(path, "attempts", "--status", "compiled")} == {ids[1], ids[4]}
    failed = _json(path, "attempts", "--status", "FAILED")
    assert [r["id"] for r in failed] == [ids[5]] and failed[0]["error"].startswith("nvrtc")
    assert len(_json(path, "attempts", "--limit", "2")) == 2


def test_attempts_human_output_and_bad_status(db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich's width when not on a terminal
    path, *_ = db
    rc, out, err = run_cli("--db", path, "attempts", "--status", "failed")
    assert rc == 0 and out == "" and "[error] bad" in err  # brackets survive (no rich markup)
    rc, _, err = run_cli("--db", path, "attempts", "--status", "done")
    assert rc == 2 and "unknown status 'done'" in err


def test_interrupt_run(db):
    path, run1, run2, ids = db
    rc, _, err = run_cli("--db", path, "attempts", "--interrupt-run", run1, "--run", run1)
    assert rc == 0 and "4 attempts marked interrupted" in err
    st = {r["id"]: r["status"] for r in _json(path, "attempts")}
    assert [st[ids[i]] for i in range(6)] == ["interrupted"] * 4 + ["compiled", "failed"]


def test_sql(db):
    path, run1, *_ = db
    rows = _json(path, "sql", "SELECT run_id, count(*) AS n FROM attempts GROUP BY 1 ORDER BY n DESC")
    assert rows[0] == {"run_id": run1, "n": 4} and rows[1]["n"] == 2
    rc, out, err = run_cli("--db", path, "sql", "SELECT 1 AS x WHERE false")
    assert rc == 0 and "(no rows)" in err
    rc, _, err = run_cli("--db", path, "sql", "SELECT * FROM no_such_table")
    assert rc == 2 and "SQL failed" in err and "no_such_table" in err


def test_real_command_line_with_env_db(db, tmp_path):
    """The installed entry point, with the database named by SOLFORGE_DB_PATH."""
    path, *_ = db
    env = {**os.environ, "SOLFORGE_DB_PATH": str(path)}
    out = subprocess.run([sys.executable, "-m", "solforge.cli", "sql", "--json",
                          "SELECT count(*) AS n FROM attempts"], capture_output=True, text=True,
                         env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"n": 6}]
