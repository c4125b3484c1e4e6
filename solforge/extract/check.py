"""Faithfulness: the self-contained reference `run()` must reproduce the nn.Module's output.

Both run on the CPU at the small twin's shapes, on inputs made by the reference's own
`gen_inputs`. Shapes and dtypes must match the definition; values must match within the
workload tolerance, on every element (stricter than the evaluator's matched ratio).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import torch

from ..problem.definition import Definition
from ..problem.dtypes import to_torch
from .spec import BlockSpec


class CheckStatus(str, enum.Enum):
    PASSED = "passed"
    MISMATCH = "mismatch"
    ERROR = "error"


@dataclass
class CheckResult:
    name: str
    status: CheckStatus
    max_abs_err: float = 0.0
    max_rel_excess: float = 0.0  # max of |d| / (atol + rtol |ref|); <= 1 passes
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == CheckStatus.PASSED


def run_reference(reference: str, name: str, env: dict, seed: int = 0):
    ns: dict = {}
    exec(compile(reference, f"<reference {name}>", "exec"), ns)
    torch.manual_seed(seed)
    inputs = ns["gen_inputs"](dict(env), torch.device("cpu"))
    with torch.no_grad():
        out = ns["run"](**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                           for k, v in inputs.items()})
    return inputs, (out if isinstance(out, tuple) else (out,))


def check_spec(spec: BlockSpec, seed: int = 0) -> CheckResult:
    t0 = time.perf_counter()
    res = CheckResult(spec.name, CheckStatus.PASSED)
    try:
        defn = Definition.model_validate(spec.definition([], None))
        env = defn.resolve_axes(spec.small_axes)
        inputs, ref = run_reference(defn.reference, spec.name, env, seed)
        _shapes(defn, env, inputs, ref, res)
        if res.status == CheckStatus.PASSED:
            mod = spec.module_outputs({k: v.clone() for k, v in inputs.items()})
            _compare(spec, ref, mod, res)
    except Exception as e:  # noqa: BLE001 - a broken block is a result, reported with its cause
        res.status = CheckStatus.ERROR
        res.log.append(f"{type(e).__name__}: {e}")
    res.seconds = time.perf_counter() - t0
    return res


def _shapes(defn: Definition, env, inputs, ref, res: CheckResult) -> None:
    for name, spec in defn.inputs.items():
        t = inputs.get(name)
        want = defn.shape_of(spec, env)
        if t is None or tuple(t.shape) != want or t.dtype != to_torch(spec.dtype):
            res.status = CheckStatus.MISMATCH
            res.log.append(f"gen_inputs[{name}]: got {None if t is None else (tuple(t.shape), t.dtype)}, "
                           f"want {want} {spec.dtype}")
    if len(ref) != len(defn.outputs):
        res.status = CheckStatus.MISMATCH
        res.log.append(f"run() returned {len(ref)} tensors, definition has {len(defn.outputs)} outputs")
        return
    for (name, spec), t in zip(defn.outputs.items(), ref):
        want = defn.shape_of(spec, env)
        if tuple(t.shape) != want or t.dtype != to_torch(spec.dtype):
            res.status = CheckStatus.MISMATCH
            res.log.append(f"output {name}: got {tuple(t.shape)} {t.dtype}, want {want} {spec.dtype}")


def _compare(spec: BlockSpec, ref, mod, res: CheckResult) -> None:
    tol = spec.tol()
    atol, rtol = tol["max_atol"], tol["max_rtol"]
    if len(mod) != len(ref):
        res.status = CheckStatus.MISMATCH
        res.log.append(f"module gave {len(mod)} outputs, reference {len(ref)}")
        return
    for name, r, o in zip(spec.outputs, ref, mod):
        if r.shape != o.shape:
            res.status = CheckStatus.MISMATCH
            res.log.append(f"{name}: module shape {tuple(o.shape)} != reference {tuple(r.shape)}")
            continue
        if not r.is_floating_point():
            bad = int((r != o).sum())
            if bad:
                res.status = CheckStatus.MISMATCH
                res.log.append(f"{name}: {bad} of {r.numel()} integer elements differ")
            continue
        r64, o64 = r.double(), o.double()
        if not torch.isfinite(r64).all():
            res.status = CheckStatus.MISMATCH
            res.log.append(f"{name}: reference has non-finite values")
            continue
        d = (r64 - o64).abs()
        excess = (d / (atol + rtol * r64.abs())).max().item() if d.numel() else 0.0
        res.max_abs_err = max(res.max_abs_err, d.max().item() if d.numel() else 0.0)
        res.max_rel_excess = max(res.max_rel_excess, excess)
        if excess > 1.0 or not torch.isfinite(o64).all():
            res.status = CheckStatus.MISMATCH
            res.log.append(f"{name}: max |ref - module| {d.max().item():.3g} exceeds "
                           f"atol {atol} + rtol {rtol} |ref| (x{excess:.3g})")
