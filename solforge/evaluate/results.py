"""Typed results of the evaluator: one EvalResult per (candidate, workload), plus the hardware state.

Plain dataclasses, no torch, no pydantic: the CPU side (store, CLI) and the bare GPU box both import
this. Each EvalResult maps onto one row of the store's eval_results table (see to_row); the status
values are the store's EvalStatus (solforge/store/status.py), repeated here so that the GPU box never
imports solforge.store.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Optional


class EvalStatus(str, Enum):
    PASSED = "passed"                # correct, and timed
    INCORRECT = "incorrect"          # ran, output outside tolerance (or NaN/Inf, or unwritten elements)
    RUNTIME_ERROR = "runtime_error"  # launch failure, illegal address, exception, process crash
    TIMEOUT = "timeout"              # wall-clock limit: the process group was killed
    OOM = "oom"                      # out of device memory
    REJECTED = "rejected"            # a reward-hack guard tripped (the brief's "invalid")
    SKIPPED = "skipped"              # not run: an earlier fault lost the process, or unsupported

    def __str__(self) -> str:
        return self.value


# Which guard tripped, when status is REJECTED. Stored in the message as "[guard] ...".
class Guard(str, Enum):
    INTEGRITY = "integrity"          # evaluator or timer functions were replaced (monkey-patching)
    THREADS = "threads"              # the candidate left threads running
    LAZY_OUTPUT = "lazy_output"      # returned something that is not a plain torch.Tensor
    INPUT_MUTATION = "input_mutation"
    TORCH_CALL = "torch_call"        # a torch op where the language forbids it
    SIDE_STREAM = "side_stream"      # kernels on a stream other than the one it was given
    CACHING = "caching"              # faster on repeated inputs than on fresh ones
    SOL_FLOOR = "sol_floor"          # faster than the speed of light allows
    DEFERRED_WORK = "deferred_work"  # GPU work that appears after the call returned

    def __str__(self) -> str:
        return self.value


@dataclass
class HardwareInfo:
    gpu_name: str = ""
    driver: str = ""
    cuda_runtime: str = ""           # torch.version.cuda
    torch_version: str = ""
    cuda_bindings: str = ""
    sm_count: int = 0
    l2_bytes: int = 0
    memory_bytes: int = 0
    compute_capability: str = ""
    clocks: dict = field(default_factory=dict)  # {"sm_mhz", "mem_mhz", "sm_max_mhz", "mem_max_mhz", "source"}
    timing_method: str = ""          # "cupti" (torch.profiler/kineto activity records) or "events"

    @property
    def hardware_id(self) -> str:
        import hashlib

        key = json.dumps([self.gpu_name, self.driver, self.cuda_runtime, self.compute_capability])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def to_row(self) -> dict:
        """The store's hardware table."""
        return {"id": self.hardware_id, "gpu_name": self.gpu_name, "driver": self.driver,
                "cuda": self.cuda_runtime, "clocks": self.clocks,
                "details": {k: v for k, v in asdict(self).items()
                            if k not in ("gpu_name", "driver", "cuda_runtime", "clocks")}}

    @classmethod
    def from_dict(cls, d: dict) -> "HardwareInfo":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _finite(x: Optional[float]) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass
class EvalResult:
    workload_uuid: str
    status: EvalStatus
    problem: str = ""
    correct: bool = False
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    matched_ratio: Optional[float] = None
    median_ms: Optional[float] = None
    p10_ms: Optional[float] = None
    p90_ms: Optional[float] = None
    spread: Optional[float] = None   # (p90 - p10) / median
    n_reps: int = 0
    message: str = ""
    guard: Optional[str] = None      # Guard value when status is REJECTED
    rounds: int = 0                  # correctness rounds that ran
    timing_method: str = ""
    reference_label: str = ""        # e.g. "dequantized-reference" when the reference was substituted
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.status = EvalStatus(self.status)
        for name in ("max_abs_err", "max_rel_err", "matched_ratio", "median_ms", "p10_ms", "p90_ms",
                     "spread"):
            setattr(self, name, _finite(getattr(self, name)))

    @property
    def passed(self) -> bool:
        return self.status == EvalStatus.PASSED

    def to_json(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_json(cls, d: dict) -> "EvalResult":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_row(self, attempt_id: str | None = None, hardware_id: str | None = None) -> dict:
        """One row of the store's eval_results table."""
        msg = self.message
        if self.guard and not msg.startswith(f"[{self.guard}]"):
            msg = f"[{self.guard}] {msg}"
        if self.reference_label:
            msg = f"{msg} (reference: {self.reference_label})".strip()
        return {"attempt_id": attempt_id, "workload_uuid": self.workload_uuid,
                "status": self.status.value, "correct": self.correct,
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "matched_ratio": self.matched_ratio, "median_ms": self.median_ms,
                "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "spread": self.spread,
                "n_reps": self.n_reps, "message": msg[:4000], "hardware_id": hardware_id,
                "phases": self.extra.get("phases") or None,  # seconds per phase (migration 031)
                "kernel_ms": self.extra.get("kernel_ms") or None}  # per kernel (migration 032)


@dataclass
class RunReport:
    """What one evaluation of one candidate (one spawned process) produced."""

    problem: str
    results: list[EvalResult]
    hardware: Optional[HardwareInfo] = None
    wall_s: float = 0.0
    exit_code: Optional[int] = None
    killed: bool = False             # the runner killed the process group (timeout)
    stderr_tail: str = ""
    log: list[str] = field(default_factory=list)
    launch: str = ""                 # how the process started: "zygote" | "spawn" (runner.py)
    phases: dict = field(default_factory=dict)  # seconds per phase (phases.py), runner + driver
    mode: str = "full"               # "full" | "screen" (a subset of workloads, screening.py)

    @property
    def all_passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def to_json(self) -> dict:
        return {"problem": self.problem, "results": [r.to_json() for r in self.results],
                "hardware": asdict(self.hardware) if self.hardware else None,
                "wall_s": self.wall_s, "exit_code": self.exit_code, "killed": self.killed,
                "stderr_tail": self.stderr_tail, "log": self.log, "launch": self.launch,
                "phases": self.phases, "mode": self.mode}

    @classmethod
    def from_json(cls, d: dict) -> "RunReport":
        return cls(problem=d["problem"], results=[EvalResult.from_json(r) for r in d["results"]],
                   hardware=HardwareInfo.from_dict(d["hardware"]) if d.get("hardware") else None,
                   wall_s=d.get("wall_s", 0.0), exit_code=d.get("exit_code"),
                   killed=d.get("killed", False), stderr_tail=d.get("stderr_tail", ""),
                   log=d.get("log", []), launch=d.get("launch", ""),
                   phases=d.get("phases", {}), mode=d.get("mode", "full"))


def dumps_line(obj: Any) -> str:
    """One strict JSON line (NaN/Inf become null rather than invalid JSON)."""
    return json.dumps(_clean(obj), allow_nan=False, default=str)


def _clean(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, Enum):
        return o.value
    return o
