"""fold_divmod keeps an index's value: a term with a size FloorDiv and an index FloorDiv keeps both."""

from __future__ import annotations

import itertools

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from solforge.compiler import symexpr


def test_size_floordiv_factor_is_not_dropped():
    r, L = symexpr.sym("r"), symexpr.sym("L")
    nb = FloorDiv(L + 2, 4)
    e = 3 * nb * FloorDiv(r, 3) + ModularIndexing(r, 1, 3)
    f = symexpr.fold_divmod(e)
    for rv, lv in itertools.product(range(0, 12), (6, 9, 14)):
        env = {r: rv, L: lv}
        assert int(f.subs(env)) == int(e.subs(env)), (f, env)


def test_contiguous_unravel_still_folds():
    r = symexpr.sym("r")
    e = 12 * FloorDiv(r, 12) + 3 * ModularIndexing(r, 3, 4) + ModularIndexing(r, 1, 3)
    assert sympy.expand(symexpr.fold_divmod(e) - r) == 0
