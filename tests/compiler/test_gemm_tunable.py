"""The compiler family's GEMM lowering is a tunable: the first param set keeps the generic tiled
kernel (the first candidate), the second lowers matmuls through the GEMM template, and both compile
for sm_90a. A problem written here: a linear layer with a transposed weight and a bias."""

from __future__ import annotations

import pytest

from tests.compiler.test_compiler import make_problem

pytestmark = pytest.mark.slow


def test_gemm_lowering_is_a_searched_tunable(tmp_path):
    from solforge.compile import compile_candidate
    from solforge.kernels.compiled import GEMM_PARAM, CompiledFamily

    p = make_problem(tmp_path, "lin_bias",
                     {"M": {"type": "var"}, "K": {"type": "const", "value": 96},
                      "N": {"type": "const", "value": 80}},
                     {"x": {"shape": ["M", "K"], "dtype": "bfloat16"},
                      "w": {"shape": ["N", "K"], "dtype": "bfloat16"},
                      "b": {"shape": ["N"], "dtype": "bfloat16"}},
                     {"y": {"shape": ["M", "N"], "dtype": "bfloat16"}},
                     """
                     import torch
                     def run(x, w, b):
                         return torch.nn.functional.linear(x, w, b)
                     """, [{"M": 7}, {"M": 33}])
    fam = CompiledFamily()
    space = fam.param_space(p)
    # the template first (the first candidate), the generic kernel next
    assert [s[GEMM_PARAM] for s in space] == [1, 0], space
    assert fam.default_params(p)[GEMM_PARAM] == 1
    template, generic = (fam.instantiate(p, s) for s in space)
    assert generic.params[GEMM_PARAM] == 0 and template.params[GEMM_PARAM] == 1
    src_g, src_t = ("\n".join(c.sources.values()) for c in (generic, template))
    assert src_g != src_t and "sfg" in src_t and "sfg" not in src_g
    for cand in (generic, template):
        res = compile_candidate(cand, "sm_90a")
        assert res.ok, res.log[-2000:]
