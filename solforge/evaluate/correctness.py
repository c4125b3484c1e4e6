"""Correctness, exactly SOL-ExecBench's rule per workload (docs/workload.md):

  an element matches when |out - ref| <= max_atol + max_rtol * |ref|;
  the workload passes when matched_ratio >= required_matched_ratio and, if max_error_cap is set,
  max |out - ref| <= max_error_cap.
NaN or Inf in either tensor fails (unless allow_negative_inf and both are -inf at that element); an
all-zero output where the reference is not zero fails. Relative error uses max_atol as the floor of
|ref|. Outputs are poisoned before every run so that elements a kernel never writes fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Comparison:
    ok: bool
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    matched_ratio: Optional[float] = None
    reason: str = ""

    def worse_than(self, other: Optional["Comparison"]) -> bool:
        if other is None:
            return True
        if self.ok != other.ok:
            return not self.ok
        return (self.max_abs_err or 0.0) > (other.max_abs_err or 0.0)


_FP4 = getattr(torch, "float4_e2m1fn_x2", None)


def _as_f32(t: torch.Tensor) -> torch.Tensor:
    if _FP4 is not None and t.dtype == _FP4:
        t = t.view(torch.uint8)  # packed FP4: compare the stored bytes (no arithmetic exists on it)
    return t.to(torch.float32)


def compare(out: torch.Tensor, ref: torch.Tensor, tol, name: str = "output") -> Comparison:
    """Compare one output tensor with its reference under a workload Tolerance."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, reason=f"{name}: shape {list(out.shape)} != reference "
                                        f"{list(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, reason=f"{name}: dtype {out.dtype} != reference {ref.dtype}")
    x, y = _as_f32(out), _as_f32(ref)
    if x.numel() == 0:
        return Comparison(True, 0.0, 0.0, 1.0)
    both_neg_inf = None
    if tol.allow_negative_inf:
        both_neg_inf = (x == float("-inf")) & (y == float("-inf"))
    bad_x, bad_y = ~torch.isfinite(x), ~torch.isfinite(y)
    if both_neg_inf is not None:
        bad_x &= ~both_neg_inf
        bad_y &= ~both_neg_inf
    if bool(bad_y.any()):
        what = "NaN" if bool(torch.isnan(y).any()) else "Inf"
        return Comparison(False, reason=f"{name}: the reference has {what} "
                                        f"({int(bad_y.sum())} elements)")
    if bool(bad_x.any()):
        n_nan = int(torch.isnan(x).sum())
        what = f"{n_nan} NaN" if n_nan else f"{int(bad_x.sum())} Inf"
        return Comparison(False, matched_ratio=1.0 - float(bad_x.sum()) / x.numel(),
                          reason=f"{name}: {what} of {x.numel()} elements (NaN also marks elements "
                                 "the kernel never wrote)")
    if both_neg_inf is not None and bool(both_neg_inf.any()):
        keep = ~both_neg_inf
        x, y = x[keep], y[keep]
        if x.numel() == 0:
            return Comparison(True, 0.0, 0.0, 1.0)
    ref_norm = float(torch.linalg.vector_norm(y))
    if ref_norm > 0 and float(torch.linalg.vector_norm(x)) == 0:
        return Comparison(False, ref_norm, ref_norm, 0.0,
                          reason=f"{name}: all zeros where the reference is not")
    err = (x - y).abs()
    max_abs = float(err.max())
    bound = tol.max_atol + tol.max_rtol * y.abs()
    exceed = int((err > bound).sum())
    matched = max(0.0, min(1.0, 1.0 - exceed / err.numel()))
    max_rel = float((err / y.abs().clamp(min=tol.max_atol if tol.max_atol > 0 else 1e-12)).max())
    ok = matched >= tol.required_matched_ratio
    reason = ""
    if not ok:
        reason = (f"{name}: matched ratio {matched:.6f} < required {tol.required_matched_ratio} "
                  f"(max_abs_err {max_abs:.4g}, atol {tol.max_atol}, rtol {tol.max_rtol})")
    if tol.max_error_cap is not None and max_abs > tol.max_error_cap:
        ok = False
        reason = f"{name}: max_abs_err {max_abs:.4g} > max_error_cap {tol.max_error_cap}"
    return Comparison(ok, max_abs, max_rel, matched, reason)


def compare_all(outs: dict, refs: dict, tol) -> Comparison:
    """All outputs of one call; the result is the first failure, else the worst passing output."""
    worst: Optional[Comparison] = None
    for name, ref in refs.items():
        if name not in outs:
            return Comparison(False, reason=f"{name}: missing from the candidate's outputs")
        c = compare(outs[name], ref, tol, name)
        if not c.ok:
            return c
        if c.worse_than(worst):
            worst = c
    return worst or Comparison(True, 0.0, 0.0, 1.0)


def poison_(t: torch.Tensor, round_index: int = 0) -> torch.Tensor:
    """Fill an output with values no correct kernel leaves behind: NaN for floats; for integers and
    bools a pattern that alternates between rounds, so an unwritten element fails in some round."""
    if t.numel() == 0:
        return t
    if t.dtype.is_floating_point and t.element_size() >= 2:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(round_index % 2 == 0)
    raw = t.view(torch.uint8)
    if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        raw.fill_(0x7F)  # NaN in E4M3FN and E5M2
        return t
    raw.fill_(0xA5 if round_index % 2 == 0 else 0x5A)
    return t


def allocate_outputs(rw, device, round_index: int = 0) -> dict[str, torch.Tensor]:
    from ..problem.dtypes import to_torch

    out = {}
    for name, spec in rw.definition.outputs.items():
        shape = rw.output_shapes[name]
        out[name] = poison_(torch.empty(shape or (), dtype=to_torch(spec.dtype), device=device),
                            round_index)
    return out


def normalize_reference_outputs(result, rw, device) -> dict[str, torch.Tensor]:
    """The reference's return value (tensor, tuple, dict or scalar) as {output name: tensor}, in the
    definition's dtypes."""
    from ..problem.dtypes import to_torch

    names = list(rw.definition.outputs)
    if isinstance(result, dict):
        items = {k: result[k] for k in names if k in result}
        missing = [k for k in names if k not in result]
        if missing:
            raise ValueError(f"reference returned a dict without {missing}")
    elif isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise ValueError(f"reference returned {len(result)} values, the definition has "
                             f"{len(names)} outputs")
        items = dict(zip(names, result))
    else:
        if len(names) != 1:
            raise ValueError(f"reference returned one value, the definition has {len(names)} outputs")
        items = {names[0]: result}
    out = {}
    for k, v in items.items():
        dt = to_torch(rw.definition.outputs[k].dtype)
        if not isinstance(v, torch.Tensor):
            v = torch.tensor(v, dtype=dt, device=device)
        out[k] = v.to(device)
        shape = rw.output_shapes[k]
        if out[k].dtype != dt:
            raise ValueError(f"reference output {k!r} is {out[k].dtype}, the definition says {dt}")
        if tuple(out[k].shape) != tuple(shape or ()):
            raise ValueError(f"reference output {k!r} has shape {list(out[k].shape)}, the "
                             f"definition says {list(shape or ())}")
    return out
