"""Bounds that views give data-dependent values: a view keeps the element count, so a product of
values read back that no shape bounds on its own (`t * (h // 2) * (w // 2)` rows of a slice viewed
as `[t, h // 2, 2, w // 2, 2, C]`) is at most what the other side of the view is. The lowering sets
these on its sizes (`dynamic.Sizes.products`), `dynamic.upper` and the grids use them, buffers of
such rows are allocated flat at the bound (guessed_bounds.guess), and each such view's element count
is checked on the device (lower._view: `view_check`). And a size a view pins exactly: a loop's
collected rows viewed as `[T, K, H]` are T * K (`pinned_sizes`, `dynamic.Sizes.pinned`,
counted_loops.collect_write)."""

from __future__ import annotations

import sympy
from torch.utils._sympy.functions import FloorDiv

from . import dynamic, symexpr
from .counted_loops import COUNTED_CAT
from .guessed_bounds import bound_of


# ops that keep the element count (counted_cat: a counted loop's collected cat, given its length)
VIEW_OPS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", COUNTED_CAT)


def _view_numels(ir: dict):
    """(element count of the viewed tensor, of the view) for each view of the top-level graph."""
    shapes = {i["name"]: i.get("shape") for i in ir.get("inputs", [])}
    for n in ir.get("nodes", []):
        shapes[n["name"]] = n.get("shape")
        arg = (n.get("args") or [None])[0]
        if n["op"] not in VIEW_OPS or not isinstance(arg, dict) or "ref" not in arg:
            continue
        src, dst = shapes.get(arg["ref"]), n.get("shape")
        if src is not None and dst is not None:
            yield (sympy.Mul(*[symexpr.parse(str(x)) for x in src]),
                   sympy.Mul(*[symexpr.parse(str(x)) for x in dst]))


def view_products(ir: dict, bounds: dict) -> dict:
    """{product of values read back: its upper bound} from the graph's views. A view keeps the
    element count: `x[off:off + t*h*w].view(t, h // 2, 2, w // 2, 2, C)` of a slice at most n rows
    long has t * (h // 2) * (w // 2) * 4 * C elements, at most n * C, so that product is at most
    n // 4 although none of t, h, w has a bound of its own. Only a view whose one side has every
    data-dependent size bounded and whose other side is such a product times a positive integer.
    The lowering checks each such view's element count on the device (`view_check`)."""
    out: dict = {}
    for a, b in _view_numels(ir):
        for known, other in ((a, b), (b, a)):
            free = [x for x in other.free_symbols
                    if dynamic.is_dynamic(str(x)) and bounds.get(str(x), 0) is None]
            kb = bound_of(known, bounds) if free else None
            if kb is None:
                continue
            parts = sympy.Mul.make_args(other)
            c = sympy.Mul(*[f for f in parts if not (f.free_symbols & set(free))])
            prod = sympy.Mul(*[f for f in parts if f.free_symbols & set(free)])
            if c.is_Integer and c > 0 and prod.is_Mul:
                out.setdefault(prod, FloorDiv(kb, c) if c != 1 else kb)
    return out


def pinned_sizes(ir: dict) -> dict:
    """{size name: expression over the axes} for the data-dependent sizes that a view or reshape of
    the top-level graph pins: an [n, H] tensor viewed as [T, K, H] has n * H == T * K * H elements,
    so n == T * K wherever the reference ran (torch checks a view's element count). Only a size that
    appears once and linearly in the viewed shape and a view whose shape has no data-dependent size;
    the quotient must be a polynomial with integer coefficients."""
    out: dict = {}
    for a, b in _view_numels(ir):
        dyn = [x for x in a.free_symbols if dynamic.is_dynamic(str(x))]
        if len(dyn) != 1 or any(dynamic.is_dynamic(str(x)) for x in b.free_symbols):
            continue
        d = dyn[0]
        c = sympy.cancel(a / d)
        if c == 0 or c.has(d):
            continue
        sol = sympy.expand(sympy.cancel(b / c))
        num, den = sympy.fraction(sympy.together(sol))
        if den != 1 or any(dynamic.is_dynamic(str(x)) for x in sol.free_symbols):
            continue
        try:
            poly = sympy.Poly(num, *sorted(num.free_symbols, key=str)) if num.free_symbols else None
        except sympy.PolynomialError:
            continue
        if (poly is not None and not all(k.is_integer for k in poly.coeffs())) or \
                (poly is None and not num.is_integer):
            continue
        out.setdefault(str(d), sol)
    return out
