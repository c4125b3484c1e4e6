"""The one writer of attempts and their results: queued -> compiled -> evaluated / failed (resume marks
the ones a dead run left behind interrupted, through Store.mark_interrupted).

Every path that records an attempt goes through here: the optimize loop, replay, and `solforge
evaluate --record`. What it writes comes from one result shape, the agents' Outcome (built from the
driver's RunReport by agents.evaluate_adapter.outcome_of_report): the evaluator's eval_results rows,
its hardware row, per-workload scores, the verdict (attempts.outcome) and the evaluation's launch,
mode and phases, all with the final status in one transaction, so a record is never half-written.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..agents.outcome import AttemptOutcome, Outcome
from ..store import attempt_queries as q
from ..store.status import AttemptStatus


def open_attempt(store, problem: str, cand, *, run_id: Optional[str], agent: str,
                 model: Optional[str] = None, parent: Optional[str] = None,
                 call_ids: Sequence[str] = ()) -> str:
    """Write the attempt (queued) before anything runs, and link the LLM calls that made it."""
    # a Candidate gives its language, params and source hash itself (Store.create_attempt)
    language = cand.get("language", "cuda") if isinstance(cand, dict) else None
    aid = store.create_attempt(problem, run_id=run_id, parent_id=parent, agent=agent, model=model,
                               language=language, candidate=cand)
    q.link_llm_calls(store, aid, list(call_ids))
    return aid


def compile_row(store, aid: str, out: Outcome, res) -> dict:
    """The compile_results row of a compile (res: CompileResult, or None when the compiler crashed)."""
    if res is None:
        return {"attempt_id": aid, "status": "error", "log": out.compile_log}
    return fit(store, "compile_results", res.to_row(aid))


def invalid_row(out: Outcome) -> dict:
    """The compile_results row of a candidate refused before the compiler (a static check)."""
    return {"status": "invalid", "log": out.message}


def mark_compiled(store, aid: str, row: dict) -> None:
    store.mark_attempt(aid, AttemptStatus.COMPILED, rows={"compile_results": [row]},
                       outcome=AttemptOutcome.COMPILED.value)


def interrupt(store, aid: str, reason: str) -> None:
    """Stopped before it finished, through no fault of its own (the wall budget ended while it
    waited for a GPU): a resumed run with the same key finishes it (resume.prepare lists it)."""
    store.mark_attempt(aid, AttemptStatus.INTERRUPTED, error=reason[:4000])


def finish(store, aid: str, out: Outcome, row: Optional[dict] = None) -> None:
    """Evaluated (the evaluator answered: eval_results rows) or failed (it never ran or never
    answered); with `row`, the compile_results row goes in the same transaction."""
    rows: dict[str, list] = {}
    if row is not None:
        rows["compile_results"] = [{**row, "attempt_id": aid}]
    if out.hardware:
        q.ensure_hardware(store, out.hardware)
    evals = [fit(store, "eval_results", {**r, "attempt_id": aid}) for r in out.eval_rows]
    if not evals and out.workloads:
        evals = [{"attempt_id": aid, "workload_uuid": w.uuid, "status": w.status,
                  "correct": w.correct, "max_abs_err": w.max_abs_err,
                  "max_rel_err": w.max_rel_err, "matched_ratio": w.matched_ratio,
                  "median_ms": w.median_ms, "message": w.error[:4000]} for w in out.workloads]
    if evals:
        rows["eval_results"] = evals
    scores = [{"attempt_id": aid, "workload_uuid": w.uuid, "speedup": w.speedup,
               "sol_score": w.sol_score, "t_kernel_ms": w.median_ms, "t_baseline_ms": w.t_base_ms,
               "t_sol_ms": w.t_sol_ms, "baseline_variant": w.t_base_variant or "eager"}
              for w in out.workloads if w.median_ms is not None and w.correct]
    if scores:
        rows["scores"] = scores
    final = AttemptStatus.EVALUATED if evals else AttemptStatus.FAILED
    # eval_launch / eval_mode / eval_phases (migration 031) ride on the status UPDATE, NULL when
    # nothing was evaluated
    store.mark_attempt(aid, final, rows=rows, outcome=out.status.value,
                       sol_score=out.sol_score, gpu_seconds=out.gpu_seconds,
                       eval_launch=out.eval_launch or None, eval_mode=out.eval_mode or None,
                       eval_phases=out.eval_phases or None,
                       error=None if out.status is AttemptOutcome.OK else
                       f"{out.status.value}: {out.message}"[:4000])


def fit(store, table: str, row: dict) -> dict:
    """Only the columns the table has (result objects carry more than the store keeps)."""
    cols = store.columns(table)
    return {k: v for k, v in row.items() if k in cols}
