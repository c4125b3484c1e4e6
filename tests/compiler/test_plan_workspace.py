"""The workspace of a plan with many variants: a short polynomial bound of the largest total."""

from __future__ import annotations

import itertools

import sympy
from torch.utils._sympy.functions import FloorDiv

from solforge.compiler import symexpr
from solforge.compiler.plan import ALIGN, workspace_bound


def test_bound_covers_every_variant_and_is_short():
    a, b, c = (symexpr.sym(n) for n in ("a", "b", "c"))
    terms = [a * b * 6, b * c * 2 + 3, a * c * 10, a * b * c * 2, c * 4 + 1]
    totals = []
    for v in range(7):
        t = sympy.Integer(0)
        for i, x in enumerate(terms):
            t = t + FloorDiv(x * (v + i + 1) + ALIGN - 1, ALIGN) * ALIGN
        totals.append(t)
    full = symexpr.to_axis(sympy.Max(*totals))
    ub = workspace_bound(totals)
    assert ub is not None and len(symexpr.to_axis(ub)) < len(full) / 2
    for vals in itertools.product((1, 3, 77), (2, 5), (1, 1000)):
        env = dict(zip((a, b, c), vals))
        assert int(ub.subs(env)) >= max(int(t.subs(env)) for t in totals)


def test_bound_refuses_a_fraction():
    """A rounding that is not to whole 256-byte units would leave a fractional polynomial."""
    a = symexpr.sym("a")
    assert workspace_bound([FloorDiv(a + ALIGN - 1, ALIGN) * 128]) is None
    assert workspace_bound([FloorDiv(a + ALIGN - 1, ALIGN) * ALIGN]) == a + ALIGN - 1
