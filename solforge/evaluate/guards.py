"""Reward-hack guards. Each raises GuardTripped(guard, message); the driver turns that into a REJECTED
result naming the guard. Every guard is proven by a file in tests/adversarial/.

- integrity: the evaluator's own functions and the timers it could rely on keep their identity
  (snapshot taken before any candidate code is loaded, checked after every call).
- threads: a call must not leave Python threads behind (work finished later would escape timing).
- lazy outputs: returned outputs must be exactly torch.Tensor (no subclass that computes on read).
- input mutation: inputs are compared bit for bit with a copy taken before the call.
- torch calls: a host-side (Python) candidate may not call torch ops for the answer.
- side streams: every kernel of a call must run on the stream it was given.
- caching: a call on rotated inputs must not be much faster than on freshly made inputs.
- SOL floor: a time below settings.sol_floor_fraction x T_sol is impossible, hence a bug or a hack.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Iterable, Optional

import torch

from .results import Guard


class GuardTripped(Exception):
    def __init__(self, guard: Guard, message: str):
        self.guard = Guard(guard)
        self.message = message
        super().__init__(f"[{self.guard.value}] {message}")


# ── integrity ────────────────────────────────────────────────────────────────────────────────────
def _critical_callables() -> dict[str, Any]:
    import torch.cuda

    from . import caching_probe, correctness, guards, refcache, timing

    items: dict[str, Any] = {
        "time.perf_counter": (time, "perf_counter"), "time.perf_counter_ns": (time, "perf_counter_ns"),
        "time.time": (time, "time"), "time.monotonic": (time, "monotonic"),
        "torch.cuda.synchronize": (torch.cuda, "synchronize"),
        "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time"),
        "torch.cuda.Event.record": (torch.cuda.Event, "record"),
        "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize"),
        "torch.cuda._sleep": (torch.cuda, "_sleep"),
        "torch.equal": (torch, "equal"), "torch.isfinite": (torch, "isfinite"),
        "torch.Tensor.fill_": (torch.Tensor, "fill_"), "torch.Tensor.zero_": (torch.Tensor, "zero_"),
        "torch.Tensor.clone": (torch.Tensor, "clone"),
    }
    try:
        import torch.profiler as tp

        items["torch.profiler.profile"] = (tp, "profile")
    except Exception:  # noqa: BLE001
        pass
    for mod in (correctness, guards, timing, caching_probe, refcache):
        for name, obj in vars(mod).items():
            if callable(obj) and getattr(obj, "__module__", None) == mod.__name__:
                items[f"{mod.__name__}.{name}"] = (mod, name)
                if isinstance(obj, type):
                    for attr, val in vars(obj).items():
                        if callable(val):
                            items[f"{mod.__name__}.{name}.{attr}"] = (obj, attr)
    return items


class Integrity:
    """Identity of the functions measurement and correctness depend on, taken before candidate code
    is loaded. check() raises GuardTripped(INTEGRITY) naming what was replaced."""

    def __init__(self, extra: Optional[dict[str, tuple[Any, str]]] = None):
        self._where = _critical_callables()
        if extra:
            self._where.update(extra)
        self._ids = {k: id(getattr(owner, attr, None)) for k, (owner, attr) in self._where.items()}

    def check(self) -> None:
        changed = [k for k, (owner, attr) in self._where.items()
                   if id(getattr(owner, attr, None)) != self._ids[k]]
        if changed:
            raise GuardTripped(Guard.INTEGRITY, "replaced after the candidate was loaded: "
                               + ", ".join(sorted(changed)[:8]))


# ── threads ──────────────────────────────────────────────────────────────────────────────────────
def python_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def check_threads(before: set[int]) -> None:
    new = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    if new:
        raise GuardTripped(Guard.THREADS, f"the call left {len(new)} thread(s) running: "
                           + ", ".join(t.name for t in new[:4]))


# ── outputs and inputs ───────────────────────────────────────────────────────────────────────────
def check_plain_tensors(values: Iterable[Any], what: str = "output") -> None:
    for v in values:
        if type(v) is not torch.Tensor:
            raise GuardTripped(Guard.LAZY_OUTPUT, f"{what} is {type(v).__module__}."
                               f"{type(v).__qualname__}, not torch.Tensor")


def snapshot_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(-1).view(torch.uint8)


def check_inputs_unchanged(inputs: dict[str, Any], snapshot: dict[str, Any]) -> None:
    for k, before in snapshot.items():
        now = inputs.get(k)
        if isinstance(before, torch.Tensor):
            if not isinstance(now, torch.Tensor) or now.shape != before.shape or \
                    not torch.equal(_bits(now), _bits(before)):
                raise GuardTripped(Guard.INPUT_MUTATION, f"input {k!r} was modified by the call")
        elif now != before and not (now != now and before != before):  # NaN scalars stay NaN
            raise GuardTripped(Guard.INPUT_MUTATION, f"scalar input {k!r} was modified")


# ── torch calls from host code ───────────────────────────────────────────────────────────────────
_ALLOWED_TENSOR_ATTRS = {"data_ptr", "size", "stride", "numel", "dim", "element_size", "is_contiguous",
                         "__get__", "shape", "dtype", "device", "storage_offset", "nbytes",
                         "itemsize", "ndim", "is_cuda", "__len__", "__hash__", "__repr__",
                         "__format__", "untyped_storage", "__eq__"}


class NoTorchOps:
    """Context manager: any torch function or Tensor method (except metadata such as data_ptr and
    shape) raises GuardTripped(TORCH_CALL). For host-side candidates of a language that may only
    launch its own kernels."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        guard = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", str(func))
                if name in _ALLOWED_TENSOR_ATTRS or guard.suspended:
                    return func(*args, **(kwargs or {}))
                guard.violation = f"called torch op {getattr(func, '__qualname__', name)}"
                raise GuardTripped(Guard.TORCH_CALL, guard.violation)

        self._mode = _Mode()
        self.violation: Optional[str] = None
        self.suspended = False

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False


# ── timing-side guards ───────────────────────────────────────────────────────────────────────────
def check_side_streams(side_streams: set, kernel_names: Iterable[str] = ()) -> None:
    if side_streams:
        raise GuardTripped(Guard.SIDE_STREAM, f"kernels ran on stream(s) {sorted(side_streams)} "
                           "other than the one the call was given")


def check_sol_floor(median_ms: float, t_sol_ms: Optional[float], fraction: float) -> None:
    if t_sol_ms and t_sol_ms > 0 and median_ms < fraction * t_sol_ms:
        raise GuardTripped(Guard.SOL_FLOOR, f"{median_ms:.5f} ms is below {fraction} x T_sol "
                           f"({t_sol_ms:.5f} ms): faster than the hardware allows")


def module_loaded_after(snapshot: set[str]) -> list[str]:
    return sorted(set(sys.modules) - snapshot)
