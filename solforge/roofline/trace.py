"""Run a reference at full size without doing its work: big float tensors live on the meta device.

`HybridMode` is a TorchDispatchMode that sees every aten op the reference runs and
- keeps small tensors (and all integer/bool index tensors) real on the CPU, so data-dependent control
  flow (`.item()`, `nonzero`, `tolist`, loops over indptr) sees real values;
- keeps big floating-point tensors on the meta device (shapes and dtypes only, no memory, no time);
- when an op mixes the two, runs it on meta;
- when an op needs values a meta tensor does not have (`.item()`, `nonzero`, boolean masks, comparisons
  or top-k that produce indices) and its inputs are small enough, fills the meta inputs with random
  numbers (standard normal, as the workloads' "random" inputs are) and runs it for real;
- rewrites `device="cuda"` to the CPU (this machine has no GPU);
- counts FLOPs per math unit (flops.op_flops) while `counting` is on;
- tracks how much of each named input the reference actually reads (`InputUse`): a paged KV cache of a
  million pages of which 8 are gathered costs 8 pages of DRAM traffic, not a million.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from .flops import op_flops

META = torch.device("meta")
CPU = torch.device("cpu")

# Float tensors with more elements than this are kept on meta.
SMALL_NUMEL = 1 << 16
# Meta inputs up to this many elements (all inputs of one op together) may be filled with random values
# when an op needs values; beyond it the op stays on meta or the trace fails.
MATERIALIZE_NUMEL = 1 << 23
# A reference that runs more aten ops than this is stopped (TraceTooLong) rather than timing out.
MAX_OPS = 200_000

_GATHER_SRC0 = {"index", "index_select", "gather", "take", "_unsafe_index", "take_along_dim"}


class TraceTooLong(RuntimeError):
    pass


@dataclass
class Counts:
    flops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    ops: int = 0
    materialized: int = 0


class InputUse:
    """Which fraction of each named input the ops read, following views, casts and gathers."""

    def __init__(self):
        self.tag: dict[int, tuple[str, float, torch.Tensor]] = {}  # id -> (root, coverage, tensor)
        self.read: dict[str, float] = defaultdict(float)

    def mark(self, name: str, t: torch.Tensor) -> None:
        self.tag[id(t)] = (name, 1.0, t)

    def fraction(self, name: str) -> float:
        return min(1.0, self.read.get(name, 0.0))

    def observe(self, func, name: str, args, out) -> None:
        tagged = [(a, self.tag[id(a)]) for a in _tensors(args) if id(a) in self.tag]
        if not tagged:
            return
        outs = [o for o in _tensors(out)]
        is_view = getattr(func, "is_view", False) or name in ("_to_copy", "clone", "contiguous",
                                                               "alias", "lift_fresh", "detach")
        for pos, (a, (root, cov, _)) in enumerate(tagged):
            if is_view and len(tagged) == 1 and outs:
                o = outs[0]
                scale = 1.0 if name == "view" and o.dtype != a.dtype else \
                    min(1.0, o.numel() / max(1, a.numel()))
                if name == "view" and o.dtype != a.dtype:
                    scale = 1.0
                self.tag[id(o)] = (root, cov * scale, o)
            elif name in _GATHER_SRC0 and a is args[0] and outs:
                self.read[root] += cov * min(1.0, outs[0].numel() / max(1, a.numel()))
            elif name == "embedding" and len(args) > 0 and a is args[0] and outs:
                self.read[root] += cov * min(1.0, outs[0].numel() / max(1, a.numel()))
            elif name in ("copy_", "fill_", "zero_") and a is args[0]:
                pass  # overwritten, not read
            else:
                self.read[root] += cov


def _tensors(x):
    flat, _ = tree_flatten(x)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _is_floatish(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def random_like_meta(t: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor with t's shape and dtype and plausible values (for ops that need values)."""
    shape = tuple(t.shape)
    if t.dtype == torch.bool:
        return torch.zeros(shape, dtype=torch.bool)
    if _is_floatish(t):
        try:
            return torch.randn(shape, dtype=torch.float32).to(t.dtype)
        except (RuntimeError, TypeError):
            return torch.randint(0, 256, shape, dtype=torch.uint8).view(t.dtype)
    return torch.zeros(shape, dtype=t.dtype)


def _to_meta(x):
    if isinstance(x, torch.Tensor) and not x.is_meta:
        return x.to(META)
    return x


