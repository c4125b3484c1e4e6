"""Store: the one door to the DuckDB file. Schema and rules: SCHEMA.md beside this file."""

from __future__ import annotations

import json
import os
import socket
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import duckdb

from ..errors import SolforgeError
from ..procs import pid_alive
from . import migrate as _migrate
from .lease import Lease, lease_for
from .status import ATTEMPT_TRANSITIONS, AttemptStatus, RunStatus

DEFAULT_LOCK_TIMEOUT_S = 120.0
_INSERT_CHUNK = 256  # rows per INSERT statement: fewer round trips than executemany


class StoreError(SolforgeError):
    pass


class InvalidTransition(StoreError):
    pass


def new_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _check_file(path: Path) -> None:
    """An existing store file must be a DuckDB database: anything else is one clear line naming the
    file (DuckDB's own error is a long traceback), and a FIFO or device is never opened."""
    import stat

    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise StoreError(f"{path}: cannot open the store: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{path}: not a DuckDB database file (not a regular file)")
    if st.st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as e:
        raise StoreError(f"{path}: cannot open the store: {e.strerror or e}") from None
    if head[8:12] != b"DUCK":  # DuckDB's magic bytes follow an 8-byte checksum
        raise StoreError(f"{path}: not a DuckDB database file")


def default_path() -> Path:
    from .. import settings

    return settings.get().db_path


