"""Workloads whose sizes or scalar values steer the reference's Python code into different graphs:
one variant per graph, chosen at run time by guards (a Python loop over a size pins it; a float
flag that only a data-dependent branch reads is baked in and pinned). Run on the CPU through the
g++ emulation, on problems written here."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem
from solforge.problem.loader import load_problem_dir

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]



def _with_scalar_values(tmp_path, name, values):
    d = tmp_path / name
    rows = [json.loads(l) for l in (d / "workload.jsonl").read_text().splitlines()]
    for r, v in zip(rows, values):
        r["inputs"]["t"] = {"type": "scalar", "value": v}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_problem_dir(d)


# Known unsound case: `if m.any():` is decided size-obliviously (the mask's count taken as >= 2: the
# True side), which is right when the False side is "do nothing" (an expert with no tokens) but not
# when it computes something else, as here for t = 0.3; the evaluator then fails the plan on those
# workloads. Deciding `any()` by a value variant when both sides differ is the fix.
@pytest.mark.parametrize("first", [0.0, pytest.param(0.3, marks=pytest.mark.xfail(
    strict=True, reason="`if m.any():` decided size-obliviously takes the True side for t = 0.3"))])
def test_float_flag_read_by_a_data_dependent_branch(tmp_path, first):
    """`if t == 0: return x` and a threshold through `mask.any()` on a tensor of t: each distinct
    value is its own variant (the smallest workload, the one checked, has `first`)."""
    name = f"f{int(first * 10)}"
    make_problem(tmp_path, name, {"N": {"type": "var"}, "D": {"type": "const", "value": 8}},
                 {"x": T("N", "D"), "t": {"shape": None, "dtype": "float32"}}, {"y": T("N", "D")},
                 """
                 import torch
                 def run(x, t):
                     if t == 0.0:
                         return x
                     tt = torch.tensor(t, dtype=torch.float32)
                     z = torch.zeros_like(tt)
                     m = tt < 0.25
                     if m.any():
                         z = tt * 2.0
                     else:
                         z = tt - 1.0
                     return torch.relu(x - x.mean(-1, keepdim=True) * z)
                 """, [{"N": 3}, {"N": 9}, {"N": 12}, {"N": 17}], scalars={"t": 0.1})
    p = _with_scalar_values(tmp_path, name, [first, 0.1, 0.3 if first == 0.0 else 0.0, 0.1])
    out = compile_problem(p)
    assert out.ok, out.reason
    # the `m.any()` branch is either a variant per value or a count kept on the device (nonzero);
    # the `t == 0.0` return needs a variant either way
    assert out.segments.get("variants", 0) >= 2 or out.segments.get("nonzero"), out.segments
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


@pytest.mark.parametrize("first_batch", [2, 3])
def test_python_loop_over_a_size(tmp_path, first_batch):
    """`for b in range(batch)` writing its row (`y[b] = y[b] * (b + 1)`): one loop of the symbolic
    count (the row read and written by index, the index's arithmetic an affine constant of the
    loop), not a variant per batch size; right on the smallest batch."""
    p = make_problem(tmp_path, f"b{first_batch}", {"B": {"type": "var"}, "S": {"type": "var"},
                                                   "D": {"type": "const", "value": 4}},
                     {"x": T("B", "S", "D"), "pos": {"shape": ["B"], "dtype": "int64"}},
                     {"y": T("B", "S", "D")},
                     """
                     import torch
                     def run(x, pos):
                         y = x.clone()
                         for b in range(x.shape[0]):
                             y[b] = y[b] * (b + 1)
                         return y
                     """, [{"B": first_batch, "S": 5}, {"B": 5 - first_batch, "S": 7},
                           {"B": 4, "S": 3}, {"B": first_batch, "S": 11}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "variants" not in out.segments and out.ops.get("solforge.loop") == 1, out.segments
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


def test_size_guard_that_keeps_the_graph_does_not_select(tmp_path):
    """A size test that leaves the graph as it is (`batch < 16`) is a guard of the trace, but not
    of the variant: a workload past it with the same flag runs the same variant."""
    ref = """
          import torch
          def run(x, flag):
              s = 2.0 if x.shape[0] < 16 else 2.0
              return torch.relu(x) * s if flag else torch.sigmoid(x) * s
          """
    rows = [{"B": 2}, {"B": 3}, {"B": 20}, {"B": 21}]
    flags = [False, True, False, True]
    full = make_problem(tmp_path, "g", {"B": {"type": "var"}, "D": {"type": "const", "value": 8}},
                        {"x": T("B", "D"), "flag": {"shape": None, "dtype": "bool"}},
                        {"y": T("B", "D")}, ref, rows, scalars={"flag": False})
    d = tmp_path / "g"
    lines = [json.loads(l) for l in (d / "workload.jsonl").read_text().splitlines()]
    for r, f in zip(lines, flags):
        r["inputs"]["flag"] = {"type": "scalar", "value": f}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    full = load_problem_dir(d)
    out = compile_problem(full)
    assert out.ok, out.reason
    assert out.segments.get("variants") == 2
    # the candidate checked at each large workload alone (check_problem runs the smallest)
    for i in (2, 3):
        one = tmp_path / f"g{i}"
        one.mkdir()
        (one / "definition.json").write_text((d / "definition.json").read_text())
        (one / "workload.jsonl").write_text(json.dumps(lines[i]) + "\n")
        r = check_problem(load_problem_dir(one), cap=32, candidate=out.candidate)
        assert r["ok"], (i, r)


def test_ceil_of_a_size_ratio_selects_padding(tmp_path):
    """`nb = math.ceil(L / 4)`, `if nb * 4 - L > 0: pad`: guards over CeilToInt(L / 4) tell the
    padded graph from the other one."""
    p = make_problem(tmp_path, "ceil", {"B": {"type": "var"}, "L": {"type": "var"},
                                        "D": {"type": "const", "value": 3}},
                     {"x": T("B", "L", "D")}, {"y": T("B", "D")},
                     """
                     import math
                     import torch
                     import torch.nn.functional as F
                     def run(x):
                         L = x.shape[1]
                         nb = math.ceil(L / 4)
                         pad = nb * 4 - L
                         if pad > 0:
                             x = F.pad(x, (0, 0, 0, pad))
                         w = x.view(x.shape[0], nb, 4, x.shape[2]).amax(2)
                         return w.sum(1)
                     """, [{"B": 2, "L": 6}, {"B": 3, "L": 8}, {"B": 2, "L": 12}, {"B": 4, "L": 9}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("variants") == 2
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


def test_a_template_gemm_is_never_offered_inside_variants(tmp_path):
    """Each variant's kernels return early unless its guard holds; a template kernel's source is
    rendered whole and could not, so a plan with variants keeps the generic matmul (which the
    guard reaches) and the template point is not offered."""
    from solforge.kernels.compiled import GEMM_PARAM, CompiledFamily

    make_problem(tmp_path, "vmm", {"N": {"type": "var"}, "D": {"type": "const", "value": 16}},
                 {"x": T("N", "D"), "w": T("D", "D"), "t": {"shape": None, "dtype": "float32"}},
                 {"y": T("N", "D")},
                 """
                 import torch
                 def run(x, w, t):
                     if t == 0.0:
                         return x @ w
                     return torch.relu(x @ w) * t
                 """, [{"N": 3}, {"N": 9}, {"N": 12}], scalars={"t": 0.1})
    p = _with_scalar_values(tmp_path, "vmm", [0.0, 0.5, 0.0])
    templ = compile_problem(p, gemm="template")
    assert not templ.ok and "variant" in templ.reason, templ.reason
    assert [s[GEMM_PARAM] for s in CompiledFamily().param_space(p)] == [0]
    assert compile_problem(p).ok
