"""The compiler family's GEMM lowering is a tunable: the first param set lowers matmuls through the
GEMM template (the first candidate), the second keeps the generic tiled kernel, and both compile for
sm_90a. Problems written here: a linear layer with a transposed weight and a bias; an attention
output projection whose operand is reshaped across strides."""

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


def test_an_operand_reshaped_across_strides_is_copied_once_before_the_gemm(tmp_path):
    """x.transpose(1, 2).reshape(b, s, h * d) is no strided view: read in place, every element of the
    GEMM's tile loads would pay a division and a modulo by the runtime sizes (a 1 ms GEMM ran 250 ms
    on the H200). The lowering copies it contiguously first and the template reads plain strides."""
    from solforge.compile import compile_candidate
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "attn_out_proj",
                     {"B": {"type": "var"}, "S": {"type": "var"}, "H": {"type": "const", "value": 4},
                      "D": {"type": "const", "value": 16}, "N": {"type": "const", "value": 24}},
                     {"a": {"shape": ["B", "H", "S", "D"], "dtype": "bfloat16"},
                      "w": {"shape": ["N", 64], "dtype": "bfloat16"}},
                     {"y": {"shape": ["B", "S", "N"], "dtype": "bfloat16"}},
                     """
                     import torch
                     def run(a, w):
                         b, h, s, d = a.shape
                         return torch.matmul(a.transpose(1, 2).reshape(b, s, h * d), w.t())
                     """, [{"B": 2, "S": 5}, {"B": 3, "S": 17}])
    for gemm in ("generic", "template"):
        out = compile_problem(p, gemm=gemm)
        assert out.ok, out.reason
        kinds = [l.kernel.split("_", 1)[1] for l in out.candidate.launches]
        assert kinds[:2] == ["copy", "mm"], kinds
    assert check_problem(p, cap=40, candidate=compile_problem(p).candidate)["ok"]
    res = compile_candidate(compile_problem(p, gemm="template").candidate, "sm_90a")
    assert res.ok, res.log[-2000:]


def test_fp32_multiplies_get_a_3xtf32_point_after_the_template(tmp_path):
    """A plan that multiplies fp32 operands gets one more point: the GEMM template with those
    multiplies on tensor cores as 3xTF32 (fp32-level error), after the template and generic points;
    it compiles for sm_90a. A 16-bit plan gets none (test above: two points)."""
    from solforge.compile import compile_candidate
    from solforge.compiler.templates.gemm import valid_params
    from solforge.compiler.templates.gemm_adapter import on_tensor_cores
    from solforge.kernels.compiled import GEMM_PARAM, CompiledFamily

    p = make_problem(tmp_path, "lin_fp32",
                     {"M": {"type": "var"}, "K": {"type": "const", "value": 96},
                      "N": {"type": "const", "value": 300}},
                     {"x": {"shape": ["M", "K"], "dtype": "float32"},
                      "w": {"shape": ["N", "K"], "dtype": "float32"},
                      "b": {"shape": ["N"], "dtype": "float32"}},
                     {"y": {"shape": ["M", "N"], "dtype": "float32"}},
                     """
                     import torch
                     def run(x, w, b):
                         return torch.relu(torch.nn.functional.linear(x, w, b))
                     """, [{"M": 7}, {"M": 1000}])
    fam = CompiledFamily()
    space = fam.param_space(p)
    assert [s[GEMM_PARAM] for s in space] == [1, 0, 2], space
    simt, tf32 = fam.instantiate(p, space[0]), fam.instantiate(p, space[2])
    assert tf32.params[GEMM_PARAM] == 2
    src_s, src_t = ("\n".join(c.sources.values()) for c in (simt, tf32))
    assert "sfg::gemm_simt<" in src_s and "sfg::gemm_tf32<" not in src_s
    # every fp32 GEMM of the plan on tensor cores, three passes (3xTF32), none left on SIMT
    assert "sfg::gemm_tf32<" in src_t and "sfg::gemm_simt<" not in src_t
    import re

    calls = re.findall(r"sfg::gemm_tf32<[^>]*>\(", src_t)
    assert len(calls) == 2 and all(c.endswith(", 3>(") for c in calls), calls  # a tier per M range
    res = compile_candidate(tf32, "sm_90a")
    assert res.ok, res.log[-2000:]
    # the tensor-core tiles are valid template configs whatever SIMT tiles they replace
    from solforge.compiler.templates import gemm as G

    spec = G.GemmSpec(name="t", a=G.Operand.k_major("A", "float32", "K"),
                      b=G.Operand.k_major("B", "float32", "K"), m="M", n="N", k="K",
                      out=G.Output("C", "float32"))
    for m in (None, 8, 200, 5000):
        params = on_tensor_cores(G.default_params(spec, m, 300, 96, 1))
        assert valid_params(spec, params), params
