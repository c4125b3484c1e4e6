"""Trace: one benchmark run, or a workload alone (SOL-ExecBench / FlashInfer-Trace docs/trace.md).

A JSONL line `{definition, solution, workload, evaluation}`. With solution and evaluation null it is a
"workload trace": how FlashInfer-Trace ships its workloads. The evaluation's correctness and
performance blocks must be present or absent according to its status (the documented table).
"""

from __future__ import annotations

from enum import Enum
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .workload import Workload


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class EvaluationStatus(str, Enum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    REWARD_HACK = "REWARD_HACK"
    INVALID_REFERENCE = "INVALID_REFERENCE"


class Correctness(_Model):
    max_relative_error: float = Field(default=0.0, ge=0.0)
    max_absolute_error: float = Field(default=0.0, ge=0.0)
    has_nan: bool = False
    has_inf: bool = False


class Performance(_Model):
    latency_ms: float = Field(ge=0.0)
    reference_latency_ms: float = Field(ge=0.0)
    speedup_factor: float = Field(ge=0.0)


class Environment(_Model):
    hardware: str = Field(min_length=1)
    libs: dict[str, str] = Field(default_factory=dict)


# status -> (correctness required?, performance required?); None in the docs' table means "must be absent"
_NULLABLE = {EvaluationStatus.PASSED: (True, True),
             EvaluationStatus.INCORRECT_NUMERICAL: (True, False)}


class Evaluation(_Model):
    status: EvaluationStatus
    log: str = ""
    correctness: Optional[Correctness] = None
    performance: Optional[Performance] = None
    environment: Environment
    timestamp: str = Field(min_length=1)

    @model_validator(mode="after")
    def _blocks_match_status(self) -> "Evaluation":
        want_c, want_p = _NULLABLE.get(self.status, (False, False))
        for name, want in (("correctness", want_c), ("performance", want_p)):
            have = getattr(self, name) is not None
            if have != want:
                raise ValueError(f"{name}: must be {'present' if want else 'absent'} when status is "
                                 f"{self.status.value}")
        return self


class Trace(_Model):
    definition: str = Field(min_length=1)
    workload: Workload
    solution: Optional[str] = None
    evaluation: Optional[Evaluation] = None

    @field_validator("solution")
    @classmethod
    def _nonempty(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.strip():
            raise ValueError("solution name is empty")
        return v

    @property
    def is_workload_trace(self) -> bool:
        return self.solution is None and self.evaluation is None

    @property
    def passed(self) -> bool:
        return self.evaluation is not None and self.evaluation.status is EvaluationStatus.PASSED
