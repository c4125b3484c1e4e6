"""A tensor updated in place in a Python loop of 40 steps (64 in the reference it is modelled on) (`a[..., i, :i] = row + (row * sub).sum`,
the forward substitution of chunked delta-rule attention), on a problem written here: each step's
value is a where over the previous one, so inlining it whole made every reader re-emit a 64-deep
chain (minutes of lowering, megabytes of source). Chains past REALIZE_COST ops are written to a
buffer; the loop's step results share one workspace slot. Lowered, NVRTC-compiled for sm_90a and
emulated on the CPU against the reference."""

from __future__ import annotations

import shutil
import time

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, _compile_ok, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def test_a_40_step_in_place_loop_lowers_in_seconds_and_is_right(tmp_path):
    p = make_problem(tmp_path, "fwd_subst", {"B": {"type": "var"}, "C": {"type": "const", "value": 40}},
                     {"x": T("B", "C", "C")}, {"y": T("B", "C", "C")},
                     """
                     import torch
                     def run(x):
                         a = -(x * 0.05).tril(-1)
                         for i in range(1, x.shape[-1]):
                             row = a[..., i, :i].clone()
                             sub = a[..., :i, :i].clone()
                             a[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
                         return a + torch.eye(x.shape[-1], dtype=a.dtype, device=a.device)
                     """, [{"B": 3}, {"B": 5}])
    t0 = time.monotonic()
    out = compile_problem(p)
    took = time.monotonic() - t0
    assert out.ok, out.reason
    src = out.candidate.sources["kernel.cu"]
    # the chain is cut: copies of the running value, a source that stays small, found in seconds
    assert sum(la.kernel.endswith("_copy") for la in out.candidate.launches) >= 3
    assert len(src) < 2_000_000, len(src)
    assert took < 240, took
    # 39 step sums of growing sizes, each dead before the next: a short workspace expression
    assert len(out.candidate.workspace) < 2000, out.candidate.workspace[:300]
    _compile_ok(out.candidate)
    r = check_problem(p, cap=4, candidate=out.candidate)
    assert r["ok"], r
