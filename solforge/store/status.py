"""Status values stored in DuckDB text columns. Code compares against these, never bare strings.

Each is a str Enum, so `AttemptStatus.QUEUED == "queued"` and the stored text is `.value`.
"""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    def __str__(self) -> str:  # f"{status}" gives the stored text, not "AttemptStatus.QUEUED"
        return self.value


class AttemptStatus(_StrEnum):
    QUEUED = "queued"            # row written, nothing compiled yet
    COMPILED = "compiled"        # cubins exist; evaluation not finished
    EVALUATED = "evaluated"      # eval_results written (pass or fail per workload)
    FAILED = "failed"            # compile error, crash, rejected: see attempts.error
    INTERRUPTED = "interrupted"  # its run died while it was queued or compiled

    @property
    def is_final(self) -> bool:
        return self in (AttemptStatus.EVALUATED, AttemptStatus.FAILED, AttemptStatus.INTERRUPTED)


# Allowed moves; a final status never changes (a re-evaluation is a new attempt with parent_id).
ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    AttemptStatus.QUEUED: frozenset({AttemptStatus.COMPILED, AttemptStatus.EVALUATED,
                                     AttemptStatus.FAILED, AttemptStatus.INTERRUPTED}),
    AttemptStatus.COMPILED: frozenset({AttemptStatus.EVALUATED, AttemptStatus.FAILED,
                                       AttemptStatus.INTERRUPTED}),
    AttemptStatus.EVALUATED: frozenset(),
    AttemptStatus.FAILED: frozenset(),
    AttemptStatus.INTERRUPTED: frozenset(),
}


class RunStatus(_StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class CompileStatus(_StrEnum):
    OK = "ok"
    ERROR = "error"          # compiler rejected the source; log has why
    TIMEOUT = "timeout"
    INVALID = "invalid"      # the candidate itself is malformed (never reached the compiler)


class EvalStatus(_StrEnum):
    PASSED = "passed"                # correct, and timed
    INCORRECT = "incorrect"          # ran, output outside tolerance
    RUNTIME_ERROR = "runtime_error"  # launch failure, illegal address, exception
    TIMEOUT = "timeout"
    OOM = "oom"                      # out of device memory (evaluator)
    REJECTED = "rejected"            # e.g. faster than the SOL floor, or a guard tripped
    SKIPPED = "skipped"              # not run (earlier failure, unsupported workload)


class BaselineVariant(_StrEnum):
    EAGER = "eager"      # the PyTorch reference as written
    COMPILE = "compile"  # torch.compile of the reference


class LlmCallStatus(_StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"


ALL_ENUMS = (AttemptStatus, RunStatus, CompileStatus, EvalStatus, BaselineVariant, LlmCallStatus)
