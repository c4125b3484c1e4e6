"""An in-place op on `x[b]` inside a loop over a symbolic batch size (a counted loop): the row the
trace hands out there is an index_select, a copy, so the op has to be written back into x; before,
`out[b].index_copy_(...)` left `out` as it was and every scattered row came out wrong at B > 1."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import B, make_problem, with_custom_inputs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

REF = """
import torch

def run(feat, lm, pos):
    n = pos.shape[1]
    o = feat.float() * 2
    out = lm.float().clone()
    for b in range(feat.shape[0]):
        out[b].index_copy_(0, pos[b], o[b, :n, :])
        out[b][0] += 1.0
    return out.to(torch.bfloat16)

def get_inputs(axes, device):
    Bn, S, L, N = axes["B"], axes["S"], axes["L"], axes["N"]
    pos = torch.stack([torch.randperm(L)[:N].sort().values for _ in range(Bn)])
    return {"feat": torch.randn(Bn, S, 8).bfloat16(), "lm": torch.randn(Bn, L, 8).bfloat16(),
            "pos": pos}
"""


@pytest.mark.parametrize("batch", [1, 3])
def test_index_copy_into_row_of_symbolic_batch(tmp_path, batch):
    name = f"rowcopy{batch}"
    make_problem(tmp_path, name, {k: {"type": "var"} for k in ("B", "S", "L", "N")},
                 {"feat": B("B", "S", 8), "lm": B("B", "L", 8),
                  "pos": {"shape": ["B", "N"], "dtype": "int64"}},
                 {"out": B("B", "L", 8)}, REF,
                 [{"B": batch, "S": 6, "L": 7, "N": 4}, {"B": 4, "S": 9, "L": 11, "N": 5}])
    p = with_custom_inputs(tmp_path, name)
    r = check_problem(p, cap=16)
    assert r["ok"], r
