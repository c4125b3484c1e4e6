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


def _holds(ub, totals, syms, values):
    for vals in values:
        env = dict(zip(syms, vals))
        assert int(ub.subs(env)) >= max(int(sympy.sympify(t).subs(env)) for t in totals), (ub, vals)


def test_bound_over_a_common_denominator():
    """A rounding that is not to whole 256-byte units gives a fractional polynomial: its ceiling
    over the common denominator, still an upper bound."""
    a = symexpr.sym("a")
    t = FloorDiv(a + ALIGN - 1, ALIGN) * 128
    ub = workspace_bound([t])
    assert ub is not None
    _holds(ub, [t], [a], [(0,), (1,), (255,), (256,), (1000,)])
    assert workspace_bound([FloorDiv(a + ALIGN - 1, ALIGN) * ALIGN]) == a + ALIGN - 1


def test_bound_over_other_divisions_and_max_min():
    a, b = symexpr.sym("a"), symexpr.sym("b")
    totals = [FloorDiv(a * 7, 3) * 4 + sympy.Max(a, b * 2) * 8, sympy.Min(a, b) * 16 + FloorDiv(b, 5) * 256]
    ub = workspace_bound(totals)
    assert ub is not None
    _holds(ub, totals, [a, b], [(1, 1), (3, 9), (1000, 7), (17, 4096)])


def test_no_bound_when_a_divisor_would_be_loosened():
    """n // (n // 256) taken as n / (n / 256) = 256 is below the true value (300 // 1 = 300): a
    divisor holding a floor division, max() or min() gives no short bound, never a short one."""
    n = symexpr.sym("n")
    t = FloorDiv(n, FloorDiv(n, 256)) * 64 + n * 4
    assert workspace_bound([t]) is None
    assert workspace_bound([t, n * 8]) is None
    # a constant divisor of a loosened numerator is still fine
    ok = FloorDiv(FloorDiv(n, 3) * 5, 7) * 16
    ub = workspace_bound([ok])
    assert ub is not None
    _holds(ub, [ok], [n], [(1,), (300,), (4097,)])
