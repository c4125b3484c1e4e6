"""Reading the store back for the planner and the workers: attempt histories, the best candidate."""

from __future__ import annotations

from typing import Optional, Sequence

from ..candidate import Candidate
from ..store import attempt_queries as q
from .outcome import AttemptOutcome
from .planner import AttemptSummary

# attempts.status (the store's lifecycle) -> the agents' outcome, for rows written without `outcome`
_LIFECYCLE = {"compiled": "compiled", "evaluated": "incorrect", "failed": "runtime_error",
              "queued": "pending", "interrupted": "runtime_error"}
# outcomes a later attempt can build on
_LIVE = (AttemptOutcome.OK.value, AttemptOutcome.COMPILED.value)


def histories(store, problems: Sequence[str], run_id: Optional[str] = None
              ) -> dict[str, list[AttemptSummary]]:
    """Every finished attempt of these problems (all runs), oldest first, with the LLM cost of each;
    with run_id, attempts of other runs are marked this_run=False (the planner's streaks stop there)."""
    out: dict[str, list[AttemptSummary]] = {p: [] for p in problems}
    if not problems:
        return out
    rows = q.history_rows(store, list(problems))
    for r in rows:
        status = r["outcome"] or _LIFECYCLE.get(r["status"], r["status"])
        out[r["problem"]].append(AttemptSummary(
            worker=r["agent"] or "", language=r["language"] or "cuda", status=status,
            sol_score=r["sol_score"], gpu_seconds=r["gpu_seconds"] or 0.0, dollars=r["dollars"],
            this_run=run_id is None or r["run_id"] == run_id,
            # interrupted with an outcome (it compiled before its run died) has a verdict: without a
            # GPU that is all there is, with one the resume finishes it as a child attempt
            interrupted=r["status"] == "interrupted" and not r["outcome"]))
    return out


def best_attempt(store, problem: str) -> Optional[tuple[str, Candidate, Optional[float]]]:
    """(attempt id, candidate, score) of the best scored attempt; without any score, the latest one
    that compiled (something to improve on). None when there is nothing."""
    r = q.best_row(store, problem, _LIVE)
    if r is None:
        return None
    try:
        return r["id"], Candidate.model_validate(r["candidate"]), r["sol_score"]
    except Exception:  # noqa: BLE001 - a row from an older candidate format: nothing to build on
        return None


def launch_times(store):
    """The LLM worker's LaunchTimes from the store: (problem, candidate) -> {kernel: ms}, each
    kernel's time within a call (the profiler's records, eval_results.kernel_ms) averaged over the
    workloads of the newest evaluation of that same source; {} when it was never timed so."""
    def times(problem, cand: Candidate) -> dict:
        return mean_kernel_ms(q.kernel_times_rows(store, problem.name, cand.source_hash()))
    return times


def attempt_kernel_ms(store, attempt_id: str) -> dict:
    """{kernel: ms} of one attempt, averaged over its timed workloads ({} when none has them)."""
    return mean_kernel_ms(q.attempt_kernel_times_rows(store, attempt_id))


def mean_kernel_ms(rows: list[dict]) -> dict:
    """Rows of eval_results.kernel_ms -> {plan kernel name: mean ms over the rows}, largest first."""
    per: dict[str, float] = {}
    for r in rows:
        for recorded, ms in (r["kernel_ms"] or {}).items():
            k = _kernel_name(recorded)
            per[k] = per.get(k, 0.0) + float(ms)
    return {k: v / len(rows) for k, v in sorted(per.items(), key=lambda kv: -kv[1])} if rows else {}


def _kernel_name(recorded: str) -> str:
    """The plan's kernel name of a profiler record's: demangled C++ names carry a return type,
    template arguments and parameter types (`void k3_mm<64>(float*, int)`), extern "C" ones do not."""
    name = recorded.split("(")[0].split("<")[0].strip()
    return name.rsplit(" ", 1)[-1] if name else recorded


def population(store, problem: str, k: int = 4) -> list[dict]:
    """The k best live candidates of a problem (distinct sources), for lineage and for seeding."""
    return q.population_rows(store, problem, k, _LIVE)
