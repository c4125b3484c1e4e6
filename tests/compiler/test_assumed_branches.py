"""`if t == 0.0:` on a device value: traced on the likely side, outputs NaN where it fails; other
data-dependent branches still stop the trace."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.trace import trace_definition

from .test_compiler import T, make_problem


def _problem(tmp_path, name, body):
    return make_problem(tmp_path, name, {"N": {"type": "var"}}, {"x": T("N")}, {"y": T("N")},
                        "import torch\n" + body, [{"N": 5}, {"N": 9}])


FIXUP = """
def run(x):
    s = x.abs().max()
    if s == 0.0:
        s = torch.tensor(1.0)
    return x / s
"""


def test_equality_branch_is_assumed_and_guarded(tmp_path):
    p = _problem(tmp_path, "eq", FIXUP)
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    ops = [n["op"] for n in tr.ir["nodes"]]
    assert "aten.eq.Scalar" in ops and ops[-1] == "aten.where.self", ops


def test_an_ordering_branch_still_stops_the_trace(tmp_path):
    p = _problem(tmp_path, "lt", FIXUP.replace("s == 0.0", "s < 1.0"))
    tr = trace_definition(p.definition, list(p.workloads))
    assert not tr.ok and "data-dependent" in tr.reason, tr.reason


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_outputs_are_nan_when_the_assumption_fails(tmp_path):
    import torch

    from solforge.compiler.api import compile_problem
    from solforge.compiler.emulate import emulate

    p = _problem(tmp_path, "eqrun", FIXUP)
    out = compile_problem(p)
    assert out.ok, out.reason
    x = torch.tensor([0.5, -2.0, 1.0, 0.25, 1.5])
    y = torch.empty(5)
    emulate(out.candidate, {"x": x, "y": y}, {"N": 5}, {})
    assert torch.allclose(y, x / 2.0)
    z = torch.zeros(5)
    emulate(out.candidate, {"x": z, "y": y}, {"N": 5}, {})
    assert torch.isnan(y).all()       # the reference would have taken the other side
