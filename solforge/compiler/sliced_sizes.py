"""A slice whose bounds are values read back from the device (`x[start:end]` with start and end
from `.item()`): its length is a data-dependent size with a bound the shapes prove.

Trace (in the child): torch gives such a slice's length a fresh unbacked symbol. It is named
`dyn<i>` like any data-dependent size, with the length of the sliced dim as its upper bound (a
slice never outgrows what it slices) and its value as the slice arithmetic over the bounds:
IR `"dynamic": {"dyn2": {"bound": "T", "slice": ["dyn0", "dyn1", "T"]}}` (start, end, dim size;
an omitted start is 0, an omitted end the dim size).

Lower: a kernel that reads the size computes it from the bounds it reads on the device, with
Python's slice clamping. The slice's view starts at `start` as given, so a start outside
[0, dim size] (a negative start would count from the end) stops the kernel with a trap: never a
silently shifted view.
"""

from __future__ import annotations

from typing import Optional

OP = "aten.slice.Tensor"


def spec(n, namer, shape_env) -> Optional[tuple]:
    """(bound, [start, end, size]) axis expressions of a slice node's data-dependent length, or
    None when the node is not a unit-step slice."""
    import torch

    if str(n.target) != OP:
        return None
    args = list(n.args) + [None] * (5 - len(n.args))
    x, dim, start, end, step = args[:5]
    step = 1 if step is None else step
    if not isinstance(x, torch.fx.Node) or not isinstance(step, int) or step != 1:
        return None
    xv = x.meta.get("val")
    if not isinstance(xv, torch.Tensor):
        return None
    dim = int(dim or 0) % max(xv.dim(), 1)

    def expr(v, default):
        if v is None:
            return default
        if isinstance(v, torch.fx.Node):
            v = v.meta.get("val")
        if isinstance(v, torch.SymInt):
            return namer.expr(v.node.expr, shape_env)
        if isinstance(v, int):
            return default if v >= 2**62 else str(v)
        return None
    d = xv.shape[dim]
    size = namer.expr(d.node.expr if isinstance(d, torch.SymInt) else int(d), shape_env)
    s, e = expr(start, "0"), expr(end, size)
    if s is None or e is None:
        return None
    return size, [s, e, size]


def device_value(k, name: str, parts: list) -> str:
    """The C name of slice length `name` in kernel k: computed once at the top of the kernel from
    its start, end and dim size (each read as any size is)."""
    from . import symexpr

    key = ("dz", name)
    if key in k._keys:
        return f"z_{name}"
    s, e, t = (k.c(symexpr.parse(p)) for p in parts)
    k._keys[key] = True
    k.head.append(f"    const long long s_{name} = {s}, t_{name} = {t};")
    # the view starts at `start` unclamped: a start the clamp would move is an error, not a
    # silently shifted slice
    k.head.append(f"    if (s_{name} < 0 || s_{name} > t_{name}) __trap();")
    k.head.append(f"    const long long e_{name} = ({e}) < 0 ? ({e}) + t_{name} : ({e});")
    k.head.append(f"    const long long z_{name} = (e_{name} > t_{name} ? t_{name} : e_{name}) - s_{name} > 0 ? "
                  f"(e_{name} > t_{name} ? t_{name} : e_{name}) - s_{name} : 0LL;")
    return f"z_{name}"
