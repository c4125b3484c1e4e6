"""Sizes truncated from Python float arithmetic on sizes (`h = int(n ** 0.5)`, `int(n * 8 / 160 *
1.25)`): kept symbolic by the trace, printed as C and as axis expressions, and the guards of a Python
branch on them checked at every workload (float_sizes.py). Problems written here; the plans run
through the g++ emulation and compile with NVRTC."""

from __future__ import annotations

import shutil

import pytest
import sympy
from torch.utils._sympy.functions import FloatPow, FloorDiv, IntTrueDiv, ToFloat, TruncToInt

from solforge.compiler import symexpr
from solforge.problem import axis_expr

from .test_compiler import T, _compile_ok, make_problem

def _slow(f):
    return pytest.mark.slow(pytest.mark.skipif(shutil.which("g++") is None,
                                               reason="needs a host C++ compiler")(f))

_GRID = """
import torch
import torch.nn.functional as F
def run(x, w):
    b, s, c = x.shape
    h = int(s ** 0.5)
    wd = s // h
    while h * wd != s:
        h -= 1
        wd = s // h
    y = x.reshape(b, h, wd, c).permute(0, 3, 1, 2).contiguous()
    return F.conv2d(F.silu(y), w, padding=1)
"""


def _grid(tmp_path, name, workloads):
    return make_problem(tmp_path, name, {"B": {"type": "var"}, "H": {"type": "var"}, "W": {"type": "var"},
                                         "S": {"type": "expr", "expression": "H * W"},
                                         "C": {"type": "const", "value": 4}},
                        {"x": T("B", "S", "C"), "w": T("C", "C", 3, 3)}, {"y": T("B", "C", "H", "W")},
                        _GRID, workloads)


def test_truncated_float_sizes_print_and_parse_back():
    h, w, n = symexpr.sym("h"), symexpr.sym("w"), symexpr.sym("n")
    root = TruncToInt(FloatPow(ToFloat(h * w), sympy.Float(0.5)))
    cap = TruncToInt(sympy.Float(1.25) * IntTrueDiv(8 * n, 160))
    for e, env, want in [(FloorDiv(h * w, root), {"h": 11, "w": 11}, 11),
                         (3 * root, {"h": 7, "w": 9}, 3 * int((63) ** 0.5)),
                         (cap + 1, {"n": 3089}, int((3089 * 8 / 160) * 1.25) + 1)]:
        s = symexpr.to_axis(e)
        assert symexpr.parse(s) == e, s
        assert axis_expr.as_int(axis_expr.evaluate(s, env), s) == want
    c = symexpr.to_c(root, lambda x: "z_" + x)
    assert "sqrt(" in c and "pow(" not in c, c   # sqrt is correctly rounded, as the host's n ** 0.5


@_slow
def test_square_grid_from_its_cell_count_runs_as_a_guarded_plan(tmp_path):
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = _grid(tmp_path, "grid", [{"B": 2, "H": 4, "W": 4}, {"B": 1, "H": 7, "W": 7}, {"B": 3, "H": 5, "W": 5}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("variants", 0) >= 1, out.segments   # the while loop's guards, checked
    assert "sqrt(" in out.candidate.sources["kernel.cu"]
    _compile_ok(out.candidate)
    res = check_problem(p, cap=8)
    assert res["ok"], res


@pytest.mark.slow
def test_a_workload_whose_grid_loop_turns_elsewhere_is_refused(tmp_path):
    """14 cells: int(14 ** 0.5) = 3 does not divide 14, the reference's loop steps to 2 x 7; the
    traced graph (no step) would be wrong there, so the problem is refused, not served."""
    from solforge.compiler.api import compile_problem

    p = _grid(tmp_path, "grid_uneven", [{"B": 2, "H": 4, "W": 4}, {"B": 1, "H": 7, "W": 7},
                                        {"B": 1, "H": 2, "W": 7}])
    out = compile_problem(p)
    assert not out.ok
    assert "truncated from float arithmetic" in out.reason or "differs" in out.reason, out.reason


@_slow
def test_capacity_from_float_arithmetic_on_a_size(tmp_path):
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "capacity", {"N": {"type": "var"}, "C": {"type": "const", "value": 8}},
                     {"x": T("N", "C")}, {"y": T("C")},
                     """
                     import torch
                     def run(x):
                         n = x.shape[0]
                         cap = max(int((n * 8 / 160) * 1.25), 1)
                         return x[:cap].sum(0) * 2.0
                     """, [{"N": 160}, {"N": 333}, {"N": 3089}])
    out = compile_problem(p)
    assert out.ok, out.reason
    _compile_ok(out.candidate)
    res = check_problem(p, cap=400)
    assert res["ok"], res


@_slow
def test_len_of_a_tensor_stays_a_size(tmp_path):
    """`torch.arange(len(x))`: builtins.len would pin the trace to one workload's size."""
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "length", {"N": {"type": "var"}, "C": {"type": "const", "value": 8}},
                     {"x": T("N", "C")}, {"y": T("N", "C")},
                     """
                     import torch
                     def run(x):
                         pos = torch.arange(len(x), device=x.device).to(x.dtype)
                         return x * pos.unsqueeze(1)
                     """, [{"N": 5}, {"N": 33}, {"N": 70}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "variants" not in out.segments, out.segments   # one graph for every size
    res = check_problem(p, cap=40)
    assert res["ok"], res
