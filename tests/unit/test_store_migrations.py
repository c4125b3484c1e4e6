"""Migrations: from an empty file, re-running, a new migration on an old database, bad files."""

from __future__ import annotations

import duckdb
import pytest

from solforge.store import MigrationError, Store
from solforge.store import migrate as m


def test_empty_database_gets_every_migration_in_order(tmp_path):
    s = Store(tmp_path / "a.duckdb")
    files = [x.path.name for x in m.discover()]
    assert files[0] == "001_core.sql"
    assert s.applied_migrations == files
    rows = s.query("SELECT version, name FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [x.version for x in m.discover()]
    tables = set(s.tables())
    for t in ("problems", "workloads", "runs", "attempts", "compile_results", "eval_results",
              "baselines", "roofline", "scores", "llm_calls", "planner_decisions", "hardware"):
        assert t in tables


def test_reopening_applies_nothing_and_keeps_rows(tmp_path):
    db = tmp_path / "a.duckdb"
    s = Store(db)
    aid = s.create_attempt("p")
    s.close()
    again = Store(db)
    assert again.applied_migrations == []
    assert again.scalar("SELECT count(*) FROM schema_migrations") == len(m.discover())
    assert again.scalar("SELECT id FROM attempts") == aid


def _write(d, name, sql):
    (d / name).write_text(sql)


def test_added_migration_applies_on_old_database(tmp_path):
    mig = tmp_path / "migs"
    mig.mkdir()
    _write(mig, "001_base.sql", "CREATE TABLE t (a INTEGER);")
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    assert [x.name for x in m.migrate(con, mig)] == ["base"]
    con.execute("INSERT INTO t VALUES (1), (2)")
    assert m.migrate(con, mig) == []  # no-op
    _write(mig, "002_more.sql", "ALTER TABLE t ADD COLUMN b VARCHAR DEFAULT 'x';\n"
                                "CREATE TABLE u (k INTEGER);")
    assert [x.version for x in m.migrate(con, mig)] == [2]
    assert con.execute("SELECT a, b FROM t ORDER BY a").fetchall() == [(1, "x"), (2, "x")]
    assert con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall() == [(1,), (2,)]


def test_failing_migration_rolls_back_and_names_the_file(tmp_path):
    mig = tmp_path / "migs"
    mig.mkdir()
    _write(mig, "001_ok.sql", "CREATE TABLE t (a INTEGER);")
    _write(mig, "002_bad.sql", "CREATE TABLE half (x INTEGER);\nSELECT * FROM no_such_table;")
    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    with pytest.raises(MigrationError, match="002_bad.sql"):
        m.migrate(con, mig)
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "t" in tables and "half" not in tables  # 001 kept, 002 entirely undone
    assert con.execute("SELECT version FROM schema_migrations").fetchall() == [(1,)]


def test_duplicate_versions_and_bad_names_are_errors(tmp_path):
    _write(tmp_path, "010_a.sql", "SELECT 1;")
    _write(tmp_path, "010_b.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="010_b.sql"):
        m.discover(tmp_path)
    (tmp_path / "010_b.sql").unlink()
    _write(tmp_path, "11_short.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="NNN_name"):
        m.discover(tmp_path)


def test_edited_applied_migration_warns(tmp_path):
    mig = tmp_path / "migs"
    mig.mkdir()
    _write(mig, "001_base.sql", "CREATE TABLE t (a INTEGER);")
    con = duckdb.connect(str(tmp_path / "e.duckdb"))
    m.migrate(con, mig)
    _write(mig, "001_base.sql", "CREATE TABLE t (a INTEGER, b INTEGER);")
    with pytest.warns(UserWarning, match="changed after it was applied"):
        assert m.migrate(con, mig) == []


def test_store_brings_an_old_database_up_to_date(tmp_path):
    """A database made when only 001 existed gets every later migration when a Store opens it."""
    only_first = tmp_path / "first"
    only_first.mkdir()
    first = m.discover()[0]
    (only_first / first.path.name).write_text(first.sql)
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    m.migrate(con, only_first)
    con.execute("INSERT INTO problems (name, content_hash, definition) VALUES ('p', 'h', '{}')")
    con.close()
    s = Store(db)
    assert s.applied_migrations == [x.path.name for x in m.discover()[1:]]
    assert s.scalar("SELECT name FROM problems") == "p"
    assert Store(db).applied_migrations == []
