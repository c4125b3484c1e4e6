"""Building a workload's custom inputs fast: torch-function level, native where HybridMode would be.

A custom-inputs builder often fills index tensors element by element (`for i in range(T): sel[i] =
torch.randperm(E)[:k]`, `grid[b, i, 0] = t`): tens of thousands of tiny integer ops per workload.
Under HybridMode (a TorchDispatchMode) each aten op costs ~100 us of Python dispatch machinery, so
those loops took 1-5 s per traced workload (L2 012, 013, 034: a third of the whole cold run).

`FastBuild` is a TorchFunctionMode (one cheap Python call per torch function, not per aten op) that
runs a call natively -- no dispatch mode at all -- when HybridMode would have done exactly the same,
and hands every other call to HybridMode, unchanged:

- a call with meta tensors among its inputs, or float/int8 inputs of 16 bits or fewer (or carrying a
  precision origin): HybridMode (it fakes, materialises and tags those);
- a call without tensor inputs (a factory): HybridMode the first time for those exact arguments; when
  that gave small real tensors only, the same call runs natively afterwards (HybridMode's factory
  runs it natively for small results too, after a meta probe);
- any other call (real integer/bool/fp32 tensors only) runs natively; if it has a float input (or
  one of more than BIG_INDEX_NUMEL elements) and produced a new tensor HybridMode would have kept fake
  (a float of more than SMALL_NUMEL elements, any tensor of more than BIG_INDEX_NUMEL), the build is
  abandoned (`Fallback`) and redone under HybridMode from the same seed; so is the build when a call
  on small integer/bool tensors made a big float (HybridMode computes the op for real but may fake what
  torch does next with it); a call that names a float dtype on integer data (`packed.view(float4)`)
  goes to HybridMode directly.

Any exception abandons the fast build the same way, so the inputs are always what HybridMode builds.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from .trace import BIG_INDEX_NUMEL, SMALL_NUMEL, HybridMode, Origins, _fix_device, _is_floatish, _tensors

# Native calls allowed in one build (HybridMode's MAX_BUILD_OPS counts aten ops; a torch call is
# one or a few of them): past it the build is redone under HybridMode, which enforces its own budget.
ENABLED = True  # off: every build under HybridMode (the comparison in tests and benchmarks)
MAX_NATIVE_CALLS = 1_000_000
MAX_FACTORY_KEYS = 10_000  # distinct factory calls remembered as native (a loop over arange(i): many)


class Fallback(RuntimeError):
    """The fast build cannot guarantee HybridMode's result: redo the build under HybridMode."""


_SETITEM = torch.Tensor.__setitem__


def _big(t: torch.Tensor) -> bool:
    n = t.numel()
    return n > BIG_INDEX_NUMEL or (n > SMALL_NUMEL and _is_floatish(t))


def _float_dtype_arg(args, kwargs) -> bool:
    for a in args:
        if isinstance(a, torch.dtype) and (a.is_floating_point or a.is_complex):
            return True
    d = kwargs.get("dtype") if kwargs else None
    return isinstance(d, torch.dtype) and (d.is_floating_point or d.is_complex)


def _low_precision(t: torch.Tensor, origins: Origins) -> bool:
    """Whether HybridMode's Origins could tag what this tensor flows into (rank <= 2: 16-bit or lower
    float data, int8, or a tensor already tagged)."""
    if t.is_floating_point() or t.dtype == torch.int8:
        return origins.rank(t) <= 2
    return False


class FastBuild(TorchFunctionMode):
    def __init__(self, hybrid: HybridMode):
        super().__init__()
        self.hybrid = hybrid
        self.origins = hybrid.origins
        self.native_factories: set = set()  # (func, args, kwargs) keys HybridMode ran natively
        self.native_calls = 0
        self.delegated = 0

    def _delegate(self, func: Callable, args, kwargs):
        self.delegated += 1
        with self.hybrid:
            return func(*args, **kwargs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            if "device" in kwargs:
                kwargs = dict(kwargs, device=_fix_device(kwargs["device"]))
        else:
            kwargs = {}
        tensors = _tensors(args)
        if kwargs:
            tensors += _tensors(kwargs)
        if not tensors:
            try:
                key = (func, args, tuple(sorted(kwargs.items())))
                hash(key)
            except TypeError:
                return self._delegate(func, args, kwargs)
            if key in self.native_factories:
                return self._native(func, args, kwargs)
            out = self._delegate(func, args, kwargs)
            outs = _tensors(out) if not isinstance(out, torch.Tensor) else [out]
            if outs and all(not o.is_meta and not _big(o) for o in outs) and \
                    len(self.native_factories) < MAX_FACTORY_KEYS:
                self.native_factories.add(key)
            return out
        origins = self.origins
        checked = False  # HybridMode computes ops on small integer/bool tensors for real, whatever
        # they make; ops with a float or a huge input are probed and made fake when the result is big
        for t in tensors:
            if t.is_meta or _low_precision(t, origins):
                return self._delegate(func, args, kwargs)
            if not checked and (_is_floatish(t) or t.numel() > BIG_INDEX_NUMEL):
                checked = True
        if func is _SETITEM and not checked and len(args) == 3:
            x, key, value = args
            if isinstance(key, torch.Tensor) and key.dtype == torch.bool and key.shape == x.shape and \
                    type(value) in (int, bool) and x.dtype != torch.bool and not x.is_floating_point() and \
                    not x.is_complex() and torch.iinfo(x.dtype).min <= value <= torch.iinfo(x.dtype).max:
                # `result[mask] = 3` into an integer tensor (the NVFP4 encoders: 16 masks of 4 M
                # elements): masked_fill_ gives the same tensor without listing the mask's positions
                self.native_calls += 1
                x.masked_fill_(key, value)
                return None
        if not checked and _float_dtype_arg(args, kwargs):
            # integer data made float (`packed.view(torch.float4_e2m1fn_x2)`): torch may add aten ops
            # on the float result (a detach) that HybridMode makes fake when big
            return self._delegate(func, args, kwargs)
        out = self._native(func, args, kwargs)
        for o in ([out] if isinstance(out, torch.Tensor) else _tensors(out) if isinstance(out, (tuple, list))
                  else ()):
            if (_big(o) if checked else (_is_floatish(o) and o.numel() > SMALL_NUMEL)) and \
                    not any(o is t for t in tensors):
                raise Fallback(f"{getattr(func, '__name__', func)} made a tensor HybridMode may keep fake")
        return out

    def _native(self, func, args, kwargs):
        self.native_calls += 1
        if self.native_calls > MAX_NATIVE_CALLS:
            raise Fallback("too many calls")
        return func(*args, **kwargs)


def build_fast(build: Callable[[], Any], origins: Origins, seed: int) -> tuple[Any, str]:
    """build() under FastBuild, else (any exception) again under HybridMode from the same seed: the
    inputs, and "fast" or why the fast build was abandoned."""
    torch.manual_seed(seed)
    hybrid = HybridMode(counting=False, origins=origins)
    try:
        with FastBuild(hybrid):
            return build(), "fast"
    except Exception as e:  # noqa: BLE001 - HybridMode decides (and reports a genuine failure)
        why = f"{type(e).__name__}: {str(e)[:120]}"
    torch.manual_seed(seed)
    with HybridMode(counting=False, origins=origins):
        return build(), why
