"""Queries behind the results table (`solforge table`) and best-kernel saving (`solforge best`):
every ingested problem, and the best correct attempt of each (the v_best_per_problem rule)."""

from __future__ import annotations

from typing import Optional

from .store import Store


def problem_subsets(store: Store) -> dict[str, Optional[str]]:
    """{problem name: subset} for every problem in the store."""
    return {r["name"]: r["subset"] for r in store.query("SELECT name, subset FROM problems ORDER BY name")}


def best_attempts(store: Store) -> dict[str, dict]:
    """{problem: its best correct, scored attempt} with speedup_geomean, sol_score, attempt_id, and
    which T_b variants its scores were taken against (t_b_from, e.g. 'compile+eager')."""
    rows = store.query("""
        SELECT b.problem, b.subset, b.attempt_id, b.run_id, b.agent, b.language, b.speedup_geomean,
               b.speedup_min, b.sol_score, b.n_workloads, t.t_b_from
        FROM v_best_per_problem b
        LEFT JOIN (SELECT attempt_id,
                          string_agg(DISTINCT baseline_variant, '+' ORDER BY baseline_variant) AS t_b_from
                   FROM scores WHERE baseline_variant IS NOT NULL GROUP BY attempt_id) t
          ON t.attempt_id = b.attempt_id
        ORDER BY b.problem""")
    return {r["problem"]: r for r in rows}


def attempt_counts(store: Store) -> dict[str, int]:
    """{problem: attempts made on it}."""
    return {r["problem"]: r["n"] for r in
            store.query("SELECT problem, count(*) AS n FROM attempts GROUP BY problem")}


# ---- best-kernel saving (solforge.results.best) ---------------------------------------------------
_BY_SPEEDUP = """
SELECT problem, attempt_id AS best_attempt_id FROM v_attempt_summary
WHERE all_correct AND n_scored > 0
QUALIFY row_number() OVER (PARTITION BY problem
                           ORDER BY speedup_geomean DESC NULLS LAST, sol_score DESC NULLS LAST,
                                    created_at) = 1
"""


def best_attempt_ids(store: Store, by: str = "leaderboard") -> dict[str, str]:
    """{problem: best correct attempt id}: the v_leaderboard rule (SOL score first), or with
    by="speedup" the highest geomean speedup first."""
    if by == "speedup":
        rows = store.query(_BY_SPEEDUP)
    else:
        rows = store.query("SELECT problem, best_attempt_id FROM v_leaderboard "
                           "WHERE best_attempt_id IS NOT NULL")
    return {r["problem"]: r["best_attempt_id"] for r in rows}


def t_b_variants(store: Store) -> dict[str, str]:
    """{attempt id: the T_b variants its scores used, e.g. 'compile+eager'}."""
    return {r["attempt_id"]: r["tb"] for r in store.query(
        "SELECT attempt_id, string_agg(DISTINCT baseline_variant, '+' ORDER BY baseline_variant) AS tb "
        "FROM scores WHERE baseline_variant IS NOT NULL GROUP BY attempt_id")}


def best_with_commit_near(store: Store, attempt_id: str, noise: float) -> Optional[str]:
    """The best correct attempt of the same problem from a run that recorded its git commit, whose
    geomean speedup is at least noise x the given attempt's; None if there is none."""
    row = store.query_one(
        "SELECT v.attempt_id FROM v_attempt_summary v JOIN attempts a ON a.id = v.attempt_id "
        "JOIN runs r ON r.id = a.run_id JOIN v_attempt_summary b ON b.attempt_id = ? "
        "WHERE v.problem = b.problem AND v.all_correct AND v.n_scored > 0 AND r.git_commit IS NOT NULL "
        "AND v.speedup_geomean >= ? * b.speedup_geomean "
        "ORDER BY v.sol_score DESC NULLS LAST, v.speedup_geomean DESC NULLS LAST, v.created_at LIMIT 1",
        [attempt_id, noise])
    return row["attempt_id"] if row else None


def run_and_hardware(store: Store, run_id: Optional[str], hardware_id: Optional[str]) -> tuple[dict, dict]:
    run = (store.query_one("SELECT * FROM runs WHERE id = ?", [run_id]) if run_id else None) or {}
    hw = (store.query_one("SELECT * FROM hardware WHERE id = ?", [hardware_id]) if hardware_id else None) or {}
    return run, hw


def attempt_evidence(store: Store, attempt_id: str) -> Optional[dict]:
    """Everything a saved best/ record holds about one attempt: the attempt, its problem, workloads,
    latest eval and score rows per workload, and the latest passed baselines of its problem."""
    a = store.query_one("SELECT * FROM attempts WHERE id = ?", [attempt_id])
    if a is None:
        return None
    problem = a["problem"]
    return {
        "attempt": a,
        "problem": store.query_one("SELECT name, subset, definition FROM problems WHERE name = ?", [problem]),
        "workloads": {r["uuid"]: r for r in store.query(
            "SELECT uuid, workload_index, axes FROM workloads WHERE problem = ?", [problem])},
        "evals": {r["workload_uuid"]: r for r in store.query(
            "SELECT * FROM v_latest_evals WHERE attempt_id = ?", [attempt_id])},
        "scores": {r["workload_uuid"]: r for r in store.query(
            "SELECT * FROM v_latest_scores WHERE attempt_id = ?", [attempt_id])},
        "baselines": {(r["workload_uuid"], r["variant"]): r["median_ms"] for r in store.query(
            "SELECT workload_uuid, variant, median_ms FROM baselines WHERE problem = ? AND status = 'passed' "
            "QUALIFY row_number() OVER (PARTITION BY workload_uuid, variant ORDER BY created_at DESC) = 1",
            [problem])},
    }


def attempt_ids_with_prefix(store: Store, prefix: str, limit: int = 3) -> list[str]:
    """Attempt ids starting with prefix (an exact id first), at most limit of them."""
    exact = store.query("SELECT id FROM attempts WHERE id = ?", [prefix])
    if exact:
        return [exact[0]["id"]]
    return [r["id"] for r in store.query(
        "SELECT id FROM attempts WHERE starts_with(id, ?) ORDER BY id LIMIT ?", [prefix, limit])]


def hardware_known(store: Store, hardware_id: str) -> bool:
    return bool(store.query("SELECT 1 FROM hardware WHERE id = ?", [hardware_id]))


def store_counts(store: Store) -> tuple[int, int]:
    """(problems, attempts) in the store: what `solforge doctor` reports."""
    return (store.scalar("SELECT count(*) FROM problems") or 0,
            store.scalar("SELECT count(*) FROM attempts") or 0)
