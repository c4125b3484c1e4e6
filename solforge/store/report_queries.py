"""Reads for the report, the roofline/baseline lookups, export, result imports and the CLI's listings:
every SQL statement of those modules lives here, next to the schema it reads."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .store import Store


# ---- T_sol and T_b for scoring ---------------------------------------------------------------
def roofline_rows(store: Store, problem: str, gpu_profile: str) -> list[dict]:
    return store.query("SELECT workload_uuid, t_sol_ms, limiter FROM roofline "
                       "WHERE problem = ? AND gpu_profile = ?", [problem, gpu_profile])


def roofline_t_sol(store: Store, gpu_profile: str) -> list[dict]:
    """(problem, workload_uuid, t_sol_ms) of every roofline row of a profile."""
    return store.query("SELECT problem, workload_uuid, t_sol_ms FROM roofline WHERE gpu_profile = ?",
                       [gpu_profile])


def fastest_baseline_rows(store: Store, problem: str) -> list[dict]:
    """Per workload: T_b, the faster of eager and torch.compile (each variant's latest passed
    measurement), and which variant it is."""
    return store.query(
        "SELECT workload_uuid, min(median_ms) AS median_ms, arg_min(variant, median_ms) AS variant "
        "FROM (SELECT workload_uuid, variant, median_ms "
        "FROM baselines WHERE problem = ? AND variant IN ('eager', 'compile') "
        "AND median_ms IS NOT NULL AND coalesce(status, 'passed') = 'passed' "
        "QUALIFY row_number() OVER (PARTITION BY workload_uuid, variant "
        "ORDER BY created_at DESC) = 1) GROUP BY workload_uuid", [problem])


def passed_baseline_counts(store: Store) -> dict[tuple[str, str], int]:
    """(problem, variant) -> workloads with a passed baseline."""
    return {(r["problem"], r["variant"]): r["n"] for r in store.query(
        "SELECT problem, variant, count(DISTINCT workload_uuid) AS n FROM baselines "
        "WHERE status = 'passed' GROUP BY problem, variant")}


# ---- result imports -----------------------------------------------------------------------------
def import_done(store: Store, sha256: str) -> bool:
    """Was a results file with this content imported already?"""
    return bool(store.query("SELECT 1 FROM runs WHERE kind = 'import' AND config->>'sha256' = ?",
                            [sha256]))


def baselines_labelled(store: Store, label: str) -> bool:
    return bool(store.query("SELECT 1 FROM baselines WHERE message = ? LIMIT 1", [label]))


# ---- export -----------------------------------------------------------------------------------
def best_correct_attempt(store: Store, problem: str) -> Optional[str]:
    row = store.query_one("SELECT attempt_id FROM v_best_per_problem WHERE problem = ?", [problem])
    return row["attempt_id"] if row else None


def attempt_ids_with_prefix(store: Store, prefix: str, limit: int = 3) -> list[str]:
    return [r["id"] for r in store.query("SELECT id FROM attempts WHERE id LIKE ? || '%' LIMIT ?",
                                         [prefix, limit])]


def attempt_summary(store: Store, attempt_id: str) -> Optional[dict]:
    """v_attempt_summary's row of an attempt, with its candidate."""
    return store.query_one("SELECT s.*, a.candidate FROM v_attempt_summary s JOIN attempts a "
                           "ON a.id = s.attempt_id WHERE s.attempt_id = ?", [attempt_id])


def problem_by_name(store: Store, name: str, subset: Optional[str] = None) -> Optional[dict]:
    """The problems row of a name (of that subset, when given)."""
    if subset is None:
        return store.query_one("SELECT * FROM problems WHERE name = ?", [name])
    return store.query_one("SELECT * FROM problems WHERE name = ? AND lower(subset) = lower(?)",
                           [name, subset])


def workload_shapes(store: Store, problem: str) -> list[dict]:
    """Per workload: index, uuid, axes, concrete input/output shapes, tolerance."""
    return store.query("SELECT workload_index, uuid, axes, input_shapes, output_shapes, tolerance "
                       "FROM workloads WHERE problem = ? ORDER BY workload_index", [problem])


