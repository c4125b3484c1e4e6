"""A reshape of a reshape that neither folds into strides (a computed value's, with sizes only
known at run time), on a problem written here: each such reshape indexes its source through a
division and a modulo per dim, so a chain of them nests those expressions inside each other (one
load index of 3.9 MB in a reference with a few such chains). The source of the second is written
to a buffer first, so the second reshape is a plain strided view. Lowered, NVRTC-compiled for sm_90a
and emulated on the CPU against the reference."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, _compile_ok, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def test_a_reshape_of_a_reshaped_computed_value_reads_a_buffer(tmp_path):
    p = make_problem(tmp_path, "reshape_chain", {"B": {"type": "var"}, "S": {"type": "var"},
                                                 "D": {"type": "const", "value": 32}},
                     {"x": T("B", "S", "D")}, {"y": T("B", "S", "D")},
                     """
                     import torch
                     def run(x):
                         b, s, d = x.shape
                         y = (x * 2.0).reshape(b, s * d // 16, 16)      # a computed value: re-indexed
                         z = y.reshape(b, 16, s * d // 16)              # a reshape of that reshape
                         return z.reshape(b, s, d) - 1.0
                     """, [{"B": 2, "S": 16}, {"B": 3, "S": 48}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert any(la.kernel.endswith("_copy") for la in out.candidate.launches)   # the chain is cut
    r = check_problem(p, cap=64, candidate=out.candidate)   # unshrunk: the variants' guards hold
    assert r["ok"], r
    _compile_ok(out.candidate)
