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


class _Spec:
    def __init__(self, *bufs):
        self.kernel = type("K", (), {"_keys": {("o", b) for b in bufs}})()


def test_results_growing_step_by_step_share_one_slot():
    """A loop's results whose sizes grow with the step (a sum over i x i at step i), each dead before
    the next is written, share one slot sized to the largest; one alive across them keeps its own;
    sizes that do not compare for every value of the sizes never share."""
    from types import SimpleNamespace

    from solforge.compiler.kernel import Buffer
    from solforge.compiler.plan import pack_workspace

    n, m = symexpr.sym("n"), symexpr.sym("m")
    steps = [Buffer(f"s{i}", "float32", [n, 3 * i + 1], "ws") for i in range(1, 9)]
    keep = Buffer("keep", "float32", [n, 64], "ws")
    other = Buffer("other", "float32", [m], "ws")   # n vs m: never compared, its own slot
    kernels = [_Spec("keep")]
    for s in steps:
        kernels.append(_Spec(s.name, "keep"))
    kernels += [_Spec("other", "keep")]
    low = SimpleNamespace(kernels=kernels, ws=[keep, *steps, other])
    total = pack_workspace(low)
    assert len({str(s.offset) for s in steps}) == 1          # one slot for the loop's results
    slot = steps[0].offset
    assert slot != keep.offset and other.offset not in (slot, keep.offset)
    # the slot is as large as the largest step: the total is keep + largest step + other
    env = {n: 7, m: 1000}
    big = max(int(sympy.sympify(ALIGN * FloorDiv(s.numel() * 4 + ALIGN - 1, ALIGN)).subs(env)) for s in steps)
    assert int(total.subs(env)) == 7 * 64 * 4 + big + ALIGN * ((1000 * 4 + ALIGN - 1) // ALIGN)
