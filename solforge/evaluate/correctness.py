"""Correctness, exactly SOL-ExecBench's rule per workload (docs/workload.md):

  an element matches when |out - ref| <= max_atol + max_rtol * |ref|;
  the workload passes when matched_ratio >= required_matched_ratio and, if max_error_cap is set,
  max |out - ref| <= max_error_cap.
NaN or Inf in either tensor fails (unless allow_negative_inf and both are -inf at that element); an
all-zero output where the reference is not zero fails. Relative error uses max_atol as the floor of
|ref|. Outputs are poisoned before every run so that elements a kernel never writes fail.
"""

from __future__ import annotations

import math
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


# elements compared at a time: the float32 copies and masks of one chunk, never of a whole output
# (a 4 GiB bool mask made 16 GiB float copies and as much again in temporaries)
CHUNK_ELEMENTS = 1 << 26


def compare(out: torch.Tensor, ref: torch.Tensor, tol, name: str = "output") -> Comparison:
    """Compare one output tensor with its reference under a workload Tolerance (chunk by chunk:
    the verdict and the numbers are those of the whole tensor)."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, reason=f"{name}: shape {list(out.shape)} != reference "
                                        f"{list(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, reason=f"{name}: dtype {out.dtype} != reference {ref.dtype}")
    n = out.numel()
    if n == 0:
        return Comparison(True, 0.0, 0.0, 1.0)
    xs, ys = out.reshape(-1), ref.reshape(-1)
    s = _Sums()
    for i in range(0, n, CHUNK_ELEMENTS):
        s.add(_as_f32(xs[i:i + CHUNK_ELEMENTS]), _as_f32(ys[i:i + CHUNK_ELEMENTS]), tol)
    if s.bad_y:
        what = "NaN" if s.nan_y else "Inf"
        return Comparison(False, reason=f"{name}: the reference has {what} ({s.bad_y} elements)")
    if s.bad_x:
        what = f"{s.nan_x} NaN" if s.nan_x else f"{s.bad_x} Inf"
        return Comparison(False, matched_ratio=1.0 - s.bad_x / n,
                          reason=f"{name}: {what} of {n} elements (NaN also marks elements "
                                 "the kernel never wrote)")
    if s.kept == 0:  # every element -inf in both, where that is allowed
        return Comparison(True, 0.0, 0.0, 1.0)
    if s.nonzero_y and not s.nonzero_x:
        ref_norm = sum(float(torch.linalg.vector_norm(_as_f32(ys[i:i + CHUNK_ELEMENTS]),
                                                      dtype=torch.float64) ** 2)
                       for i in range(0, n, CHUNK_ELEMENTS)) ** 0.5
        return Comparison(False, ref_norm, ref_norm, 0.0,
                          reason=f"{name}: all zeros where the reference is not")
    matched = max(0.0, min(1.0, 1.0 - s.exceed / s.kept))
    ok = matched >= tol.required_matched_ratio
    reason = ""
    if not ok:
        reason = (f"{name}: matched ratio {matched:.6f} < required {tol.required_matched_ratio} "
                  f"(max_abs_err {s.max_abs:.4g}, atol {tol.max_atol}, rtol {tol.max_rtol})")
    if tol.max_error_cap is not None and s.max_abs > tol.max_error_cap:
        ok = False
        reason = f"{name}: max_abs_err {s.max_abs:.4g} > max_error_cap {tol.max_error_cap}"
    return Comparison(ok, s.max_abs, s.max_rel, matched, reason)


class _Sums:
    """What compare needs of every element, added up chunk by chunk."""

    def __init__(self):
        self.bad_x = self.bad_y = self.nan_x = self.nan_y = 0
        self.kept = self.exceed = 0
        self.nonzero_x = self.nonzero_y = False
        self.max_abs = self.max_rel = 0.0

    def add(self, x: torch.Tensor, y: torch.Tensor, tol) -> None:
        # A passing chunk costs thirteen passes over its elements and one copy to the host: each
        # int()/float() of a GPU scalar is a synchronisation, and the checks of large outputs are
        # bound by the passes (benchmarks/eval_throughput.py's profile configuration). NaN or Inf in
        # either tensor makes the largest error NaN or Inf, so they are counted only then.
        if tol.allow_negative_inf:
            both_neg_inf = (x == float("-inf")) & (y == float("-inf"))
            if bool(both_neg_inf.any()):
                keep = ~both_neg_inf
                x, y = x[keep], y[keep]
        self.kept += x.numel()
        if x.numel() == 0:
            return
        err = torch.sub(x, y).abs_()
        ay = y.abs()
        limit = ay.mul(tol.max_rtol).add_(tol.max_atol)
        exceed = torch.gt(err, limit).sum()
        rel = torch.div(err, ay.clamp_(min=tol.max_atol if tol.max_atol > 0 else 1e-12)).max()
        f64 = torch.float64
        inf = float("inf")
        max_abs, exceed, max_rel, top_x, top_y = torch.stack([
            err.max().to(f64), exceed.to(f64), rel.to(f64),
            torch.linalg.vector_norm(x, inf).to(f64), torch.linalg.vector_norm(y, inf).to(f64),
        ]).tolist()
        if not math.isfinite(max_abs):
            # NaN/Inf somewhere, or two finite values whose difference overflows
            bad_x, bad_y = int((~torch.isfinite(x)).sum()), int((~torch.isfinite(y)).sum())
            self.bad_x += bad_x
            self.bad_y += bad_y
            if bad_x:
                self.nan_x += int(torch.isnan(x).sum())
            if bad_y:
                self.nan_y += int(torch.isnan(y).sum())
        if self.bad_x or self.bad_y:
            return  # the verdict is decided; the numbers below are not reported
        self.nonzero_x = self.nonzero_x or top_x > 0
        self.nonzero_y = self.nonzero_y or top_y > 0
        self.max_abs = max(self.max_abs, max_abs)
        self.exceed += int(exceed)
        self.max_rel = max(self.max_rel, max_rel)


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
        items = dict(zip(names, rw.definition.outputs_by_name(result)))
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
