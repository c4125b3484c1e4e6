"""An upper bound for a size read back from the device that nothing proves (`n = t.max().item() + 1;
torch.zeros(n, d)`): a generous guess, checked on the device.

The guess is the inputs' total element count (a size computed from tensor values counts or indexes
their elements, in every problem seen; the sum of the inputs' numels is a polynomial over the axes
and at least the largest). A one-thread kernel right after the kernel that writes the value traps
when it is negative or over the guess, so a workload the guess does not cover fails on the device
instead of overrunning its buffer. Values written more than once (inside a rolled loop) are not
guessed for: their buffers stay refused.
"""

from __future__ import annotations

import sympy

from . import dynamic


def guess(lowering) -> None:
    """Give each unbounded value read back that a workspace buffer's shape uses a guessed bound,
    with its device check (before dynamic_lower.finalize sizes the buffers)."""
    sizes = lowering.dyn
    needed = []
    for b in lowering.ws:
        for s in b.shape:
            for x in sympy.sympify(s).free_symbols:
                n = str(x)
                if dynamic.is_dynamic(n) and sizes.bounds.get(n, 0) is None and n not in needed:
                    needed.append(n)
    if not needed:
        return
    total = sympy.Integer(0)
    for inp in lowering.ir["inputs"]:
        if inp["kind"] == "tensor":
            from . import symexpr

            total = total + sympy.Mul(*[symexpr.parse(s) for s in inp["shape"]])
    for name in needed:
        buf = sizes.counts.get(name)
        if buf is None or name in sizes.sliced:
            continue
        writers = [i for i, spec in enumerate(lowering.kernels) if buf.name in spec.kernel.written]
        if len(writers) > 1 or (buf.kind == "ws" and not writers):
            continue
        sizes.bounds[name] = total
        lowering.kernels.insert(writers[0] + 1 if writers else 0, _check(lowering, buf, total, name))


def _check(lowering, buf, bound, name):
    from .generic import LaunchSpec
    from .kernel import Kernel

    k = Kernel(f"{lowering.prefix}k{len(lowering.kernels)}_bound_check_{name}")
    p = k.ptr(buf)
    k.emit(f"if (threadIdx.x == 0 && ({p}[0] < 0 || {p}[0] > {k.c(bound)})) __trap();")
    return LaunchSpec(k, ["1"], ["32"], kind="check")
