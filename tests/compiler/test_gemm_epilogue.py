"""An elementwise consumer of a GEMM's result fused into the GEMM's store (compiler/epilogue.py):
problems written here (relu of a linear with bias, gelu(x @ w + b), a SwiGLU gate silu(x @ wg^T) *
(x @ wu^T), a batched Q K^T with a scale, tanh and a residual, a SwiGLU MLP whose gate product is
the down projection's operand, a residual add after a projection, relu of a 3-D linear whose rows
are regrouped) lower to fewer kernels than without the fusion, on both the generic matmul and the
GEMM template, run on the CPU emulation against their reference and compile for sm_90a. Where the
result has another consumer (it is also a graph output, or a reduction reads it) or is read at
another index (a transposed output), the pointwise kernel stays.

Needs the compiler package (trace, lower, plan, emulate, check); skipped where it is absent."""

from __future__ import annotations

import pytest

lower = pytest.importorskip("solforge.compiler.lower")
api = pytest.importorskip("solforge.compiler.api")
check = pytest.importorskip("solforge.compiler.check")
tc = pytest.importorskip("tests.compiler.test_compiler")

pytestmark = pytest.mark.slow

B16 = lambda *s: {"shape": list(s), "dtype": "bfloat16"}  # noqa: E731
F32 = lambda *s: {"shape": list(s), "dtype": "float32"}  # noqa: E731
MKN = {"M": {"type": "var"}, "K": {"type": "const", "value": 96}, "N": {"type": "const", "value": 80}}
WLS = [{"M": 7}, {"M": 33}]

FUSED = {
    "lin_relu": (MKN, {"x": B16("M", "K"), "w": B16("N", "K"), "b": B16("N")}, {"y": B16("M", "N")},
                 """
                 import torch
                 def run(x, w, b):
                     return torch.relu(torch.nn.functional.linear(x, w, b))
                 """, WLS),
    "mm_bias_gelu": (MKN, {"x": B16("M", "K"), "w": B16("K", "N"), "b": B16("N")}, {"y": B16("M", "N")},
                     """
                     import torch
                     def run(x, w, b):
                         return torch.nn.functional.gelu(x @ w + b)
                     """, WLS),
    "swiglu": (MKN, {"x": B16("M", "K"), "wg": B16("N", "K"), "wu": B16("N", "K")}, {"y": B16("M", "N")},
               """
               import torch
               def run(x, wg, wu):
                   return torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())
               """, WLS),
    "residual_f32": (MKN, {"x": F32("M", "K"), "w": F32("N", "K"), "r": F32("M", "N")}, {"y": F32("M", "N")},
                     """
                     import torch
                     def run(x, w, r):
                         return x @ w.t() + r
                     """, WLS),
    # a SwiGLU MLP: the gate product is realised as the down projection's operand (a copy kernel
    # the gate GEMM absorbs) and the down projection's result is the output (an out kernel's copy)
    "swiglu_mlp": (MKN, {"x": B16("M", "K"), "wg": B16("N", "K"), "wu": B16("N", "K"), "wd": B16("K", "N")},
                   {"y": B16("M", "K")},
                   """
                   import torch
                   def run(x, wg, wu, wd):
                       h = torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())
                       return h @ wd.t()
                   """, WLS),
    # a batched matmul (bmm over a transposed operand): the batch index carries into the epilogue
    "bmm_tanh_residual": ({"Bt": {"type": "var"}, "S": {"type": "var"}, "D": {"type": "const", "value": 64}},
                          {"q": B16("Bt", "S", "D"), "k": B16("Bt", "S", "D"), "r": B16("Bt", "S", "S")},
                          {"s": B16("Bt", "S", "S")},
                          """
                          import torch
                          def run(q, k, r):
                              return torch.tanh(torch.matmul(q, k.transpose(1, 2)) * 0.125) + r
                          """, [{"Bt": 2, "S": 7}, {"Bt": 3, "S": 33}]),
    "lin3d_relu": ({"B": {"type": "var"}, "S": {"type": "var"}, "K": {"type": "const", "value": 64},
                    "N": {"type": "const", "value": 48}},
                   {"x": B16("B", "S", "K"), "w": B16("N", "K"), "b": B16("N")}, {"y": B16("B", "S", "N")},
                   """
                   import torch
                   def run(x, w, b):
                       return torch.relu(torch.nn.functional.linear(x, w, b))
                   """, [{"B": 2, "S": 5}, {"B": 3, "S": 17}]),
}

