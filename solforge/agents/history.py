"""Reading the store back for the planner and the workers: attempt histories, the best candidate."""

from __future__ import annotations

from typing import Optional, Sequence

from ..candidate import Candidate
from .outcome import AttemptOutcome
from .planner import AttemptSummary

# attempts.status (the store's lifecycle) -> the agents' outcome, for rows written without `outcome`
_LIFECYCLE = {"compiled": "compiled", "evaluated": "incorrect", "failed": "runtime_error",
              "queued": "pending", "interrupted": "runtime_error"}


def histories(store, problems: Sequence[str], run_id: Optional[str] = None
              ) -> dict[str, list[AttemptSummary]]:
    """Every finished attempt of these problems (all runs), oldest first, with the LLM cost of each;
    with run_id, attempts of other runs are marked this_run=False (the planner's streaks stop there)."""
    out: dict[str, list[AttemptSummary]] = {p: [] for p in problems}
    if not problems:
        return out
    marks = ",".join("?" * len(problems))
    rows = store.query(
        f"SELECT a.problem, a.run_id, a.agent, a.language, a.status, a.outcome, a.sol_score, a.gpu_seconds, "
        f"coalesce(c.dollars, 0) AS dollars FROM attempts a LEFT JOIN ("
        f"  SELECT attempt_id, sum(cost_usd) AS dollars FROM llm_calls GROUP BY attempt_id) c "
        f"ON c.attempt_id = a.id WHERE a.problem IN ({marks}) AND a.status <> 'queued' "
        f"ORDER BY a.created_at, a.id", list(problems))
    for r in rows:
        status = r["outcome"] or _LIFECYCLE.get(r["status"], r["status"])
        out[r["problem"]].append(AttemptSummary(
            worker=r["agent"] or "", language=r["language"] or "cuda", status=status,
            sol_score=r["sol_score"], gpu_seconds=r["gpu_seconds"] or 0.0, dollars=r["dollars"],
            this_run=run_id is None or r["run_id"] == run_id))
    return out


def best_attempt(store, problem: str) -> Optional[tuple[str, Candidate, Optional[float]]]:
    """(attempt id, candidate, score) of the best scored attempt; without any score, the latest one
    that compiled (something to improve on). None when there is nothing."""
    rows = store.query(
        "SELECT id, candidate, sol_score FROM attempts WHERE problem = ? AND candidate IS NOT NULL "
        "AND (sol_score IS NOT NULL OR outcome IN (?, ?)) "
        "ORDER BY sol_score DESC NULLS LAST, created_at DESC LIMIT 1",
        [problem, AttemptOutcome.OK.value, AttemptOutcome.COMPILED.value])
    if not rows:
        return None
    r = rows[0]
    try:
        return r["id"], Candidate.model_validate(r["candidate"]), r["sol_score"]
    except Exception:  # noqa: BLE001 - a row from an older candidate format: nothing to build on
        return None


def population(store, problem: str, k: int = 4) -> list[dict]:
    """The k best live candidates of a problem (distinct sources), for lineage and for seeding."""
    return store.query(
        "SELECT id, parent_id, agent, sol_score, candidate FROM attempts WHERE problem = ? "
        "AND candidate IS NOT NULL AND outcome IN (?, ?) "
        "QUALIFY row_number() OVER (PARTITION BY source_hash ORDER BY sol_score DESC NULLS LAST) = 1 "
        "ORDER BY sol_score DESC NULLS LAST, created_at DESC LIMIT ?",
        [problem, AttemptOutcome.OK.value, AttemptOutcome.COMPILED.value, k])
