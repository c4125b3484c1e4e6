"""Python branches on a float equality of device values, traced by assumption and checked at run time.

`if scale == 0.0: scale = torch.tensor(1.0)` (a degenerate-case fix-up) reads a device value in
Python: the trace cannot follow it. For a 1-element result of `==` / `!=` with a floating operand,
the trace takes the overwhelmingly likely outcome (a computed float equals an exact value: no;
differs: yes) and records the condition. When the traced function returns, every floating output
becomes `where(all assumptions held, output, NaN)`: on the rare inputs where an assumption fails the
candidate's outputs are NaN (the check refuses them) instead of silently following the other path.
Any other data-dependent `bool(tensor)` still stops the trace.
"""

from __future__ import annotations

from typing import Any

NOT_HANDLED = object()


class AssumedBranches:
    """Per-trace state: equality results seen (by tensor id) and the conditions assumed."""

    def __init__(self):
        self.eq_kind: dict[int, tuple[Any, bool]] = {}   # id -> (tensor, True for ==, False for !=)
        self.held: list = []                             # 0-d bool tensors that must be true

    def intercept(self, func, args, kwargs):
        import torch

        eqs = (torch.Tensor.__eq__, torch.eq, torch.Tensor.eq)
        nes = (torch.Tensor.__ne__, torch.ne, torch.Tensor.ne)
        if func in eqs or func in nes:
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.dim() <= 1 \
                    and _static_numel(out) == 1 and any(
                        isinstance(a, torch.Tensor) and a.is_floating_point() for a in args[:2]):
                self.eq_kind[id(out)] = (out, func in eqs)
            return out
        if func is torch.Tensor.__bool__ and args and id(args[0]) in self.eq_kind:
            t, is_eq = self.eq_kind[id(args[0])]
            if t is args[0]:
                # == assumed false, != assumed true: the condition that must hold is ~t or t
                self.held.append(torch.logical_not(t).reshape(()) if is_eq else t.reshape(()))
                return not is_eq
        return NOT_HANDLED

    def poison(self, result):
        """The traced function's outputs, each floating one NaN unless every assumption held."""
        import torch

        if not self.held:
            return result
        ok = self.held[0]
        for c in self.held[1:]:
            ok = torch.logical_and(ok, c)

        def one(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return torch.where(ok, x, torch.full((), float("nan"), dtype=x.dtype))
            return x
        if isinstance(result, (tuple, list)):
            return type(result)(one(x) for x in result)
        if isinstance(result, dict):
            return {k: one(v) for k, v in result.items()}
        return one(result)


def _static_numel(t) -> int:
    """The element count when every dim is a plain int (int() of a symbolic size would guard)."""
    n = 1
    for s in t.shape:
        if not isinstance(s, int):
            return -1
        n *= s
    return n