def workload_notes(store: Store, problem: str) -> list[dict]:
    """Per workload: uuid, index, axes, tolerance, NVIDIA's published numbers, ingest warnings."""
    return store.query("SELECT uuid, workload_index, axes, tolerance, published, warnings "
                       "FROM workloads WHERE problem = ? ORDER BY workload_index", [problem])


# ---- the CLI's listings -------------------------------------------------------------------------
def count_problems(store: Store) -> int:
    return store.scalar("SELECT count(*) FROM problems")


def list_problems(store: Store, *, subset: Optional[str] = None, op: Optional[str] = None,
                  dtype: Optional[str] = None, model: Optional[str] = None,
                  name: Optional[str] = None, limit: Optional[int] = None) -> list[dict]:
    """Stored problems, filtered (case-insensitive subset/op, a dtype, a model tag or name part)."""
    where, params = [], []
    if subset:
        where.append("lower(subset) = lower(?)")
        params.append(subset)
    if op:
        where.append("lower(op_type) = lower(?)")
        params.append(op)
    if dtype:
        where.append("list_contains(dtypes, ?)")
        params.append(dtype)
    if model:
        where.append("exists (SELECT 1 FROM unnest(model_tags) AS u(m) WHERE m ILIKE ?)")
        params.append(f"%{model}%")
    if name:
        where.append("name ILIKE ?")
        params.append(f"%{name}%")
    sql = ("SELECT name, subset, op_type, n_workloads, dtypes, model_tags, content_hash, source "
           "FROM problems" + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY subset, name")
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return store.query(sql, params)


def problem_names_with_prefix(store: Store, prefix: str, limit: int = 6) -> list[str]:
    return [r["name"] for r in store.query(
        "SELECT name FROM problems WHERE name LIKE ? ORDER BY name LIMIT ?",
        [prefix.replace("%", "") + "%", limit])]


def baseline_summary(store: Store, problem: str) -> list[dict]:
    """Per variant, label and hardware: workloads measured, the median of their latest T_b, and the
    median share of it the GPU was busy (busy_ms / median_ms; low: launch-bound, host time)."""
    return store.query(
        "SELECT variant, label, hardware_id, count(*) AS workloads, median(median_ms) AS median_ms, "
        "median(busy_ms / nullif(median_ms, 0)) AS busy_share, "
        "max(created_at) AS latest FROM (SELECT * FROM baselines WHERE problem = ? "
        "QUALIFY row_number() OVER (PARTITION BY workload_uuid, variant, hardware_id "
        "ORDER BY created_at DESC) = 1) GROUP BY ALL ORDER BY variant", [problem])


def roofline_summary(store: Store, problem: str) -> list[dict]:
    return store.query(
        "SELECT gpu_profile, count(*) AS workloads, min(t_sol_ms) AS min_t_sol_ms, "
        "median(t_sol_ms) AS median_t_sol_ms, max(t_sol_ms) AS max_t_sol_ms, "
        "mode(limiter) AS limiter FROM roofline WHERE problem = ? GROUP BY ALL ORDER BY 1", [problem])


def best_scored_attempt(store: Store, problem: str) -> list[dict]:
    return store.query(
        "SELECT a.id, a.agent, a.language, a.status, a.created_at, avg(s.sol_score) AS mean_sol_score, "
        "avg(s.speedup) AS mean_speedup, count(*) AS workloads FROM attempts a "
        "JOIN scores s ON s.attempt_id = a.id WHERE a.problem = ? GROUP BY ALL "
        "ORDER BY mean_sol_score DESC NULLS LAST LIMIT 1", [problem])


def attempt_status_counts(store: Store, problem: str) -> list[dict]:
    return store.query("SELECT status, count(*) AS n FROM attempts WHERE problem = ? "
                       "GROUP BY 1 ORDER BY 1", [problem])


def list_attempts(store: Store, *, problem: Optional[str] = None, status: Optional[str] = None,
                  run: Optional[str] = None, limit: int = 50) -> list[dict]:
    """Newest attempts first; `problem` may hold a % wildcard."""
    where, params = [], []
    if problem:
        where.append("problem LIKE ?" if "%" in problem else "problem = ?")
        params.append(problem)
    if status:
        where.append("status = ?")
        params.append(status)
    if run:
        where.append("run_id = ?")
        params.append(run)
    return store.query(
        "SELECT id, run_id, problem, parent_id, agent, model, language, source_hash, status, "
        "error, created_at, updated_at FROM attempts"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY created_at DESC, id LIMIT ?", [*params, limit])


def user_query(store: Store, sql: str) -> list[dict]:
    """`solforge sql`: the user's own SQL; a DuckDB error becomes one clear line (StoreError)."""
    import duckdb

    from .store import StoreError

    try:
        return store.query(sql)
    except duckdb.Error as e:
        raise StoreError(f"SQL failed: {e}".splitlines()[0]) from None


# ---- the report -------------------------------------------------------------------------------
def frame(store: Store, sql: str, params: Optional[Sequence[Any]] = None):
    """A polars DataFrame of a query, read under the store's lock (Arrow when pyarrow is present;
    polars itself is imported only by duckdb or the fallback: the store does not need it)."""
    with store.transaction() as con:
        cur = con.execute(sql, list(params or []))
        try:
            return cur.pl()
        except (ModuleNotFoundError, AttributeError):
            names = [d[0] for d in cur.description]
            types = [d[1] for d in cur.description]
            rows = cur.fetchall()
    import polars as pl

    # no pyarrow: rows -> polars directly (a report reads thousands of rows, not millions). The
    # column types come from DuckDB, not from the values: an all-NULL column (nothing scored yet)
    # would otherwise be of dtype Null, on which log/cum_max/median fail.
    polars_types = {"DOUBLE": pl.Float64, "FLOAT": pl.Float64, "DECIMAL": pl.Float64, "BIGINT": pl.Int64,
                    "INTEGER": pl.Int64, "HUGEINT": pl.Int64, "SMALLINT": pl.Int64, "UBIGINT": pl.Int64,
                    "VARCHAR": pl.Utf8, "BOOLEAN": pl.Boolean, "TIMESTAMP": pl.Datetime,
                    "TIMESTAMP WITH TIME ZONE": pl.Datetime("us", "UTC")}
    schema = {n: polars_types.get(str(t).split("(")[0], None) for n, t in zip(names, types)}
    df = pl.DataFrame(rows, schema=names, orient="row", infer_schema_length=None)
    return df.with_columns(pl.col(n).cast(t) for n, t in schema.items()
                           if t is not None and df.schema[n] == pl.Null)


def _scope(run: Optional[str]) -> tuple[str, list]:
    return ("WHERE run_id = ?", [run]) if run else ("", [])


def report_runs(store: Store, run: Optional[str]) -> list[dict]:
    """The runs a report covers: one, or every run that made attempts."""
    return store.query(
        "SELECT id, kind, status, note, config, gpu_profile, started_at, finished_at FROM runs "
        + ("WHERE id = ? " if run else "WHERE id IN (SELECT DISTINCT run_id FROM attempts) ")
        + "ORDER BY started_at", [run] if run else [])


def attempt_summary_frame(store: Store, run: Optional[str]):
    where, params = _scope(run)
    return frame(store, f"SELECT * FROM v_attempt_summary {where} ORDER BY created_at, attempt_id",
                 params)


def llm_spend_frame(store: Store, run: Optional[str]):
    where, params = _scope(run)
    return frame(store, f"SELECT * FROM v_llm_spend {where} ORDER BY first_call_at", params)


def failures_frame(store: Store, run: Optional[str]):
    """Failures by stage and kind, with the latest message of each."""
    fw = "WHERE attempt_id IN (SELECT id FROM attempts WHERE run_id = ?)" if run else ""
    return frame(store, f"""
        SELECT stage, kind, count(*) AS n, count(DISTINCT problem) AS problems,
               arg_max(left(coalesce(message, ''), 300), created_at) AS latest_message
        FROM v_failures {fw} GROUP BY stage, kind ORDER BY n DESC, stage, kind""",
                 [run] if run else [])


def planner_budget_rows(store: Store, run: Optional[str]) -> list[dict]:
    where, params = _scope(run)
    return store.query(f"SELECT run_id, created_at, budget FROM planner_decisions {where} "
                       "ORDER BY created_at", params)
