"""The GEMM template on a matmul whose M is a count read on the device (the rows one expert of an MoE
loop gathers): launched for M's upper bound, the count taken at the kernel's entry, blocks past it
return. NVRTC-compiled for sm_90a and checked on the CPU (g++ emulation) against the reference, with
experts that get no row at all; problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import B, _compile_ok
from .test_dynamic import _moe

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


@pytest.mark.parametrize("experts,cap", [(4, 8), (8, 2)])
def test_counted_rows_run_on_the_template(tmp_path, experts, cap):
    p = _moe(tmp_path, f"moe_t{experts}", dtype=B, E=experts)
    out = compile_problem(p, gemm="template")
    assert out.ok, out.reason
    src = out.candidate.sources["kernel.cu"]
    # every expert GEMM is the template's, taking its M from the count
    assert src.count("if (sfg_rows < (long long)p.M) p.M = (int)sfg_rows;") >= 2
    assert "dyn" not in repr(out.candidate.launches)
    _compile_ok(out.candidate)
    r = check_problem(p, cap=cap, candidate=out.candidate)
    assert r["ok"], r