FEWER = {"swiglu_mlp": 2}   # kernels fewer than without the fusion where not 1

KEPT = {
    # the GEMM's result is a graph output as well as the relu's operand
    "also_output": (MKN, {"x": B16("M", "K"), "w": B16("N", "K")}, {"y": B16("M", "N"), "z": B16("M", "N")},
                    """
                    import torch
                    def run(x, w):
                        y = x @ w.t()
                        return y, torch.relu(y)
                    """, WLS),
    # a reduction reads the result too
    "also_reduced": (MKN, {"x": F32("M", "K"), "w": F32("N", "K")}, {"y": F32("M", "N"), "s": F32("M")},
                     """
                     import torch
                     def run(x, w):
                         h = x @ w.t()
                         return torch.relu(h), h.sum(dim=1)
                     """, WLS),
    # the output is the transposed result: each element reads another one of the GEMM's
    "transposed": (MKN, {"x": F32("M", "K"), "w": F32("N", "K")}, {"y": F32("N", "M")},
                   """
                   import torch
                   def run(x, w):
                       return torch.relu(x @ w.t()).t().contiguous()
                   """, WLS),
}


def _lowered(p, gemm: str, fused: bool, monkeypatch):
    """The candidate with and without the fusion (lowered here, past the compiler's caches)."""
    tr = api._traced(p.definition, list(p.workloads), 120)
    assert tr.ok, tr.reason
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(lower.epilogue, "fuse", lambda L: None)
        out = api.lower_ir(p.definition, tr.ir, gemm=gemm)
    assert out.ok, out.reason
    return out.candidate


@pytest.mark.parametrize("gemm", ["generic", "template"])
@pytest.mark.parametrize("name", sorted(FUSED))
def test_epilogue_fused_one_kernel_fewer(name, gemm, tmp_path, monkeypatch):
    from solforge.compile import compile_candidate

    axes, inputs, outputs, ref, wls = FUSED[name]
    p = tc.make_problem(tmp_path, name, axes, inputs, outputs, ref, wls)
    before = _lowered(p, gemm, False, monkeypatch)
    after = _lowered(p, gemm, True, monkeypatch)
    kb, ka = [ln.kernel for ln in before.launches], [ln.kernel for ln in after.launches]
    assert len(ka) == len(kb) - FEWER.get(name, 1), (kb, ka)
    # the pointwise kernel is gone; every GEMM stays
    n_mm = sum("mm" in k for k in kb)
    assert sum("mm" in k for k in ka) == n_mm and len(ka) == n_mm, (kb, ka)
    src = after.sources["kernel.cu"]
    assert ("sfg::gemm_" in src) == (gemm == "template")
    res = compile_candidate(after, arch="sm_90a")
    assert res.ok, res.log[-3000:]
    r = check.check_problem(p, candidate=after)
    assert r["ok"], r


@pytest.mark.parametrize("gemm", ["generic", "template"])
@pytest.mark.parametrize("name", sorted(KEPT))
def test_epilogue_kept_where_the_result_has_another_reader(name, gemm, tmp_path, monkeypatch):
    axes, inputs, outputs, ref, wls = KEPT[name]
    p = tc.make_problem(tmp_path, name, axes, inputs, outputs, ref, wls)
    before = _lowered(p, gemm, False, monkeypatch)
    after = _lowered(p, gemm, True, monkeypatch)
    assert [ln.kernel for ln in after.launches] == [ln.kernel for ln in before.launches]
    assert after.sources == before.sources
    r = check.check_problem(p, candidate=after)
    assert r["ok"], r
