"""Typed results of one attempt as the agents see them: what the model and the planner are told.

These are the agents' own view, filled from solforge.compile's CompileResult and solforge.evaluate's
per-workload results by solforge.agents.lab; they map onto the attempts/scores rows the loop writes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Optional

from ..roofline.score import problem_speedup, problem_sol_score


class AttemptOutcome(str, Enum):
    """What an attempt came to (attempts.outcome). Not its place in the write sequence
    (queued -> compiled -> evaluated/failed/interrupted: attempts.status, solforge.store.AttemptStatus)."""

    OK = "ok"                        # correct on every workload and timed
    COMPILED = "compiled"            # compiled; not run (no GPU here)
    PARSE_ERROR = "parse_error"      # the worker's output was not a valid Candidate
    INVALID = "invalid"              # a Candidate, but it does not fit the problem (unknown tensor...)
    COMPILE_ERROR = "compile_error"
    INCORRECT = "incorrect"          # ran, but at least one workload does not match the reference
    RUNTIME_ERROR = "runtime_error"  # crashed, faulted or was rejected by a guard
    TIMEOUT = "timeout"
    SCREENED = "screened"            # correct on the few workloads it was screened on, but not faster
                                     # than the best known there: the rest were not run
    PENDING = "pending"              # written before evaluation; completed later

    @property
    def failed(self) -> bool:
        return self not in (AttemptOutcome.OK, AttemptOutcome.COMPILED, AttemptOutcome.PENDING,
                            AttemptOutcome.SCREENED)


@dataclass
class WorkloadOutcome:
    uuid: str
    status: str                       # the evaluator's per-workload status
    correct: Optional[bool] = None
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    matched_ratio: Optional[float] = None
    median_ms: Optional[float] = None
    t_sol_ms: Optional[float] = None
    t_base_ms: Optional[float] = None
    t_base_variant: Optional[str] = None
    sol_score: Optional[float] = None
    speedup: Optional[float] = None
    error: str = ""


@dataclass
class Outcome:
    status: AttemptOutcome
    message: str = ""                 # one line for humans (and the model)
    compile_log: str = ""
    compile_seconds: float = 0.0
    cubin_hash: str = ""
    workloads: list[WorkloadOutcome] = field(default_factory=list)
    gpu_seconds: float = 0.0
    eval_seconds: float = 0.0
    eval_rows: list = field(default_factory=list)  # the evaluator's own eval_results rows, if any
    hardware: Optional[dict] = None   # the hardware row the evaluation ran on (RunReport.hardware)
    # how the evaluation spent its time (RunReport.launch / .mode / .phases flattened): attempts.eval_*
    eval_launch: str = ""             # zygote | spawn
    eval_mode: str = ""               # full | screen | screen+full
    eval_phases: dict = field(default_factory=dict)  # {phase: seconds}, plus "total"

    @property
    def sol_score(self) -> Optional[float]:
        """The problem's SOL score (geomean over workloads), only when every workload is scored."""
        if self.status is not AttemptOutcome.OK or not self.workloads:
            return None
        return problem_sol_score(w.sol_score for w in self.workloads)

    @property
    def mean_speedup(self) -> Optional[float]:
        return problem_speedup(w.speedup for w in self.workloads) if self.workloads else None

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("eval_rows", None)
        d.pop("hardware", None)
        d["status"] = self.status.value
        d["sol_score"] = self.sol_score
        return d

