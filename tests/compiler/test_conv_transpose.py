"""Transposed convolutions (lower_conv_transpose.py) run on the CPU through the g++ emulation and
compared with torch, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import B, T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def _check(p):
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


def test_conv_transpose2d_stride_padding_output_padding_groups(tmp_path):
    _check(make_problem(tmp_path, "ct", {"N": {"type": "var"}, "H": {"type": "var"},
                                         "C": {"type": "const", "value": 4},
                                         "O": {"type": "const", "value": 6},
                                         "HO": {"type": "expr", "expression": "(H - 1) * 2 - 2 + 3 + 1"},
                                         "H2": {"type": "expr", "expression": "H + 2"}},
                        {"x": T("N", "C", "H", "H"), "w": T("C", 3, 3, 3), "b": T("O"),
                         "w2": T("C", 2, 3, 3)},
                        {"y": T("N", "O", "HO", "HO"), "z": T("N", 4, "H2", "H2")},
                        """
                        import torch
                        import torch.nn.functional as F
                        def run(x, w, b, w2):
                            y = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2)
                            z = F.conv_transpose2d(x, w2, None, stride=1, groups=2)
                            return y, z
                        """, [{"N": 2, "H": 5}]))


def test_conv_transpose1d_dilation_bf16(tmp_path):
    _check(make_problem(tmp_path, "ct1", {"N": {"type": "var"}, "L": {"type": "var"},
                                          "C": {"type": "const", "value": 8},
                                          "LO": {"type": "expr", "expression": "(L - 1) * 3 + 2 * 3 + 1"}},
                        {"x": B("N", "C", "L"), "w": B("C", 5, 4)},
                        {"y": B("N", 5, "LO")},
                        """
                        import torch
                        def run(x, w):
                            return torch.nn.functional.conv_transpose1d(x, w, stride=3, dilation=2)
                        """, [{"N": 3, "L": 7}]))