def _fix_device(v):
    if isinstance(v, torch.device) and v.type not in ("cpu", "meta"):
        return CPU
    if isinstance(v, str) and (v.startswith("cuda") or v == "mps"):
        return CPU
    return v


class HybridMode(TorchDispatchMode):
    def __init__(self, counting: bool = False, use: InputUse | None = None):
        super().__init__()
        self.counting = counting
        self.counts = Counts()
        self.use = use

    # The mode is not re-entered while __torch_dispatch__ runs, so the ops below execute directly.
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs:
            kwargs = dict(kwargs, device=_fix_device(kwargs["device"]))
        self.counts.ops += 1
        if self.counts.ops > MAX_OPS:
            raise TraceTooLong(f"more than {MAX_OPS} aten ops")
        tensors = _tensors((args, kwargs))
        name = func._overloadpacket.__name__
        if not tensors:
            out = self._factory(func, args, kwargs)
        elif any(t.is_meta for t in tensors):
            out = self._mixed(func, name, args, kwargs, tensors)
        elif any(_is_floatish(t) for t in tensors):
            out = self._real_or_meta(func, args, kwargs)
        else:
            out = func(*args, **kwargs)  # integer/bool bookkeeping: always real
        if self.use is not None:
            self.use.observe(func, name, args, out)
        if self.counting:
            for unit, f in op_flops(func, args, kwargs, out):
                self.counts.flops[unit] += f
        return out

    def _factory(self, func, args, kwargs):
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == "meta":
            return func(*args, **kwargs)
        probe = func(*args, **dict(kwargs, device=META))
        big_float = any(_is_floatish(t) and t.numel() > SMALL_NUMEL for t in _tensors(probe))
        if big_float:
            return probe
        return func(*args, **kwargs)

    @staticmethod
    def _real_or_meta(func, args, kwargs):
        """Real inputs: run for real unless the result would be a big float tensor (probe on meta)."""
        try:
            probe = func(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs))
        except Exception:  # noqa: BLE001 - data-dependent shapes: only the real run can tell
            return func(*args, **kwargs)
        if any(_is_floatish(t) and t.numel() > SMALL_NUMEL for t in _tensors(probe)) \
                and not func._schema.is_mutable:
            return probe
        return func(*args, **kwargs)

    def _mixed(self, func, name, args, kwargs, tensors):
        small = sum(t.numel() for t in tensors if t.is_meta) <= MATERIALIZE_NUMEL
        if small and name not in ("copy_",) and self._needs_values(func, name, tensors):
            return self._real(func, args, kwargs)
        try:
            out = func(*tree_map(_to_meta, args), **tree_map(_to_meta, kwargs))
        except Exception:
            if not small:
                raise
            return self._real(func, args, kwargs)
        if small and any(not _is_floatish(o) for o in _tensors(out)) and \
                any(_is_floatish(t) and t.is_meta for t in tensors) and not getattr(func, "is_view", False):
            # indices / masks computed from fake floats: make them real so they can drive control flow
            return self._real(func, args, kwargs)
        return out

    @staticmethod
    def _needs_values(func, name, tensors) -> bool:
        return name in ("_local_scalar_dense", "nonzero", "masked_select", "unique_consecutive",
                        "_unique2", "_unique", "unique_dim", "bincount", "repeat_interleave",
                        "argwhere", "equal", "is_nonzero", "allclose") or \
            torch.Tag.dynamic_output_shape in func.tags and name not in ("index", "index_put")

    def _real(self, func, args, kwargs):
        self.counts.materialized += 1
        cache: dict[int, torch.Tensor] = {}

        def real(x):
            if isinstance(x, torch.Tensor) and x.is_meta:
                if id(x) not in cache:
                    cache[id(x)] = random_like_meta(x)
                return cache[id(x)]
            return x

        return func(*tree_map(real, args), **tree_map(real, kwargs))


def patch_cuda_init():
    """Let `device='cuda'` reach the dispatch mode instead of failing in torch's lazy CUDA init."""
    import torch.cuda

    if not getattr(torch.cuda, "_solforge_patched", False):
        torch.cuda._lazy_init = lambda: None  # type: ignore[assignment]
        torch.cuda._solforge_patched = True  # type: ignore[attr-defined]


def nbytes(shape, itemsize: float) -> float:
    return float(math.prod(shape)) * itemsize if shape is not None else 0.0
