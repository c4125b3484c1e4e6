"""check.shrink: var axes shrink to the cap, except one whose value a scalar input carries (the
reference reshapes by the scalar, so the two must stay equal)."""

from __future__ import annotations

from solforge.compiler.check import shrink

from .test_compiler import T, make_problem

REF = """
import torch
def run(x, frames):
    return x.view(x.shape[0] // frames, frames, x.shape[1]).sum(1)
"""


def test_an_axis_a_scalar_carries_keeps_its_size(tmp_path):
    axes = {"B": {"type": "var"}, "F": {"type": "var"}, "D": {"type": "const", "value": 8},
            "BF": {"type": "expr", "expression": "B * F"}}
    p = make_problem(tmp_path, "frames", axes, {"x": T("BF", "D"), "frames": {"shape": None, "dtype": "int64"}},
                     {"y": T("B", "D")}, REF, [{"B": 40, "F": 24}], scalars={"frames": 24})
    rw = shrink(p.definition, p.workloads[0], cap=8)
    assert rw.axes["B"] == 8 and rw.axes["F"] == 24 and rw.axes["BF"] == 8 * 24
    # with nothing carrying it, the axis shrinks like any other
    q = make_problem(tmp_path, "plain", axes, {"x": T("BF", "D"), "frames": {"shape": None, "dtype": "int64"}},
                     {"y": T("B", "D")}, REF, [{"B": 40, "F": 24}], scalars={"frames": 3})
    assert shrink(q.definition, q.workloads[0], cap=8).axes["F"] == 8