class Store:
    """A DuckDB file with solforge's schema. Cheap to create; safe across threads and processes."""

    def __init__(self, path: str | Path | None = None, *, lock_timeout_s: float | None = None,
                 migrate: bool = True):
        self.path = Path(path).expanduser() if path is not None else default_path()
        if str(path) == ":memory:":
            # Every lease would open a fresh, empty in-memory database: rows would vanish.
            raise StoreError("Store needs a file path (tests: tmp_path / 'x.duckdb'), not :memory:")
        if lock_timeout_s is None:
            lock_timeout_s = float(os.environ.get("SOLFORGE_DB_LOCK_TIMEOUT_S",
                                                  DEFAULT_LOCK_TIMEOUT_S))
        _check_file(self.path)
        self._lease: Lease = lease_for(self.path, lock_timeout_s)
        self._columns: dict[str, dict[str, str]] = {}
        self.applied_migrations: list[str] = []
        if migrate:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with self._lease.connection() as con:
                    self.applied_migrations = [m.path.name for m in _migrate.migrate(con)]
            except duckdb.IOException as e:  # e.g. damaged past its header: one line, not a traceback
                first = (str(e).strip().splitlines() or ["?"])[0]
                raise StoreError(f"{self.path}: cannot open the store: {first}") from None

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def close(self) -> None:
        """Release the file now instead of after the short idle lease."""
        self._lease.close()

    # ---- generic access --------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN ... COMMIT (ROLLBACK on error). Nested calls join the outer transaction."""
        with self._lease.connection() as con:
            if self._lease.tx_depth:
                self._lease.tx_depth += 1
                try:
                    yield con
                finally:
                    self._lease.tx_depth -= 1
                return
            con.execute("BEGIN TRANSACTION")
            self._lease.tx_depth = 1
            try:
                yield con
            except BaseException:
                self._lease.tx_depth = 0
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            self._lease.tx_depth = 0
            con.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        with self._lease.connection() as con:
            con.execute(sql, _params(params))
        if _looks_like_ddl(sql):
            self._columns.clear()

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
              ) -> list[dict[str, Any]]:
        """Rows as dicts; JSON columns parsed into Python values."""
        with self._lease.connection() as con:
            cur = con.execute(sql, _params(params))
            if cur.description is None:
                return []
            names = [d[0] for d in cur.description]
            is_json = [str(d[1]) == "JSON" for d in cur.description]
            rows = cur.fetchall()
        out = []
        for r in rows:
            out.append({n: (_loads(v) if j else v) for n, j, v in zip(names, is_json, r)})
        return out

    def query_one(self, sql: str, params=None) -> Optional[dict[str, Any]]:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params=None) -> Any:
        with self._lease.connection() as con:
            row = con.execute(sql, _params(params)).fetchone()
        return row[0] if row else None

    def columns(self, table: str) -> dict[str, str]:
        """{column: duckdb type} for a table (cached; refreshed when a name is unknown)."""
        if table not in self._columns:
            rows = self.query("SELECT column_name, data_type FROM duckdb_columns() "
                              "WHERE table_name = ? AND schema_name = 'main' ORDER BY column_index",
                              [table])
            if not rows:
                raise StoreError(f"unknown table {table!r}")
            self._columns[table] = {r["column_name"]: r["data_type"] for r in rows}
        return self._columns[table]

    def tables(self) -> list[str]:
        return [r["table_name"] for r in self.query(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1")]

    def insert_rows(self, table: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert dict rows in one transaction. Missing keys take the column default."""
        rows = list(rows)
        if not rows:
            return 0
        cols = self._checked_columns(table, rows)
        # Rows with the same key set go in one statement, so absent keys get column defaults.
        groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
        for r in rows:
            groups.setdefault(tuple(r.keys()), []).append(r)
        # One statement needs no explicit transaction (autocommit): two statements fewer per call.
        single = len(groups) == 1 and len(rows) <= _INSERT_CHUNK
        with (self._lease.connection() if single else self.transaction()) as con:
            for keys, group in groups.items():
                if not keys:
                    for _ in group:
                        con.execute(f"INSERT INTO {_ident(table)} DEFAULT VALUES")
                    continue
                col_sql = ", ".join(_ident(k) for k in keys)
                payload = _json_payload(group, keys, cols)
                if payload is not None:
                    # One JSON array parameter unpacked in SQL: ~8x faster than bound VALUES.
                    exprs = ", ".join(_from_json(k, cols[k]) for k in keys)
                    con.execute(f"INSERT INTO {_ident(table)} ({col_sql}) SELECT {exprs} "
                                "FROM (SELECT unnest(CAST(? AS JSON[])) AS j)", [payload])
                    continue
                one = "(" + ", ".join("?" for _ in keys) + ")"
                for i in range(0, len(group), _INSERT_CHUNK):
                    chunk = group[i:i + _INSERT_CHUNK]
                    values = [_to_db(r[k], cols[k]) for r in chunk for k in keys]
                    con.execute(f"INSERT INTO {_ident(table)} ({col_sql}) VALUES "
                                + ", ".join([one] * len(chunk)), values)
        return len(rows)

    def upsert_rows(self, table: str, rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> int:
        """Replace rows that match on `key` columns (delete then insert), in one transaction."""
        rows = list(rows)
        if not rows:
            return 0
        self._checked_columns(table, rows)
        key = list(key)
        for r in rows:
            missing = [k for k in key if k not in r]
            if missing:
                raise StoreError(f"upsert into {table}: row lacks key column(s) {missing}")
        where = " AND ".join(f"{_ident(k)} = ?" for k in key)
        with self.transaction() as con:
            con.executemany(f"DELETE FROM {_ident(table)} WHERE {where}",
                            [[_plain(r[k]) for k in key] for r in rows])
            self.insert_rows(table, rows)
        return len(rows)

    def _checked_columns(self, table: str, rows: list[Mapping[str, Any]]) -> dict[str, str]:
        cols = self.columns(table)
        unknown = {k for r in rows for k in r} - set(cols)
        if unknown:
            self._columns.pop(table, None)  # another process may have migrated; look again
            cols = self.columns(table)
            unknown -= set(cols)
        if unknown:
            raise StoreError(f"table {table!r} has no column(s) {sorted(unknown)} "
                             f"(columns: {', '.join(cols)}; see solforge/store/SCHEMA.md)")
        return cols

    # ---- runs --------------------------------------------------------------------------------
    def create_run(self, *, kind: str | None = None, config: Any = None,
                   gpu_profile: str | None = None, hardware_id: str | None = None,
                   note: str | None = None, id: str | None = None,
                   provenance: dict | None = None) -> str:
        """`provenance` (solforge.provenance.run_provenance()): its commit, torch and cuda fill the
        git_commit / torch_version / cuda_version columns (migration 080)."""
        rid = id or new_id()
        pv = provenance or {}
        self.insert_rows("runs", [{
            "id": rid, "kind": kind, "config": config, "gpu_profile": gpu_profile,
            "hardware_id": hardware_id, "note": note, "host": socket.gethostname(),
            "pid": os.getpid(), "status": RunStatus.RUNNING, "started_at": utcnow(),
            "git_commit": pv.get("commit"), "torch_version": pv.get("torch"),
            "cuda_version": pv.get("cuda")}])
        return rid

    def finish_run(self, run_id: str, status: RunStatus | str = RunStatus.FINISHED,
                   error: str | None = None) -> None:
        status = RunStatus(status)
        with self.transaction() as con:
            con.execute("UPDATE runs SET status = ?, finished_at = ?, error = coalesce(?, error) "
                        "WHERE id = ?", [status.value, utcnow(), error, run_id])
            if status != RunStatus.FINISHED:
                self._interrupt_attempts(con, run_id, f"run {status.value}")

    # ---- attempts ------------------------------------------------------------------------------
    def create_attempt(self, problem: str, *, run_id: str | None = None,
                       parent_id: str | None = None, agent: str | None = None,
                       model: str | None = None, language: str | None = None,
                       candidate: Any = None, params: Any = None, source_hash: str | None = None,
                       id: str | None = None) -> str:
        """Write a queued attempt and commit it, before anything is compiled or run."""
        aid = id or new_id()
        if candidate is not None and hasattr(candidate, "model_dump"):
            if source_hash is None and hasattr(candidate, "source_hash"):
                source_hash = candidate.source_hash()
            if params is None:
                params = getattr(candidate, "params", None)
            if language is None:
                language = getattr(candidate, "language", None)
        now = utcnow()
        self.insert_rows("attempts", [{
            "id": aid, "run_id": run_id, "problem": problem, "parent_id": parent_id,
            "agent": agent, "model": model, "language": language, "candidate": candidate,
            "params": params, "source_hash": source_hash, "status": AttemptStatus.QUEUED,
            "created_at": now, "updated_at": now}])
        return aid

    def mark_attempt(self, attempt_id: str, status: AttemptStatus | str,
                     rows: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
                     **fields: Any) -> None:
        """Move an attempt to `status` (checked against the lifecycle) and set other columns.

        `rows` ({table: [row, ...]}) are written in the same transaction, e.g. the compile_results
        row together with status=compiled, so the status never claims results that are missing.
        """
        status = AttemptStatus(status)
        cols = self.columns("attempts")
        bad = (set(fields) - set(cols)) | ({"id", "status"} & set(fields))
        if bad:
            raise StoreError(f"mark_attempt: not settable attempt column(s) {sorted(bad)}")
        # The statuses this move is allowed from, checked by the UPDATE itself (one statement).
        sources = [s.value for s, targets in ATTEMPT_TRANSITIONS.items()
                   if status in targets or (s == status and not s.is_final)]
        sets = {"status": status.value, "updated_at": utcnow(),
                **{k: _to_db(v, cols[k]) for k, v in fields.items()}}
        rows = {t: list(r) for t, r in (rows or {}).items() if r}
        with (self.transaction() if rows else self._lease.connection()) as con:
            hit = con.execute(
                "UPDATE attempts SET " + ", ".join(f"{_ident(k)} = ?" for k in sets)
                + " WHERE id = ? AND list_contains(?, status) RETURNING id",
                [*sets.values(), attempt_id, sources]).fetchall()
            if not hit:
                row = con.execute("SELECT status FROM attempts WHERE id = ?",
                                  [attempt_id]).fetchone()
                if row is None:
                    raise StoreError(f"no attempt with id {attempt_id!r}")
                raise InvalidTransition(f"attempt {attempt_id}: {row[0]} -> {status.value} "
                                        "is not allowed")
            for table, table_rows in rows.items():
                self.insert_rows(table, table_rows)

    def mark_interrupted(self, run_id: str, error: str = "run interrupted") -> int:
        """Attempts of `run_id` still queued or compiled become interrupted; the run too if running."""
        with self.transaction() as con:
            n = self._interrupt_attempts(con, run_id, error)
            con.execute("UPDATE runs SET status = ?, finished_at = coalesce(finished_at, ?), "
                        "error = coalesce(error, ?) WHERE id = ? AND status = ?",
                        [RunStatus.INTERRUPTED.value, utcnow(), error, run_id,
                         RunStatus.RUNNING.value])
        return n

    def _interrupt_attempts(self, con, run_id: str, error: str) -> int:
        open_ = [AttemptStatus.QUEUED.value, AttemptStatus.COMPILED.value]
        n = con.execute("SELECT count(*) FROM attempts WHERE run_id = ? AND status IN (?, ?)",
                        [run_id, *open_]).fetchone()[0]
        if n:
            con.execute("UPDATE attempts SET status = ?, updated_at = ?, error = coalesce(error, ?) "
                        "WHERE run_id = ? AND status IN (?, ?)",
                        [AttemptStatus.INTERRUPTED.value, utcnow(), error, run_id, *open_])
        return int(n)

    def reap_dead_runs(self) -> list[str]:
        """Runs marked running whose process (on this host) is gone: interrupt them and theirs."""
        host = socket.gethostname()
        dead = [r["id"] for r in self.query(
            "SELECT id, pid FROM runs WHERE status = ? AND host = ?", [RunStatus.RUNNING.value, host])
            if r["pid"] and not pid_alive(r["pid"])]
        for rid in dead:
            self.mark_interrupted(rid, "run's process died")
        return dead


# ---- value conversion ------------------------------------------------------------------------
def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StoreError(f"bad identifier {name!r}")
    return f'"{name}"'


def _plain(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, Path):
        return str(v)
    return v


def _to_db(v: Any, col_type: str) -> Any:
    if col_type == "JSON":
        if v is None or isinstance(v, str):
            return v  # a str is taken as JSON text already
        if hasattr(v, "model_dump_json"):
            return v.model_dump_json()
        return json.dumps(v, default=_json_default)
    if hasattr(v, "model_dump") and not isinstance(v, type):
        raise StoreError(f"a pydantic model can only go into a JSON column, not {col_type}")
    if isinstance(v, (list, tuple)) and col_type.endswith("[]"):
        return [_plain(x) for x in v]
    return _plain(v)


_JSON_SAFE_TYPES = ("VARCHAR", "JSON", "INTEGER", "BIGINT", "SMALLINT", "DOUBLE", "FLOAT",
                    "BOOLEAN", "TIMESTAMP", "DATE", "VARCHAR[]", "INTEGER[]", "BIGINT[]",
                    "DOUBLE[]")


def _json_payload(rows: list[Mapping[str, Any]], keys: Sequence[str],
                  cols: Mapping[str, str]) -> Optional[str]:
    """The rows as one JSON array for the fast insert path, or None when a value would not
    survive the trip (NaN/inf, bytes, odd column types): the caller then binds VALUES."""
    if any(cols[k] not in _JSON_SAFE_TYPES for k in keys):
        return None
    out = []
    for r in rows:
        d = {}
        for k in keys:
            v = r[k]
            if cols[k] == "JSON":
                if isinstance(v, str):
                    try:
                        v = json.loads(v)
                    except ValueError:
                        raise StoreError(f"column {k!r} is JSON but got text that is not JSON: "
                                         f"{v[:80]!r}") from None
                elif v is not None and hasattr(v, "model_dump"):
                    v = v.model_dump(mode="json")
            elif isinstance(v, datetime):
                v = v.isoformat()
            elif isinstance(v, (bytes, bytearray, dict)) or hasattr(v, "model_dump"):
                return None
            d[k] = v
        out.append(d)
    try:
        return json.dumps(out, default=_json_default, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere
        return None


def _from_json(col: str, col_type: str) -> str:
    if col_type == "JSON":
        return f"nullif(j->'{col}', 'null')"
    if col_type == "VARCHAR":
        return f"j->>'{col}'"
    if col_type.endswith("[]"):
        return f"CAST(j->'{col}' AS {col_type})"
    return f"CAST(j->>'{col}' AS {col_type})"


def _json_default(o: Any) -> Any:
    if isinstance(o, Enum):
        return o.value
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def _loads(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _params(params):
    if params is None:
        return None
    if isinstance(params, Mapping):
        return {k: _plain(v) for k, v in params.items()}
    return [_plain(v) for v in params]


def _looks_like_ddl(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return head in ("CREATE", "ALTER", "DROP")
