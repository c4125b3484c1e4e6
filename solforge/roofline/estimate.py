"""Counting one problem: FLOPs per math unit and minimum DRAM bytes per workload; T_sol per profile.

`count_problem(problem)` runs the reference of every workload under HybridMode (trace.py) and returns
`WorkloadCount`s, which do not depend on the GPU; `roofline(count, profile)` prices one on a profile:

    T_sol = max(sum_u FLOPs_u / peak_u,  bytes / DRAM bandwidth)

with `bytes` = every input the reference reads, read once (only the gathered part of an input it reads
through an index: paged KV caches), plus every output written once. The limiter is the larger term
(`memory`, or the unit with the largest share of the compute time).
"""

from __future__ import annotations

import enum
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import torch

from ..problem.dtypes import itemsize
from ..problem.loader import Problem
from ..problem.workload import ResolvedWorkload
from .hardware import HardwareProfile
from .inputs import build_inputs
from .trace import HybridMode, InputUse, Origins, nbytes, patch_cuda_init

COUNTER_VERSION = 2  # bump when the counting rules change: cached counts are keyed by it


class CountStatus(str, enum.Enum):
    OK = "ok"
    UNSUPPORTED = "unsupported"  # the reference could not be traced; reason says why


@dataclass
class WorkloadCount:
    uuid: str
    index: int
    status: CountStatus
    flops: dict[str, float] = field(default_factory=dict)  # unit -> FLOPs
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    input_bytes_declared: float = 0.0  # every input in full, for reference
    ops: int = 0
    seconds: float = 0.0
    reason: str = ""
    method: str = "trace"  # trace | analytic

    @property
    def bytes(self) -> float:
        return self.input_bytes + self.output_bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_json(cls, d: dict) -> "WorkloadCount":
        d = dict(d)
        d["status"] = CountStatus(d["status"])
        return cls(**d)


@dataclass
class Roofline:
    """One workload priced on one GPU profile (a row of the store's roofline table)."""

    problem: str
    workload_uuid: str
    workload_index: int
    gpu: str
    status: str
    t_sol_ms: Optional[float]
    t_compute_ms: Optional[float]
    t_memory_ms: Optional[float]
    limiter: str
    flops: dict[str, float]
    total_flops: float
    dram_bytes: float
    reason: str = ""
    latency_ms: float = 0.0


def _exec_reference(source: str, name: str) -> dict[str, Any]:
    mod: dict[str, Any] = {"__name__": f"solforge_reference_{name}"}
    exec(compile(source, f"<reference {name}>", "exec"), mod)  # noqa: S102 - the problem's own reference
    return mod


def count_workload(wl: ResolvedWorkload, index: int, module: dict[str, Any]) -> WorkloadCount:
    defn = wl.definition
    t0 = time.perf_counter()
    declared = sum(nbytes(wl.input_shapes[k], itemsize(s.dtype)) for k, s in defn.inputs.items()
                   if not s.is_scalar)
    out_bytes = sum(nbytes(wl.output_shapes[k], itemsize(s.dtype)) for k, s in defn.outputs.items()
                    if not s.is_scalar)
    torch.manual_seed(index)
    use = InputUse()
    origins = Origins()
    try:
        with HybridMode(counting=False, origins=origins):
            inputs = build_inputs(wl, module)
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor):
                use.mark(k, v)
        with HybridMode(counting=True, use=use, origins=origins) as mode:
            module["run"](**inputs)
    except Exception as e:  # noqa: BLE001 - any failure of a foreign reference is a reason, not a crash
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename.startswith("<reference")), "")
        return WorkloadCount(wl.uuid, index, CountStatus.UNSUPPORTED, input_bytes_declared=declared,
                             output_bytes=out_bytes, seconds=time.perf_counter() - t0,
                             reason=f"{type(e).__name__}: {str(e)[:300]} {where}".strip())
    in_bytes = 0.0
    for k, s in defn.inputs.items():
        if s.is_scalar:
            continue
        in_bytes += use.fraction(k) * nbytes(wl.input_shapes[k], itemsize(s.dtype))
    return WorkloadCount(wl.uuid, index, CountStatus.OK, dict(mode.counts.flops), in_bytes, out_bytes,
                         declared, mode.counts.ops, time.perf_counter() - t0)


def count_problem(problem: Problem) -> list[WorkloadCount]:
    patch_cuda_init()
    defn = problem.definition
    try:
        module = _exec_reference(defn.reference, defn.name)
    except Exception as e:  # noqa: BLE001
        return [WorkloadCount(w.uuid, i, CountStatus.UNSUPPORTED,
                              reason=f"reference does not import: {type(e).__name__}: {e}")
                for i, w in enumerate(problem.workloads)]
    from .analytic import analytic_count

    out = []
    for i, w in enumerate(problem.workloads):
        c = analytic_count(w, i)
        if c is not None:
            c.method = "analytic"
        out.append(c if c is not None else count_workload(w, i, module))
    return out


def roofline(problem: str, c: WorkloadCount, profile: HardwareProfile,
             measured: bool = False) -> Roofline:
    if c.status is not CountStatus.OK:
        return Roofline(problem, c.uuid, c.index, profile.name, c.status.value, None, None, None,
                        "", c.flops, sum(c.flops.values()), c.bytes, c.reason)
    per_unit: dict[str, float] = {}
    for unit, f in c.flops.items():
        real = profile.resolve_unit(unit)
        per_unit[real] = per_unit.get(real, 0.0) + f / profile.peak(unit, measured)
    t_compute = sum(per_unit.values())
    t_memory = c.bytes / profile.bandwidth(measured)
    if t_memory >= t_compute:
        limiter = "memory"
    else:
        limiter = max(per_unit, key=per_unit.get)
    t = profile.latency_s + max(t_compute, t_memory)
    return Roofline(problem, c.uuid, c.index, profile.name, c.status.value, t * 1e3, t_compute * 1e3,
                    t_memory * 1e3, limiter, c.flops, sum(c.flops.values()), c.bytes,
                    latency_ms=profile.latency_s * 1e3)
