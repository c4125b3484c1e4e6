"""The two traced workloads take the same branch (no padding), another workload the other one: the
graph's guards fail there, so that workload is traced too and each graph becomes a variant (before,
the one graph was served for every workload, wrong where the reference pads). Problems written
here, run through the g++ emulation at the padded workload."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

_REF = """
import torch
import torch.nn.functional as F
def run(x):
    n = x.shape[0]
    pad = (4 - n % 4) % 4
    if pad > 0:
        x = F.pad(x, (0, 0, 0, pad), value=1.0)
    return x.reshape(-1, 4, x.shape[1]).mean(dim=1)
"""


def _groups(tmp_path, name, sizes):
    return make_problem(tmp_path, name, {"N": {"type": "var"}, "C": {"type": "const", "value": 8},
                                         "G": {"type": "expr", "expression": "ceil_div(N, 4)"}},
                        {"x": T("N", "C")}, {"y": T("G", "C")}, _REF, [{"N": n} for n in sizes])


def test_a_workload_outside_the_traced_graphs_guards_gets_its_own_variant(tmp_path):
    p = _groups(tmp_path, "groups", [4, 8, 11, 12])   # traced at 4 and 8: no padding
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("variants") == 2, out.segments
    assert check_problem(p, cap=16)["ok"]                          # N = 4: no padding
    padded = _groups(tmp_path, "groups_padded", [11])
    r = check_problem(padded, cap=16, candidate=out.candidate)    # N = 11: padded
    assert r["ok"], r
