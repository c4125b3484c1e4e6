"""NVFP4 references (quantize on the fly, pack two E2M1 codes per byte, blocked scale layout,
torch._scaled_mm on float4_e2m1fn_x2, a global scale read back with .item()) compiled, run on the
CPU through the g++ emulation and compared with the reference as the evaluator runs it on Hopper
(the labelled dequantizing substitute for FP4 _scaled_mm), on a problem written here."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from solforge.compiler.check import check_problem
from solforge.problem.loader import load_problem_dir

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

# A quantizer written the way NVFP4 references write it: global amax, per-16 block scales in E4M3,
# a degenerate-scale fix-up branch, masked assignments for the E2M1 code, nibble packing.
QUANT = """
import math
import torch

E2M1_MAX = 6.0
E4M3_MAX = 448.0


def quantize(t):
    rows, cols = t.shape
    amax = torch.max(torch.abs(t)).to(torch.float32)
    blocks = t.view(rows, cols // 16, 16).to(torch.float32)
    decode = blocks.abs().amax(dim=-1) / E2M1_MAX
    g_enc = torch.div(torch.tensor(E4M3_MAX * E2M1_MAX, device=t.device), amax)
    g_enc = torch.clamp(g_enc, max=torch.tensor(torch.finfo(torch.float32).max, device=t.device))
    if g_enc == 0.0:
        g_enc = torch.tensor(1.0, device=t.device, dtype=torch.float32)
    g_dec = torch.div(1.0, g_enc)
    decode = torch.clamp(decode * g_enc, min=-E4M3_MAX, max=E4M3_MAX).to(torch.float8_e4m3fn)
    enc = torch.div(1.0, decode.to(torch.float32) * g_dec)
    x = torch.clamp(blocks * enc.unsqueeze(-1), -E2M1_MAX, E2M1_MAX).reshape(rows, cols)
    code = torch.zeros_like(x, dtype=torch.uint8)
    code[(x > 0.25) & (x < 0.75)] = 1
    code[(x >= 0.75) & (x <= 1.25)] = 2
    code[(x > 1.25) & (x < 1.75)] = 3
    code[(x >= 1.75) & (x <= 2.5)] = 4
    code[(x > 2.5) & (x < 3.5)] = 5
    code[(x >= 3.5) & (x <= 5.0)] = 6
    code[x > 5.0] = 7
    code[(x >= -0.25) & (x < 0.0)] = 8
    code[(x < -0.25) & (x > -0.75)] = 9
    code[(x <= -0.75) & (x >= -1.25)] = 10
    code[(x < -1.25) & (x > -1.75)] = 11
    code[(x <= -1.75) & (x >= -2.5)] = 12
    code[(x < -2.5) & (x > -3.5)] = 13
    code[(x <= -3.5) & (x >= -5.0)] = 14
    code[x < -5.0] = 15
    packed = code[..., ::2] + code[..., 1::2] * 16
    return packed.view(torch.float4_e2m1fn_x2), decode, g_dec


def blocked(scales):
    rows, cols = scales.shape
    blocks = scales.view(math.ceil(rows / 128), 128, math.ceil(cols / 4), 4).permute(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


def get_inputs(axes_and_scalars, device):
    torch.manual_seed(0)
    x = torch.randn(axes_and_scalars["M"], 64, dtype=torch.bfloat16, device=device)
    w, ws, wg = quantize(torch.randn(128, 64, dtype=torch.float32, device=device))
    return {"x": x, "w": w, "w_scales": ws, "w_global": wg.item()}


def run(x, w, w_scales, w_global):
    xq, xs, xg = quantize(x.to(torch.float32))
    out = torch._scaled_mm(xq, w.transpose(0, 1), blocked(xs), blocked(w_scales),
                           bias=None, out_dtype=torch.bfloat16)
    return out * (xg.item() * w_global)
"""


# The same with a batch: quantized per batch (3-D), one _scaled_mm per batch in a Python loop over
# the batch size writing its own slice of the output (traced as one batched body, not unrolled).
BATCHED = QUANT.replace("def get_inputs", "def _unused_get_inputs").replace("def run(", "def _unused_run(") + """

def get_inputs(axes_and_scalars, device):
    torch.manual_seed(0)
    x = torch.randn(axes_and_scalars["B"], axes_and_scalars["M"], 64, dtype=torch.bfloat16,
                    device=device)
    w, ws, wg = quantize(torch.randn(128, 64, dtype=torch.float32, device=device))
    return {"x": x, "w": w, "w_scales": ws, "w_global": wg.item()}


def run(x, w, w_scales, w_global):
    b, m, k = x.shape
    xq, xs, xg = quantize(x.reshape(b * m, k).to(torch.float32))
    xq, xs = xq.view(b, m, k // 2).permute(1, 2, 0), xs.view(b, m, k // 16).permute(1, 2, 0)
    out = torch.empty((m, w.shape[0], b), device=x.device, dtype=torch.bfloat16)
    for i in range(b):
        r = torch._scaled_mm(xq[:, :, i], w.transpose(0, 1), blocked(xs[:, :, i]),
                             blocked(w_scales), bias=None, out_dtype=torch.bfloat16)
        out[:, :, i] = r * (xg * w_global)
    return out.permute(2, 0, 1)
"""


def _problem(tmp_path, batched: bool = False):
    name = "nvfp4_batched" if batched else "nvfp4_linear"
    d = tmp_path / name
    d.mkdir()
    defn = {"name": name, "custom_inputs_entrypoint": "get_inputs",
            "axes": {"M": {"type": "var"}, "K": {"type": "const", "value": 64},
                     "N": {"type": "const", "value": 128}, "KH": {"type": "const", "value": 32},
                     "KS": {"type": "const", "value": 4}},
            "constraints": ["M % 128 == 0"],
            "inputs": {"x": {"shape": ["B", "M", "K"] if batched else ["M", "K"], "dtype": "bfloat16"},
                       "w": {"shape": ["N", "KH"], "dtype": "float4_e2m1fn_x2"},
                       "w_scales": {"shape": ["N", "KS"], "dtype": "float8_e4m3fn"},
                       "w_global": {"shape": None, "dtype": "float32"}},
            "outputs": {"y": {"shape": ["B", "M", "N"] if batched else ["M", "N"],
                              "dtype": "bfloat16"}},
            "reference": textwrap.dedent(BATCHED if batched else QUANT)}
    if batched:
        defn["axes"]["B"] = {"type": "var"}
    (d / "definition.json").write_text(json.dumps(defn))
    rows = [{"uuid": f"q{i}", "axes": {"M": m, **({"B": bb} if batched else {})},
             "inputs": {k: {"type": "custom"} for k in defn["inputs"]},
             "tolerance": {"max_atol": 0.005, "max_rtol": 0.02, "required_matched_ratio": 0.99}}
            for i, (m, bb) in enumerate(((128, 2), (256, 3)))]
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_problem_dir(d)


def test_nvfp4_quantize_and_scaled_mm_match_the_reference(tmp_path):
    r = check_problem(_problem(tmp_path), cap=128)
    assert r["ok"], r


def test_nvfp4_batched_loop_over_a_symbolic_size_is_one_batched_body(tmp_path):
    from solforge.compiler.api import compile_problem

    p = _problem(tmp_path, batched=True)
    out = compile_problem(p)
    assert out.ok, out.reason
    # one matmul for every batch (not one per iteration)
    assert out.ops.get("aten.bmm.default", 0) + out.ops.get("aten.mm.default", 0) == 1, out.ops
    r = check_problem(p, cap=128)
    assert r["ok"], r
    assert r["axes"]["B"] >= 2
