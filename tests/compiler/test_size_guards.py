"""Workloads whose graphs differ because a size computed with math.ceil is 1 in one of them: the
variants' guards (CeilToInt / IntTrueDiv over sizes) are evaluated and tell the graphs apart."""

from __future__ import annotations

from solforge.compiler.trace import trace_definition

from .test_compiler import T, make_problem


def test_ceil_of_a_size_equal_to_one_selects_its_own_variant(tmp_path):
    p = make_problem(tmp_path, "blocked", {"M": {"type": "var"}, "C": {"type": "const", "value": 8},
                                           "MC": {"type": "expr", "expression": "M * C"}},
                     {"s": T("M", "C")}, {"y": T("MC")},
                     """
                     import math
                     import torch
                     def run(s):
                         rows, cols = s.shape
                         b = s.view(math.ceil(rows / 128), 128, math.ceil(cols / 4), 4).permute(0, 2, 1, 3)
                         return b.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten() * 2
                     """, [{"M": 128}, {"M": 256}, {"M": 384}])
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    from solforge.compiler.api import lower_ir

    assert "variants" in tr.ir, "the one-row-block workload should trace to its own graph"
    out = lower_ir(p.definition, tr.ir)
    assert out.ok, out.reason
