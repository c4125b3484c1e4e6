"""The GEMM template behind the compiler's matmul lowering (templates/gemm_adapter.py): problems
written here (a linear with bias and relu, a batched Q K^T with a transposed operand and a scale,
an fp32 matmul with a transposed view, a conv2d, depthwise convolutions: causal conv1d and a 2-D
one with a channel multiplier) go through trace -> lower (matmul and convolution swapped for the
adapter's) -> plan, compile for sm_90a, and run on the CPU emulation against their reference.

Needs the compiler package (trace, lower, plan, emulate, check); skipped where it is absent."""

from __future__ import annotations

import importlib

import pytest

from solforge.compiler.templates import gemm_adapter

lower = pytest.importorskip("solforge.compiler.lower")
api = pytest.importorskip("solforge.compiler.api")
check = pytest.importorskip("solforge.compiler.check")
tc = pytest.importorskip("tests.compiler.test_compiler")

B16 = lambda *s: {"shape": list(s), "dtype": "bfloat16"}  # noqa: E731
F32 = lambda *s: {"shape": list(s), "dtype": "float32"}  # noqa: E731

PROBLEMS = {
    "lin_relu": ({"M": {"type": "var"}, "K": {"type": "const", "value": 96}, "N": {"type": "const", "value": 80}},
                 {"x": B16("M", "K"), "w": B16("N", "K"), "b": B16("N")}, {"y": B16("M", "N")},
                 """
                 import torch
                 def run(x, w, b):
                     return torch.relu(torch.nn.functional.linear(x, w, b))
                 """, [{"M": 7}, {"M": 33}]),
    "qkt": ({"Bt": {"type": "var"}, "S": {"type": "var"}, "D": {"type": "const", "value": 64}},
            {"q": B16("Bt", "S", "D"), "k": B16("Bt", "S", "D")}, {"s": B16("Bt", "S", "S")},
            """
            import torch
            def run(q, k):
                return torch.matmul(q, k.transpose(1, 2)) * 0.125
            """, [{"Bt": 2, "S": 7}, {"Bt": 3, "S": 33}]),
    "mm_f32_t": ({"M": {"type": "var"}, "K": {"type": "const", "value": 64}, "N": {"type": "const", "value": 48}},
                 {"x": F32("K", "M"), "w": F32("K", "N")}, {"y": F32("M", "N")},
                 """
                 import torch
                 def run(x, w):
                     return x.t() @ w
                 """, [{"M": 7}, {"M": 33}]),
    "conv": ({"Nb": {"type": "var"}, "H": {"type": "var"}},
             {"x": F32("Nb", 16, "H", "H"), "w": F32(32, 16, 3, 3), "b": F32(32)}, {"y": F32("Nb", 32, "H", "H")},
             """
             import torch
             def run(x, w, b):
                 return torch.nn.functional.conv2d(x, w, b, padding=1)
             """, [{"Nb": 1, "H": 8}, {"Nb": 2, "H": 12}]),
    "dwconv_causal": ({"Bt": {"type": "var"}, "L": {"type": "var"}, "C": {"type": "const", "value": 24}},
                      {"x": B16("Bt", "C", "L"), "w": B16("C", 1, 4), "b": B16("C")}, {"y": B16("Bt", "C", "L")},
                      """
                      import torch
                      def run(x, w, b):
                          L = x.shape[-1]
                          return torch.nn.functional.conv1d(x, w, b, padding=3, groups=x.shape[1])[..., :L]
                      """, [{"Bt": 2, "L": 9}, {"Bt": 1, "L": 20}]),
    "dwconv2d_f32": ({"Nb": {"type": "var"}, "H": {"type": "var"}},
                     {"x": F32("Nb", 6, "H", "H"), "w": F32(12, 1, 3, 3)}, {"y": F32("Nb", 12, "H", "H")},
                     """
                     import torch
                     def run(x, w):
                         return torch.nn.functional.conv2d(x, w, None, padding=1, groups=6)
                     """, [{"Nb": 1, "H": 5}, {"Nb": 2, "H": 7}]),
}


@pytest.fixture
def adapter_lowering(monkeypatch):
    generic = importlib.import_module("solforge.compiler.generic")  # the lowering's generic kernels
    monkeypatch.setattr(generic, "matmul", gemm_adapter.matmul)
    monkeypatch.setitem(lower.LOWER, "aten.convolution.default", gemm_adapter.lower_convolution)
    api._CACHE.clear()
    yield
    api._CACHE.clear()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_adapter_candidates_compile_and_match_the_reference(name, tmp_path, adapter_lowering):
    from solforge.compile import compile_candidate

    axes, inputs, outputs, ref, wls = PROBLEMS[name]
    p = tc.make_problem(tmp_path, name, axes, inputs, outputs, ref, wls)
    out = api.compile_problem(p)
    assert out.ok, out.reason
    src = out.candidate.sources["kernel.cu"]
    if name.startswith("dwconv"):          # depthwise: the direct kernel, no GEMM
        assert "dwconv" in src and "sfg::gemm_" not in src
    else:                                  # the template, not the generic tiled kernel
        assert "sfg::gemm_" in src
    res = compile_candidate(out.candidate, arch="sm_90a")
    assert res.ok, res.log[-3000:]
    r = check.check_problem(p, candidate=out.candidate)
    assert r["ok"], r


@pytest.mark.slow
def test_a_size_counted_on_the_device_takes_the_generic_matmul(tmp_path):
    """K is read back from the device (one more than the largest index): the template's sizes are
    host-side launch arguments, so this matmul stays generic and no launch names the count."""
    p = tc.make_problem(tmp_path, "dynk", {"n": {"type": "var"}, "D": {"type": "const", "value": 8}},
                        {"idx": {"shape": ["n"], "dtype": "int64"}, "w": F32("n", "D")},
                        {"y": F32(1, "D")},
                        """
                        import torch
                        def run(idx, w):
                            pos = idx.abs() % w.shape[0]
                            m = int(pos.max().item()) + 1
                            acc = torch.zeros(m, w.shape[1], device=w.device).index_add_(0, pos, w)
                            return torch.ones(1, m, device=w.device) @ acc
                        """, [{"n": 5}, {"n": 9}])
    out = api.compile_problem(p, gemm="template")
    assert out.ok, out.reason
    launches = repr([(la.grid, la.block, la.args) for la in out.candidate.launches])
    assert "dyn" not in launches, launches
    r = check.check_problem(p, candidate=out.candidate)
    assert r["ok"], r
