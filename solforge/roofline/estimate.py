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
from . import build_fast
from .hardware import HardwareProfile
from .inputs import build_inputs
from .trace import HybridMode, InputUse, Origins, nbytes, patch_cuda_init

COUNTER_VERSION = 3  # bump when the counting rules change: cached counts are keyed by it


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
    method: str = "trace"  # trace | fit | analytic
    note: str = ""  # why a traced workload was not fitted (fit.py's fallback), for diagnostics

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


@dataclass
class TraceLog:
    """What one concrete trace saw, per counted aten op: the material fit.py compares across workloads.

    quantities: (op index, kind, key) -> amount, kind "f" (FLOPs on unit `key`), "r" (fraction of input
    `key` read), "w" (bytes written in place into input `key`). aliased: output name -> the input it
    returns after updating it in place (charged the written bytes, not its full size)."""

    names: list[str]
    quantities: dict[tuple[int, str, str], float]
    aliased: dict[str, str]
    ops: int = 0  # every aten op the trace ran (names holds only those that count)
    lines: list[tuple] = field(default_factory=list)  # reference call path (lines) of each op


def _quantities(log: list) -> dict[tuple[int, str, str], float]:
    q: dict[tuple[int, str, str], float] = {}
    for i, (_name, flops, reads, _line) in enumerate(log):
        for unit, f in flops:
            k = (i, "f", unit)
            q[k] = q.get(k, 0.0) + f
        for kind, root, amount in reads:
            k = (i, kind, root)
            q[k] = q.get(k, 0.0) + amount
    return q


def _aliased_outputs(defn, result, use: InputUse) -> dict[str, str]:
    """Outputs that are an input (whole, not a view of part of it) the reference wrote into in place."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    names = [k for k, s in defn.outputs.items()]
    if len(outs) != len(names):
        return {}
    aliased = {}
    for k, o in zip(names, outs):
        tag = use.root_of(o)
        if tag is not None and tag[2] and tag[1] >= 1.0 and use.written.get(tag[0], 0.0) > 0:
            aliased[k] = tag[0]
    return aliased


def finish_count(wl: ResolvedWorkload, index: int, flops: dict[str, float], read: dict[str, float],
                 written: dict[str, float], aliased: dict[str, str], ops: int, seconds: float,
                 method: str = "trace") -> WorkloadCount:
    """A WorkloadCount from per-workload totals: bytes = inputs read (each at most once) + outputs
    written once, where an output that is an input updated in place costs only the bytes written."""
    defn = wl.definition
    in_bytes = declared = out_bytes = 0.0
    for k, s in defn.inputs.items():
        if s.is_scalar:
            continue
        full = nbytes(wl.input_shapes[k], itemsize(s.dtype))
        declared += full
        in_bytes += min(1.0, read.get(k, 0.0)) * full
    for k, s in defn.outputs.items():
        if s.is_scalar:
            continue
        full = nbytes(wl.output_shapes[k], itemsize(s.dtype))
        root = aliased.get(k)
        out_bytes += min(full, written.get(root, 0.0)) if root is not None else full
    return WorkloadCount(wl.uuid, index, CountStatus.OK, {u: f for u, f in flops.items() if f},
                         in_bytes, out_bytes, declared, ops, seconds, method=method)


def declared_bytes(wl: ResolvedWorkload) -> tuple[float, float]:
    """(every input in full, every output) in bytes: what an unsupported workload reports."""
    defn = wl.definition
    declared = sum(nbytes(wl.input_shapes[k], itemsize(s.dtype)) for k, s in defn.inputs.items()
                   if not s.is_scalar)
    out_bytes = sum(nbytes(wl.output_shapes[k], itemsize(s.dtype)) for k, s in defn.outputs.items()
                    if not s.is_scalar)
    return declared, out_bytes


def trace_workload(wl: ResolvedWorkload, index: int,
                   module: dict[str, Any]) -> tuple[WorkloadCount, Optional[TraceLog]]:
    """Run the reference of one workload under HybridMode: its count and its per-op log."""
    defn = wl.definition
    t0 = time.perf_counter()
    torch.manual_seed(index)
    use = InputUse()
    origins = Origins()
    log: list = []
    try:
        if defn.custom_inputs_entrypoint and build_fast.ENABLED:
            # custom builders loop per element: torch-function level, native where exact (build_fast.py)
            inputs, _how = build_fast.build_fast(lambda: build_inputs(wl, module), origins, index)
        else:
            with HybridMode(counting=False, origins=origins):
                inputs = build_inputs(wl, module)
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor):
                use.mark(k, v)
        with HybridMode(counting=True, use=use, origins=origins, log=log) as mode:
            result = module["run"](**inputs)
        aliased = _aliased_outputs(defn, result, use)
    except Exception as e:  # noqa: BLE001 - any failure of a foreign reference is a reason, not a crash
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename.startswith("<reference")), "")
        declared, out_bytes = declared_bytes(wl)
        return WorkloadCount(wl.uuid, index, CountStatus.UNSUPPORTED, input_bytes_declared=declared,
                             output_bytes=out_bytes, seconds=time.perf_counter() - t0,
                             reason=f"{type(e).__name__}: {str(e)[:300]} {where}".strip()), None
    count = finish_count(wl, index, dict(mode.counts.flops), dict(use.read), dict(use.written), aliased,
                         mode.counts.ops, time.perf_counter() - t0)
    return count, TraceLog([e[0] for e in log], _quantities(log), aliased, mode.counts.ops,
                           [e[3] for e in log])


def count_workload(wl: ResolvedWorkload, index: int, module: dict[str, Any]) -> WorkloadCount:
    return trace_workload(wl, index, module)[0]


def count_problem(problem: Problem, fit: bool = True, timeout_s: Optional[float] = None
                  ) -> list[WorkloadCount]:
    """Counts of every workload, the reference run in the sandbox (sandboxed.py): a reference is a
    dataset's code, so it never runs in the caller's process. A reference that hangs past timeout_s
    (default $SOLFORGE_REFERENCE_TIMEOUT_S or 900 s), crashes or is refused makes every workload
    UNSUPPORTED with the reason."""
    from .sandboxed import count_in_sandbox

    return count_in_sandbox(problem, timeout_s=timeout_s, fit=fit)


def count_problem_here(problem: Problem, fit: bool = True) -> list[WorkloadCount]:
    """Counts of every workload, the reference run IN THIS PROCESS: only for the sandbox's entry point
    (sandboxed.count). fit=True traces a few workloads and predicts the others from per-op
    monomial fits checked on an extra traced workload (fit.py); it falls back to tracing each workload
    whenever the fit is not exact. fit=False traces every workload."""
    patch_cuda_init()
    defn = problem.definition
    try:
        module = _exec_reference(defn.reference, defn.name)
    except Exception as e:  # noqa: BLE001
        return [WorkloadCount(w.uuid, i, CountStatus.UNSUPPORTED,
                              reason=f"reference does not import: {type(e).__name__}: {e}")
                for i, w in enumerate(problem.workloads)]
    from .analytic import analytic_count
    from .fit import count_fitted

    out: list[Optional[WorkloadCount]] = []
    todo = []
    for i, w in enumerate(problem.workloads):
        c = analytic_count(w, i)
        if c is not None:
            c.method = "analytic"
        else:
            todo.append(i)
        out.append(c)
    if todo:
        traced = count_fitted([problem.workloads[i] for i in todo], todo, module) if fit else \
            [count_workload(problem.workloads[i], i, module) for i in todo]
        for i, c in zip(todo, traced):
            out[i] = c
    return out  # type: ignore[return-value]


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
