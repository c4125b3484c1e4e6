"""Size and index algebra of the compiler, checked against torch's own view semantics."""

from __future__ import annotations

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from solforge.compiler import loops, symexpr
from solforge.compiler.kernel import Buffer


def test_axis_expression_round_trip():
    for s in ["(batch_size * seq_len)", "((H - 1) // 2 + 1)", "max(a, 3)", "(n % 7)"]:
        e = symexpr.parse(s)
        assert symexpr.parse(symexpr.to_axis(e)) == e


def test_fold_divmod_restores_the_flat_position():
    x, h = symexpr.sym("x"), symexpr.sym("h")
    assert symexpr.fold_divmod(h * FloorDiv(x, h) + ModularIndexing(x, 1, h)) == x
    three = 8192 * FloorDiv(x, 8192) + 128 * ModularIndexing(x, 128, 64) + ModularIndexing(x, 1, 128)
    assert symexpr.fold_divmod(three) == x


def _offsets(loader, shape):
    """The flat offsets a strided view reads, for every index (row-major), as ints."""
    out = []
    for idx in torch.cartesian_prod(*[torch.arange(int(s)) for s in shape]).reshape(-1, len(shape)).tolist():
        e = loader.offset + sum(i * s for i, s in zip(idx, loader.strides))
        out.append(int(sympy.sympify(e)))
    return out


def test_views_fold_into_strides_like_torch():
    base = torch.arange(2 * 3 * 4).reshape(2, 3, 4)
    buf = Buffer("x", "float32", [sympy.Integer(s) for s in base.shape], "input")
    v = loops.view_of(buf)
    cases = [
        (loops.permute(v, [2, 0, 1]), base.permute(2, 0, 1)),
        (loops.slice_(loops.permute(v, [1, 0, 2]), 2, 1, 4, 2), base.permute(1, 0, 2)[:, :, 1:4:2]),
        (loops.select(v, 1, 2), base[:, 2]),
        (loops.expand(loops.unsqueeze(loops.select(v, 0, 1), 0), [5, 3, 4]), base[1].unsqueeze(0).expand(5, 3, 4)),
        (loops.reshape(v, [6, 4]), base.reshape(6, 4)),
    ]
    for lo, ref in cases:
        assert lo.is_view
        assert [int(s) for s in lo.shape] == list(ref.shape)
        assert _offsets(lo, lo.shape) == ref.reshape(-1).tolist()


def test_reshape_of_a_transpose_reindexes_without_a_copy():
    base = torch.arange(12).reshape(3, 4)
    buf = Buffer("x", "float32", [sympy.Integer(3), sympy.Integer(4)], "input")
    t = loops.permute(loops.view_of(buf), [1, 0])
    r = loops.reshape(t, [12])          # not expressible as strides: re-indexed
    assert not r.is_view

    class K:
        def __init__(self):
            self.reads = []

        def load(self, b, flat):
            self.reads.append(int(sympy.sympify(flat)))
            return "v"
    k = K()
    for i in range(12):
        r.fn(k, [sympy.Integer(i)])
    assert k.reads == base.t().reshape(-1).tolist()
