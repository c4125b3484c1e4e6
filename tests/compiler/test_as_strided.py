"""torch.chunk / split reach the compiler as as_strided with absolute strides and storage offsets over
the base's storage: a chunk of a transposed matmul output (the gated projection of a Mamba block) and
a chunk of a row slice, emulated on the CPU against the reference. Problems written here."""

from __future__ import annotations

import shutil

import pytest

from tests.compiler.test_compiler import make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def _bf(*s):
    return {"shape": list(s), "dtype": "bfloat16"}


def test_chunk_of_a_transposed_projection(tmp_path):
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "gated_proj",
                     {"B": {"type": "var"}, "S": {"type": "var"}, "H": {"type": "const", "value": 48},
                      "P": {"type": "const", "value": 80}, "C": {"type": "const", "value": 40}},
                     {"x": _bf("B", "S", "H"), "w": _bf("P", "H")}, {"h": _bf("B", "C", "S"), "g": _bf("B", "C", "S")},
                     """
                     import torch
                     import torch.nn.functional as F
                     def run(x, w):
                         h, g = F.linear(x, w).transpose(1, 2).chunk(2, dim=1)
                         return h * torch.sigmoid(g), g * 2.0
                     """, [{"B": 2, "S": 11}])
    r = check_problem(p, cap=16)
    assert r["ok"], r


def test_chunk_of_a_row_slice(tmp_path):
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "slice_chunk",
                     {"R": {"type": "var"}, "C": {"type": "const", "value": 6}},
                     {"x": {"shape": ["R", "C"], "dtype": "float32"}},
                     {"a": {"shape": ["4", "C"], "dtype": "float32"}, "b": {"shape": ["4", "C"], "dtype": "float32"}},
                     """
                     import torch
                     def run(x):
                         a, b = x[2:10].chunk(2, dim=0)
                         return a + 1.0, b * 3.0
                     """, [{"R": 12}, {"R": 15}])
    r = check_problem(p, cap=16)
    assert r["ok"], r
