"""A reshape of a sliced GEMM output, then a split of it: the reshape is a view of the slice (the
padded row stride stays), and the split reads through both. The compiler once composed the
slice's buffer offsets with the reshape's logical index (row 0 right, every other row wrong)."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import B, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def test_split_of_reshaped_padded_projection(tmp_path):
    p = make_problem(tmp_path, "pad", {"B": {"type": "var"}, "L": {"type": "var"},
                                       "K": {"type": "const", "value": 32},
                                       "P": {"type": "const", "value": 48}},
                     {"x": B("B", "L", "K"), "w": B("P", "K"), "g": B(24)},
                     {"head": B("B", "L", 24), "tail": B("B", "L", 1, 12)},
                     """
                     import torch
                     def run(x, w, g):
                         b, l, k = x.shape
                         y = (x.reshape(-1, k).float() @ w.float().t()).to(x.dtype)  # [b*l, 48], 36 used
                         used = y[:, :36].reshape(b, l, 36)
                         head, tail = torch.split(used, [24, 12], dim=-1)
                         var = head.float().pow(2).mean(-1, keepdim=True)
                         head = (head.float() * torch.rsqrt(var + 1e-6)).to(head.dtype) * g
                         return head, tail.unsqueeze(2)
                     """, [{"B": 2, "L": 5}])
    r = check_problem(p, cap=16)
    assert r["ok"], r
