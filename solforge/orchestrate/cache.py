"""The content cache: an identical candidate is never compiled or evaluated twice for the same thing.

Key: the candidate's source_hash (sources + params + launches), the problem (its workload set),
where the answer was produced: the GPU identity (model + driver) for timings, the arch for compiles,
and what produced it: the evaluator version (a hash of the code that validates, generates inputs,
launches, checks and times), so a fixed input generator or launcher never answers with a stale
verdict (016/017 once stayed "incorrect" from NaN references the generator had made).
The store is the ground truth: a finished attempt with that key answers for the new one, and no new
attempt row is written. Deterministic failures (invalid, compile errors, wrong answers) are answers
too: asking again gives the same failure.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..agents.outcome import AttemptOutcome, Outcome, WorkloadOutcome
from ..store import attempt_queries as q

_EVAL_FINAL = ("ok", "incorrect", "runtime_error", "timeout")
_PKG = Path(__file__).resolve().parent.parent
# the code an evaluation's answer depends on (besides the candidate, the problem and the GPU)
_EVALUATOR_CODE = ("evaluate/*.py", "compile/*.py", "agents/lab.py", "problem/*.py", "candidate.py",
                   "roofline/*.py")


@lru_cache(maxsize=1)
def evaluator_version() -> str:
    """sha256 (16 hex) of the evaluator's source files, in a stable order."""
    h = hashlib.sha256()
    for pattern in _EVALUATOR_CODE:
        for f in sorted(_PKG.glob(pattern)):
            h.update(f.relative_to(_PKG).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]
_COMPILE_FINAL = ("invalid", "compile_error")


def lookup(store, problem, source_hash: str, *, gpu_identity: str, arch: str,
           has_gpu: bool, evaluator: Optional[str] = None) -> Optional[tuple[str, Outcome]]:
    """(attempt id, its Outcome) of a finished attempt that answers for this candidate, or None.
    With `evaluator` (evaluator_version()), only answers of runs made by that evaluator count."""
    if not source_hash:
        return None
    kw = {"evaluator": evaluator}
    # compile-time answers hold for any GPU of the same arch
    row = q.compile_answer(store, problem.name, source_hash, arch=arch, outcomes=_COMPILE_FINAL, **kw)
    if row:
        return row["id"], _outcome(store, row, problem)
    if has_gpu:
        want = {w.uuid for w in problem.workloads}
        for r in q.eval_answers(store, problem.name, source_hash, gpu_identity=gpu_identity,
                                outcomes=_EVAL_FINAL, **kw):
            got = q.evaluated_workloads(store, r["id"])
            if want <= got or r["outcome"] != "ok" and got:
                return r["id"], _outcome(store, r, problem)
        return None
    row = q.compiled_answer(store, problem.name, source_hash, arch=arch, **kw)
    if row:
        return row["id"], _outcome(store, row, problem)
    return None


def _outcome(store, row: dict, problem) -> Outcome:
    status = AttemptOutcome(row["outcome"])
    msg = f"same source as attempt {row['id'][:8]}: {row['error'] or status.value}"
    evals = q.scored_results(store, row["id"])
    latest = {e["workload_uuid"]: e for e in evals}
    wls = [WorkloadOutcome(uuid=u, status=e["status"], correct=e["correct"], max_abs_err=e["max_abs_err"],
                           max_rel_err=e["max_rel_err"], matched_ratio=e["matched_ratio"],
                           median_ms=e["median_ms"], t_sol_ms=e["t_sol_ms"], t_base_ms=e["t_baseline_ms"],
                           sol_score=e["sol_score"], speedup=e["speedup"], error=e["message"] or "")
           for u, e in latest.items()]
    return Outcome(status, msg, workloads=wls)
