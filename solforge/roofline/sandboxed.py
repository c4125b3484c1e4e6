"""Counting a problem runs its reference.py, which is code from a dataset nobody here wrote: it runs
in the sandbox (solforge.sandbox), never in the process that asked.

    counts = count_in_sandbox(problem, timeout_s=600)          # list[WorkloadCount]
    many = count_batch_in_sandbox([p1, p2], timeout_s=600)     # one sandbox, a fork per problem

The problem crosses as JSON (its definition and workloads as ingested), the counts come back as JSON
(WorkloadCount.to_json). A reference that hangs, crashes, tries to start a process or open a socket
costs only its own problem: every workload of it is UNSUPPORTED with the reason in one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..problem.loader import Problem, problem_from_json, problem_to_json
from .estimate import CountStatus, WorkloadCount

DEFAULT_TIMEOUT_S = 900.0  # per problem; the slowest references trace in a few minutes on a loaded box
ENTRY = "solforge.roofline.sandboxed"


# ---- inside the sandbox ---------------------------------------------------------------------------
def warm() -> None:
    """Once per sandbox, before the per-problem forks: torch and the dispatch-mode machinery."""
    import gc

    import torch

    from .trace import HybridMode, patch_cuda_init, skip_dynamo_import

    torch.set_num_threads(1)
    patch_cuda_init()
    skip_dynamo_import()
    with HybridMode():
        torch.empty(2, 2, device="meta") + 1
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def count(payload: dict) -> dict:
    """Entry point (runs in the sandbox): {"counts": [WorkloadCount.to_json(), ...]}."""
    from .count import count_problem_here

    problem = problem_from_json(payload)
    return {"counts": [c.to_json() for c in count_problem_here(problem, fit=payload.get("fit", True))]}


# ---- in the caller --------------------------------------------------------------------------------
def _failed(problem: Problem, reason: str) -> list[WorkloadCount]:
    return [WorkloadCount(w.uuid, i, CountStatus.UNSUPPORTED, reason=reason)
            for i, w in enumerate(problem.workloads)]


def _read_paths(problem: Problem) -> list[str]:
    """The problem's folder (custom-input code and blobs may be read from there)."""
    src = Path(problem.source) if problem.source and "://" not in problem.source else None
    if src is None or not src.exists():
        return []
    return [str(src if src.is_dir() else src.parent)]


def _counts(problem: Problem, answer) -> tuple[list[WorkloadCount], bool]:
    """(counts, whether they may be cached): a sandbox failure is not the reference's fixed answer."""
    from ..sandbox import SandboxError

    if isinstance(answer, SandboxError):
        return _failed(problem, f"reference run refused or failed: {answer}"), answer.kind not in ("timeout", "crash")
    try:
        counts = [WorkloadCount.from_json(d) for d in answer["counts"]]
    except (KeyError, TypeError, ValueError) as e:
        return _failed(problem, f"reference run gave no usable counts ({type(e).__name__})"), False
    if len(counts) != len(problem.workloads):
        return _failed(problem, "reference run gave counts for the wrong number of workloads"), False
    return counts, True


def count_in_sandbox(problem: Problem, timeout_s: Optional[float] = None, fit: bool = True
                     ) -> list[WorkloadCount]:
    """Counts of one problem, its reference run in a fresh sandboxed process."""
    from ..sandbox import SandboxError, run_python

    payload = {**problem_to_json(problem), "fit": fit}
    try:
        answer = run_python(ENTRY, "count", payload, timeout_s=timeout_s or timeout_default(),
                            read_paths=_read_paths(problem))
    except SandboxError as e:
        answer = e
    return _counts(problem, answer)[0]


def count_batch_in_sandbox(problems: list[Problem], timeout_s: Optional[float] = None
                           ) -> list[tuple[list[WorkloadCount], bool]]:
    """(counts, cacheable) per problem, all in one sandbox (torch imported once, a fork per problem)."""
    from ..sandbox import SandboxError, run_python_batch

    if not problems:
        return []
    reads = sorted({p for pr in problems for p in _read_paths(pr)})
    try:
        answers = run_python_batch(ENTRY, "count", [problem_to_json(p) for p in problems],
                                   timeout_s=timeout_s or timeout_default(), warm="warm",
                                   read_paths=reads)
    except SandboxError as e:
        answers = [e] * len(problems)
    return [_counts(p, a) for p, a in zip(problems, answers)]


def timeout_default() -> float:
    try:
        return float(os.environ.get("SOLFORGE_REFERENCE_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def count_problem(problem: Problem, fit: bool = True, timeout_s: Optional[float] = None
                  ) -> list[WorkloadCount]:
    """Counts of every workload, the reference run in the sandbox: a reference is a dataset's code,
    so it never runs in the caller's process. A reference that hangs past timeout_s (default
    $SOLFORGE_REFERENCE_TIMEOUT_S or 900 s), crashes or is refused makes every workload UNSUPPORTED
    with the reason."""
    return count_in_sandbox(problem, timeout_s=timeout_s, fit=fit)
