"""The attention segment in the compiler's plan: a softmax(Q K^T) V written here (head transposes,
a causal mask built with triu, fp32 softmax) is lowered with the flash template as its own source unit
when the family's COMPILER_ATTENTION point asks for it; the plan is checked on the CPU (the generic
kernels built with g++, the template through its CPU model, workspace offsets as the plan wrote them)
against the sandboxed reference, and compiles for sm_90a with NVRTC."""

from __future__ import annotations

import shutil

import pytest

from tests.compiler.test_compiler import make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def _bf(*shape):
    return {"shape": list(shape), "dtype": "bfloat16"}


def _problem(tmp_path, extra_out: bool = False):
    ret = "o, s.float().sum()" if extra_out else "o"
    return make_problem(
        tmp_path, "causal_mha",
        {"B": {"type": "const", "value": 2}, "S": {"type": "var"}, "H": {"type": "const", "value": 3},
         "D": {"type": "const", "value": 40}},
        {"q": _bf("B", "S", "H", "D"), "k": _bf("B", "S", "H", "D"), "v": _bf("B", "S", "H", "D"),
         "w": _bf("D", "D")},
        {"o": _bf("B", "S", "H", "D"), **({"t": {"shape": [], "dtype": "float32"}} if extra_out else {})},
        f"""
        import torch
        def run(q, k, v, w):
            q = q @ w                                   # a computed Q: realised into the workspace
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            s = torch.matmul(q, k.transpose(-1, -2)) * 0.15
            n = s.shape[-1]
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=s.device), 1)
            p = torch.softmax(s.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
            o = torch.matmul(p, v).transpose(1, 2).contiguous()
            return {ret}
        """, [{"S": 29}, {"S": 70}])


def test_attention_point_uses_the_flash_template_and_matches_the_reference(tmp_path):
    from solforge.compile import compile_candidate
    from solforge.compiler.check import check_problem
    from solforge.kernels.compiled import ATTN_PARAM, GEMM_PARAM, CompiledFamily

    p = _problem(tmp_path)
    fam = CompiledFamily()
    space = fam.param_space(p)
    # the flash plan first (it never materialises the scores), then the GEMM template, then generic
    assert [(s[GEMM_PARAM], s[ATTN_PARAM]) for s in space] == [(1, 1), (1, 0), (0, 0)], space
    flash, generic = fam.instantiate(p, space[0]), fam.instantiate(p, space[2])
    assert list(generic.sources) == ["kernel.cu"]
    units = [u for u in flash.sources if u != "kernel.cu"]
    assert len(units) == 1 and any(l.kernel.endswith("_fwd") for l in flash.launches)
    for cand in (generic, flash):
        r = check_problem(p, cap=40, candidate=cand)
        assert r["ok"], r
    res = compile_candidate(flash, "sm_90a")
    assert res.ok, res.log[-2000:]
    assert set(res.cubins) == {"kernel.cu", units[0]}


def test_a_wrong_scale_in_the_segment_fails_the_check(tmp_path):
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = _problem(tmp_path)
    out = compile_problem(p, gemm="template", attention=True)
    assert out.ok and out.segments.get("attention") == 1, out.reason
    cand = out.candidate.model_copy(deep=True)
    fwd = next(l for l in cand.launches if l.kernel.endswith("_fwd"))
    fwd.args = [a.replace("0.15", "0.3") if a.startswith("float32:") else a for a in fwd.args]
    assert any("0.3" in a for a in fwd.args)
    assert not check_problem(p, cap=40, candidate=cand)["ok"]


def test_probabilities_used_outside_keep_the_generic_kernels(tmp_path):
    from solforge.compiler.api import compile_problem

    # the scores are also summed into a second output: the segment would hide a value others read
    p = _problem(tmp_path, extra_out=True)
    out = compile_problem(p, gemm="template", attention=True)
    assert out.ok and not out.segments.get("attention"), (out.reason, out.segments)
