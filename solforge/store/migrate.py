"""Ordered SQL migrations: solforge/store/migrations/NNN_name.sql, each applied once, in order.

Each migration runs in one transaction together with its schema_migrations row, so a failing file
leaves the database as it was and the error names the file.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ..errors import SolforgeError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_NAME = re.compile(r"^(\d{3})_([A-Za-z0-9_]+)\.sql$")

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       VARCHAR NOT NULL,
    checksum   VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
)
"""


class MigrationError(SolforgeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every NNN_name.sql in version order; other files are ignored, duplicate numbers are errors."""
    found: dict[int, Migration] = {}
    for p in sorted(directory.glob("*.sql")):
        m = _NAME.match(p.name)
        if not m:
            raise MigrationError(f"{p}: migration files are named NNN_name.sql")
        v = int(m.group(1))
        if v in found:
            raise MigrationError(f"{p}: version {v:03d} also used by {found[v].path.name}")
        found[v] = Migration(v, m.group(2), p)
    return [found[v] for v in sorted(found)]


def applied(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    con.execute(_BOOKKEEPING)
    return dict(con.execute("SELECT version, checksum FROM schema_migrations").fetchall())


def pending(con: duckdb.DuckDBPyConnection, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    done = applied(con)
    out = []
    for m in discover(directory):
        if m.version in done:
            if done[m.version] != m.checksum:
                warnings.warn(f"migration {m.path.name} changed after it was applied to this "
                              "database; the change is NOT applied (add a new migration instead)",
                              stacklevel=3)
            continue
        out.append(m)
    return out


def migrate(con: duckdb.DuckDBPyConnection, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Apply pending migrations in order; returns those applied. Re-running is a no-op."""
    done = []
    for m in pending(con, directory):
        con.execute("BEGIN")
        try:
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (?, ?, ?)",
                        [m.version, m.name, m.checksum])
            con.execute("COMMIT")
        except duckdb.Error as e:
            con.execute("ROLLBACK")
            raise MigrationError(f"{m.path}: {type(e).__name__}: {e}") from None
        done.append(m)
    return done
