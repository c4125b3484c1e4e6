"""A plan with variants selected by sizes: each variant's launches carry their guards as `when`, so
the host launches one variant and a template GEMM (rendered whole, with no guard of its own) can be
one of its kernels. Problems written here; NVRTC compiles the plan on the CPU."""

from __future__ import annotations

import shutil

import pytest

from solforge.candidate import Candidate, launch_env
from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem
from solforge.problem import axis_expr

from .test_compiler import T, make_problem

REF = """
import torch
def run(x, w):
    if x.shape[0] == 1:
        return (x[0] @ w.t()).unsqueeze(0) * 2.0
    return torch.relu(torch.matmul(x, w.t())) + 1.0
"""


def _problem(tmp_path):
    return make_problem(tmp_path, "bvar", {"B": {"type": "var"}, "M": {"type": "var"},
                                           "K": {"type": "const", "value": 64},
                                           "N": {"type": "const", "value": 96}},
                        {"x": T("B", "M", "K"), "w": T("N", "K")}, {"y": T("B", "M", "N")},
                        REF, [{"B": 1, "M": 40}, {"B": 3, "M": 24}, {"B": 2, "M": 70}, {"B": 1, "M": 9}])


def _taken(cand, w) -> set:
    env = launch_env(w.axes, w.scalars(), cand.params)
    return {l.kernel.split("k", 1)[0] for l in cand.launches
            if not l.when or axis_expr.evaluate(l.when, env)}


def test_size_variants_take_a_template_gemm_launched_by_when(tmp_path, monkeypatch):
    p = _problem(tmp_path)
    out = compile_problem(p, gemm="template")
    assert out.ok, out.reason
    cand = out.candidate
    assert out.segments.get("variants") == 2
    assert all(l.when for l in cand.launches)
    # each workload launches the kernels of exactly one variant, the one its batch size selects
    picks = {w.axes["B"]: _taken(cand, w) for w in p.workloads}
    assert all(len(t) == 1 for t in picks.values()) and picks[1] != picks[3] and picks[3] == picks[2]
    from solforge.compile import compile_candidate

    res = compile_candidate(cand, "sm_90a", use_cache=False)
    assert res.ok, res.log
    # the family offers it first while its source is small (settings.template_first_max_kb);
    # past that bound the generic plan, quick to compile, comes first
    from solforge.kernels.compiled import GEMM_PARAM, CompiledFamily

    kb = sum(len(v) for v in cand.sources.values()) / 1000.0
    # (2: the template with its fp32 multiplies as 3xTF32, after the others)
    assert [s[GEMM_PARAM] for s in CompiledFamily().param_space(p)] == [1, 0, 2]
    monkeypatch.setenv("SOLFORGE_TEMPLATE_FIRST_MAX_KB", str(kb / 2))
    assert [s[GEMM_PARAM] for s in CompiledFamily().param_space(p)] == [0, 1, 2]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_size_variants_emulated_through_when(tmp_path):
    """The generic plan (the CPU emulation runs it) skips the other variant's launches as the
    launcher does, at a workload of each variant."""
    p = _problem(tmp_path)
    out = compile_problem(p)
    assert out.ok, out.reason
    assert all(l.when for l in out.candidate.launches)
    r = check_problem(p, cap=8, candidate=out.candidate)
    assert r["ok"], r
    assert r["axes"]["B"] == 1


ATTN_REF = """
import torch
def run(q, k, v):
    if q.shape[0] == 1:
        p = torch.softmax((q[0] @ k[0].transpose(-1, -2)) * 0.125, dim=-1)
        return (p @ v[0]).unsqueeze(0)
    p = torch.softmax((q @ k.transpose(-1, -2)) * 0.125, dim=-1)
    return p @ v
"""


def _attention_problem(tmp_path):
    """softmax(QK^T)V whose batch-1 branch makes a second variant."""
    return make_problem(tmp_path, "avar", {"B": {"type": "var"}, "S": {"type": "var"},
                                           "H": {"type": "const", "value": 2},
                                           "D": {"type": "const", "value": 64}},
                        {"q": T("B", "H", "S", "D"), "k": T("B", "H", "S", "D"), "v": T("B", "H", "S", "D")},
                        {"o": T("B", "H", "S", "D")}, ATTN_REF,
                        [{"B": 1, "S": 40}, {"B": 2, "S": 24}, {"B": 3, "S": 17}])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_size_variants_take_the_attention_template(tmp_path):
    """Each variant's softmax(QK^T)V becomes the flash template (its own source unit), launched by
    the variant's `when`; the CPU model of the template runs the taken variant's launches."""
    from solforge.compile import compile_candidate

    p = _attention_problem(tmp_path)
    out = compile_problem(p, gemm="template", attention=True)
    assert out.ok, out.reason
    assert out.segments.get("attention") == 2 and out.segments.get("variants") == 2
    assert all(l.when for l in out.candidate.launches)
    assert len(out.candidate.sources) == 3      # kernel.cu and one unit per variant's attention
    assert compile_candidate(out.candidate, "sm_90a", use_cache=False).ok
    for w in p.workloads:
        assert len(_taken(out.candidate, w)) == 1
    r = check_problem(p, cap=8, candidate=out.candidate)
    assert r["ok"], r


def test_point_order_flash_then_gemm_template_then_generic_and_the_bound(tmp_path, monkeypatch):
    """The family's search order on a variant plan with attention: the flash plan first (it never
    materialises the scores), the GEMM template next, the generic plan last; a template plan past
    template_first_max_kb moves behind the generic one (in the reverse order)."""
    from solforge.kernels.compiled import ATTN_PARAM, GEMM_PARAM, CompiledFamily

    p = _attention_problem(tmp_path)

    def order():
        return [(s[GEMM_PARAM], s[ATTN_PARAM]) for s in CompiledFamily().param_space(p)]

    # fp32 operands: the GEMM template point again with its fp32 multiplies as 3xTF32, last (the
    # flash plan keeps no GEMM outside the attention it absorbs: no such point of its own)
    assert order() == [(1, 1), (1, 0), (0, 0), (2, 0)]
    monkeypatch.setenv("SOLFORGE_TEMPLATE_FIRST_MAX_KB", "0.001")
    assert order() == [(0, 0), (1, 0), (1, 1), (2, 0)]


def test_when_is_validated_and_leaves_old_hashes_alone():
    base = {"problem": "p", "language": "cuda", "sources": {"k.cu": "__global__ void k() {}"},
            "launches": [{"kernel": "k", "grid": ["1"], "block": ["32"]}]}
    plain = Candidate.model_validate(base)
    explicit = Candidate.model_validate({**base, "launches": [{**base["launches"][0], "when": None}]})
    guarded = Candidate.model_validate({**base, "launches": [{**base["launches"][0], "when": "n == 1"}]})
    assert plain.source_hash() == explicit.source_hash() != guarded.source_hash()
    with pytest.raises(ValueError):
        Candidate.model_validate({**base, "launches": [{**base["launches"][0], "when": "__import__('os')"}]})
