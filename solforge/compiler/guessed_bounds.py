"""Upper bounds for sizes computed from values read back from the device (`.item()`), before the
lowering sizes its buffers and grids at the bounds (dynamic_lower.finalize).

First what the expression proves (`bound_of`): `min(R, k % R)` is at most R whatever k is (a min
is at most any of its bounded sides, a modulo below its divisor), sums and products of bounded
non-negative parts are at most their bounds' sums and products. A buffer dim bounded this way is
allocated at that bound.

Where nothing proves one (`n = t.max().item() + 1; torch.zeros(n, d)`), a generous guess, checked
on the device: the inputs' total element count (a size computed from tensor values counts or
indexes their elements, in every problem seen; the sum of the inputs' numels is a polynomial over
the axes and at least the largest). A one-thread kernel right after the kernel that writes the
value traps when it is negative or over the guess, so a workload the guess does not cover fails on
the device instead of overrunning its buffer. Values written more than once (inside a rolled loop)
are not guessed for, nor values whose product sizes a buffer (a product of guesses would be far
beyond any use): those buffers stay refused.
"""

from __future__ import annotations

from typing import Optional

import sympy
from torch.utils._sympy.functions import FloorDiv, Max, Min, ModularIndexing, Mod, PythonMod

from . import dynamic

_GRID_STRIDE = ("pointwise", "scatter", "reduction", "scan", "sort")


def bound_of(e, bounds: dict, depth: int = 0) -> Optional[sympy.Expr]:
    """An upper bound of a size expression over axes (non-negative) and data-dependent values
    (`bounds`: name -> bound, None when unbounded), or None when the expression proves none."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return e
    if e.is_Symbol:
        n = str(e)
        if dynamic.is_dynamic(n):
            b = bounds.get(n)
            if b is not None and depth < 8 and any(dynamic.is_dynamic(str(x)) for x in
                                                   sympy.sympify(b).free_symbols):
                return bound_of(b, bounds, depth + 1)   # a bound naming another size
            return b
        return e
    if isinstance(e, Min):
        got = [b for b in (bound_of(a, bounds) for a in e.args) if b is not None]
        return Min(*got) if len(got) > 1 else (got[0] if got else None)
    if isinstance(e, Max):
        got = [bound_of(a, bounds) for a in e.args]
        return None if any(b is None for b in got) else Max(*got)
    if isinstance(e, (Mod, PythonMod)) or (isinstance(e, sympy.Mod)):
        m = e.args[1]
        return m if m.is_positive or (m.is_Symbol and not dynamic.is_dynamic(str(m))) else None
    if isinstance(e, ModularIndexing):
        m = e.args[2]
        return m if not any(dynamic.is_dynamic(str(x)) for x in m.free_symbols) else None
    if isinstance(e, FloorDiv):
        b = bound_of(e.args[0], bounds)
        d = e.args[1]
        return FloorDiv(b, d) if b is not None and d.is_Integer and d > 0 else None
    if e.is_Add:
        out = sympy.Integer(0)
        for t in e.args:
            c, rest = t.as_coeff_Mul()
            if c < 0:
                # a subtracted size: at most 0 when it is an axis product (non-negative)
                if any(dynamic.is_dynamic(str(x)) for x in rest.free_symbols):
                    return None
                continue
            b = bound_of(t, bounds)
            if b is None:
                return None
            out = out + b
        return out
    if e.is_Mul:
        out = sympy.Integer(1)
        for f in e.args:
            if f.is_number and f < 0:
                return None
            b = bound_of(f, bounds)
            if b is None:
                return None
            out = out * b
        return out
    return None


def _unbounded(e, bounds) -> list:
    return sorted(str(x) for x in sympy.sympify(e).free_symbols
                  if dynamic.is_dynamic(str(x)) and bounds.get(str(x), 0) is None)


def guess(lowering, bounded=None) -> None:
    """Bound the workspace buffers' data-dependent dims (what the expressions prove, else a
    checked guess per value read back), before dynamic_lower.finalize sizes buffers and grids.
    bounded(grid expression): whether the grid is bounded as it is (no guess needed for it)."""
    import ast

    sizes = lowering.dyn
    needed: list = []
    refused: set = set()
    for b in lowering.ws:
        names = []
        for s in b.shape:
            if _unbounded(s, sizes.bounds) and bound_of(s, sizes.bounds) is None:
                names += [n for n in _unbounded(s, sizes.bounds) if n not in names]
        if names and sizes.products:
            # a product a view bounds (view_bounds.py): the buffer is allocated flat at it
            nb = bound_of(dynamic.sub_products(sympy.expand(b.numel()), sizes.products), sizes.bounds)
            if nb is not None:
                b.shape = [nb]
                continue
        if names and _degree(b.numel(), names) > 1:
            # a product of values read back (t * h * w rows): a product of guesses would size the
            # buffer far beyond any use, so none of them is guessed (the plan is refused)
            refused.update(names)
        needed += [n for n in names if n not in needed]
    needed = [n for n in needed if n not in refused]
    for spec in lowering.kernels:   # a grid over a value read back (a grid-stride loop needs none)
        if spec.kind in _GRID_STRIDE or spec.kind == "attention":
            continue
        for g in spec.grid:
            if bounded is not None and bounded(str(g)):
                continue   # bounded by a product a view bounds (view_bounds.py)
            names = {x.id for x in ast.walk(ast.parse(str(g), mode="eval")) if isinstance(x, ast.Name)}
            needed += [n for n in sorted(names) if dynamic.is_dynamic(n) and n not in refused
                       and sizes.bounds.get(n, 0) is None and n not in needed]
    if needed:
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
    for b in lowering.ws:   # what the expressions prove (with the guesses)
        shape = []
        for s in b.shape:
            dyn = any(dynamic.is_dynamic(str(x)) for x in sympy.sympify(s).free_symbols)
            ub = bound_of(s, sizes.bounds) if dyn else None
            shape.append(ub if ub is not None else s)
        b.shape = shape


def _degree(e, names) -> int:
    """The total degree of a size in these values (a large number when it is not a polynomial)."""
    from . import symexpr

    try:
        return sympy.Poly(sympy.expand(e), *[symexpr.sym(n) for n in names]).total_degree()
    except sympy.PolynomialError:
        return 99


def _check(lowering, buf, bound, name):
    from .generic import LaunchSpec
    from .kernel import Kernel

    k = Kernel(f"{lowering.prefix}k{len(lowering.kernels)}_bound_check_{name}")
    p = k.ptr(buf)
    k.emit(f"if (threadIdx.x == 0 && ({p}[0] < 0 || {p}[0] > {k.c(bound)})) __trap();")
    return LaunchSpec(k, ["1"], ["32"], kind="check")
