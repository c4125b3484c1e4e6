"""A cat whose other parts are empty 1-D tensors (which torch.cat skips) lowers to one plain block:
the generated kernel compiles and matches the reference on the CPU emulation."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

REF = """
import torch
def run(x):
    empty = torch.zeros(0, dtype=x.dtype, device=x.device)
    return torch.cat([empty, torch.relu(x).reshape(-1), empty]) * 3.0
"""


def test_cat_left_with_one_part(tmp_path):
    axes = {"N": {"type": "var"}, "D": {"type": "const", "value": 4},
            "ND": {"type": "expr", "expression": "N * D"}}
    p = make_problem(tmp_path, "cat1", axes, {"x": T("N", "D")}, {"y": T("ND")}, REF,
                     [{"N": 5}, {"N": 9}])
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=8, candidate=out.candidate)
    assert r["ok"], r
