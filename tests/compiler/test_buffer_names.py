"""Inputs may carry any name, the compiler's own workspace names included: a problem whose inputs are
named b1 and b2 (the names the lowering gives its first workspace buffers) compiles and matches its
reference on the CPU emulation."""

from __future__ import annotations

import shutil

import pytest

from .test_compiler import make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

T = lambda *s: {"shape": list(s), "dtype": "float32"}  # noqa: E731


def test_inputs_named_like_workspace_buffers(tmp_path):
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "names", {"B": {"type": "var"}, "H": {"type": "var"}, "W": {"type": "var"}},
                     {"x": T("B", 4, "H", "W"), "b1": T(4, 4, 3, 3), "b2": T(4),
                      "b3": T(2, 8, 3, 3), "b4": T(2)},
                     {"b5": T("B", 2, "H", "W")},
                     """
                     import torch
                     import torch.nn.functional as F
                     def run(x, b1, b2, b3, b4):
                         e = F.conv2d(x, b1, b2, padding=1)
                         return F.conv2d(torch.cat([e, x], dim=1), b3, b4, padding=1)
                     """, [{"B": 2, "H": 5, "W": 6}, {"B": 1, "H": 7, "W": 4}])
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, candidate=out.candidate)
    assert r["ok"], r
