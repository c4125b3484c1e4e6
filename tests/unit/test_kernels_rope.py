"""RoPE, RoPE-table and softmax-backward families: which problems they claim, what they read from
the reference, real NVRTC compiles, launch grids over every workload, and the RoPE-table kernel
run on the host (its .cu compiled with g++ through a small CUDA shim) against the reference."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from solforge.candidate import eval_expr, launch_env
from solforge.kernels import FamilyError, families_for, get_family
from solforge.kernels.base import CUDA_DIR
from solforge.kernels.build import compile_cuda_candidate
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

NEW_FAMILIES = ("pointwise", "rope", "rope_freqs", "softmax_backward")


@pytest.fixture(autouse=True)
def _all_offered(monkeypatch):
    """Matching is tested with every new family offered, whatever its GPU gate says today (the
    gate itself: test_gate_is_read_from_family_json)."""
    for name in NEW_FAMILIES:
        monkeypatch.setattr(type(get_family(name)), "offered", property(lambda self: True))

SERVED = {"L1/088_rotary_position_embedding_application": "rope",
          "L1/071_kv_cache_update_with_rope": "rope",
          "L1/034_flux_multi_axis_rope_frequency_computation": "rope_freqs",
          "L1/066_masked_softmax_with_attention_dropout_backward": "softmax_backward"}
# RoPE-adjacent problems with more in them (norms, attention, backward sums, index math)
NOT_SERVED = ["L1/062_kv_cache_update_with_rope_backward", "L1/011_rotary_position_embedding",
              "L1/012_fused_cos_sin_embedding_generation", "L1/047_attention_with_qk_norm_and_rope",
              "L1/018_fused_rope_with_qk_norm_and_kv_cache_update",
              "L1/024_vision_rotary_position_embedding_generation_backward",
              "L1/001_attention_softmax_dropout_value_matmul_backward"]


@pytest.mark.parametrize("rel", sorted(SERVED))
def test_served_compiles_and_grid_covers(sol_execbench_dir, rel):
    problem = load_problem_dir(sol_execbench_dir / rel)
    assert [f.name for f in families_for(problem)] == [SERVED[rel]]
    fam = get_family(SERVED[rel])
    space = fam.param_space(problem)
    assert space
    for params in (space[0], space[-1]):
        cand = fam.instantiate(problem, params)
        cubin, _ = compile_cuda_candidate(cand)
        assert cubin[:4] == b"\x7fELF"
        for launch in cand.launches:
            for w in problem.workloads:
                env = launch_env(w.axes, w.scalars(), cand.params)
                threads = eval_expr(launch.grid[0], env) * eval_expr(launch.block[0], env)
                if launch.kernel == "rope2_kernel":  # both outputs: blocks0, then the rest
                    tpr = cand.params["HEAD_DIM"] // 2 // params["VEC"]
                    blocks0 = eval_expr(launch.args[-1].split(":", 1)[1], env)
                    rows0, rows1 = (eval_expr(launch.args[k].split(":", 1)[1], env) for k in (5, 12))
                    assert blocks0 * params["BLOCK"] >= rows0 * tpr
                    assert threads - blocks0 * params["BLOCK"] >= rows1 * tpr
                elif launch.kernel in ("rope_kernel", "cat_kernel"):
                    rows = eval_expr(launch.args[-4 if launch.kernel == "rope_kernel" else -3]
                                     .split(":", 1)[1], env)
                    assert threads >= rows * cand.params["HEAD_DIM"] // 2 // params["VEC"]
                elif launch.kernel == "rope_freqs_kernel":
                    assert threads * params["VEC"] >= w.axes["seq_len"] * cand.params["TOTAL"]
                else:
                    rows = eval_expr(launch.args[5].split(":", 1)[1], env)
                    assert eval_expr(launch.grid[0], env) * params["ROWS"] >= rows


@pytest.mark.parametrize("rel", NOT_SERVED)
def test_neighbours_not_claimed(sol_execbench_dir, rel):
    names = [f.name for f in families_for(load_problem_dir(sol_execbench_dir / rel))]
    assert not {"rope", "rope_freqs", "softmax_backward", "pointwise"} & set(names)


def test_rope_reads_layout_from_reference(sol_execbench_dir):
    fam = get_family("rope")
    q = fam.analyze(load_problem_dir(sol_execbench_dir / "L1/088_rotary_position_embedding_application").definition)
    assert q.fixed == {"DTYPE": 0, "HEAD_DIM": 128, "COS_PER_BATCH": 0}
    assert [(k, x, c, o) for k, x, c, o in q.info["launches"]] == [
        ("rope", "query", None, "query_rotated"), ("rope", "key", None, "key_rotated")]
    kv = fam.analyze(load_problem_dir(sol_execbench_dir / "L1/071_kv_cache_update_with_rope").definition)
    assert kv.fixed == {"DTYPE": 2, "HEAD_DIM": 128, "COS_PER_BATCH": 1}
    assert kv.info["launches"] == [("rope", "key_states", "key_cache", "updated_key_cache"),
                                   ("cat", "value_states", "value_cache", "updated_value_cache")]
    with pytest.raises(FamilyError):
        fam.instantiate(load_problem_dir(sol_execbench_dir / "L1/071_kv_cache_update_with_rope"),
                        {"VEC": 16, "BLOCK": 256})  # 32 bytes per load


def _rope_def(ref: str) -> Definition:
    return Definition.model_validate({
        "name": "t_rope", "axes": {"b": {"type": "var"}, "h": {"type": "var"}, "s": {"type": "var"},
                                   "d": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["b", "h", "s", "d"], "dtype": "float16"},
                   "cos": {"shape": ["s", "d"], "dtype": "float16"},
                   "sin": {"shape": ["s", "d"], "dtype": "float16"}},
        "outputs": {"y": {"shape": ["b", "h", "s", "d"], "dtype": "float16"}}, "reference": ref})


ROPE = """
import torch
def run(x, cos, sin):
    x1 = x[..., :32]
    x2 = x[..., 32:]
    y = x * cos + torch.cat((-x2, x1), dim=-1) * sin
    return y
"""


def test_rope_synthetic_and_refusals():
    spec = get_family("rope").analyze(_rope_def(ROPE))
    assert spec is not None and spec.fixed["DTYPE"] == 1 and spec.fixed["HEAD_DIM"] == 64
    # interleaved rotation (not rotate-half), a scale, a norm: not this family
    for bad in (ROPE.replace("torch.cat((-x2, x1), dim=-1)", "torch.stack((-x2, x1), dim=-1).flatten(-2)"),
                ROPE.replace("return y", "return y * 0.5").replace("y = x", "y = torch.tanh(x)"),
                ROPE.replace("return y", "return torch.nn.functional.layer_norm(y, (64,))")):
        assert get_family("rope").analyze(_rope_def(bad)) is None, bad


CUDA_HOST_SHIM = r"""
#include <math.h>
#include <stdio.h>
#define __global__
#define __launch_bounds__(x)
#define __restrict__
#define __forceinline__ inline
struct dim { unsigned x; };
static dim blockIdx, threadIdx;
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static float2 make_float2(float a, float b) { return {a, b}; }
template <typename T> static T __ldg(const T* p) { return *p; }
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("vec", [4, 2, 1])
def test_rope_freqs_kernel_on_host_matches_reference(sol_execbench_dir, tmp_path, vec):
    problem = load_problem_dir(sol_execbench_dir / "L1/034_flux_multi_axis_rope_frequency_computation")
    fam = get_family("rope_freqs")
    cand = fam.instantiate(problem, {"VEC": vec, "BLOCK": 64})
    seq, theta = 37, 10000.0
    defines = "".join(f"#define {k} {v}\n" for k, v in cand.params.items())
    main = f"""
int main() {{
    static float ids[{seq} * N_AXES], c[{seq} * TOTAL], s[{seq} * TOTAL];
    FILE* f = fopen("ids.bin", "rb");
    if (fread(ids, sizeof(float), {seq} * N_AXES, f) != {seq} * N_AXES) return 2;
    fclose(f);
    const long threads = ({seq} * TOTAL + VEC - 1) / VEC;
    for (long t = 0; t < (threads + BLOCK - 1) / BLOCK * BLOCK; ++t) {{
        blockIdx.x = t / BLOCK; threadIdx.x = t % BLOCK;
        rope_freqs_kernel(ids, c, s, {seq}, {theta}f);
    }}
    f = fopen("out.bin", "wb");
    fwrite(c, sizeof(float), {seq} * TOTAL, f);
    fwrite(s, sizeof(float), {seq} * TOTAL, f);
    fclose(f);
    return 0;
}}
"""
    src = (CUDA_DIR / "rope_freqs" / "rope_freqs.cu").read_text()
    src = re.sub(r"if constexpr", "if", src)
    (tmp_path / "k.cpp").write_text(CUDA_HOST_SHIM + defines + src + main)
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-std=c++17", "k.cpp", "-o", "k"], cwd=tmp_path,
                   check=True, capture_output=True)
    ids = (torch.randn(seq, 3, generator=torch.Generator().manual_seed(1)) * 40).float()
    ids.numpy().tofile(tmp_path / "ids.bin")
    subprocess.run(["./k"], cwd=tmp_path, check=True)
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(2, seq, 128)
    ns: dict = {}
    exec(compile(problem.definition.reference, "ref", "exec"), ns)
    ref_cos, ref_sin = ns["run"](ids, theta)
    # same float32 steps; cos/sin/pow from glibc here vs PyTorch's CPU kernels: a few ulps
    np.testing.assert_allclose(got[0], ref_cos.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], ref_sin.numpy(), rtol=1e-5, atol=1e-5)


SMB = """
import torch
def run(grad_output, p_attn, mask):
    grad_softmax_output = grad_output
    sum_term = (p_attn * grad_softmax_output).sum(dim=-1, keepdim=True)
    grad_softmax_input = p_attn * (grad_softmax_output - sum_term)
    grad_scores = grad_softmax_input.masked_fill(~mask, 0.0)
    return grad_scores
"""


def _smb_def(ref: str, mask_shape) -> Definition:
    full = ["b", "h", "s", "s"]
    return Definition.model_validate({
        "name": "t_smb", "axes": {"b": {"type": "var"}, "h": {"type": "var"}, "s": {"type": "var"}},
        "inputs": {"grad_output": {"shape": full, "dtype": "float32"},
                   "p_attn": {"shape": full, "dtype": "float32"},
                   "mask": {"shape": mask_shape, "dtype": "bool"}},
        "outputs": {"grad_scores": {"shape": full, "dtype": "float32"}}, "reference": ref})


def test_softmax_backward_without_dropout_and_refusals(sol_execbench_dir):
    fam = get_family("softmax_backward")
    spec = fam.analyze(_smb_def(SMB, ["b", "h", "s", "s"]))
    assert spec.fixed == {"MASK_PER_HEAD": 1} and spec.info["p_drop"] is None
    assert fam.analyze(_smb_def(SMB, ["b", 1, "s", "s"])).fixed == {"MASK_PER_HEAD": 0}
    assert fam.analyze(_smb_def(SMB, ["s", "s"])) is None               # mask layout not served
    assert fam.analyze(_smb_def(SMB.replace("(grad_softmax_output - sum_term)",
                                            "(grad_softmax_output + sum_term)"), ["b", "h", "s", "s"])) is None
    assert fam.analyze(_smb_def(SMB.replace("    return grad_scores",
                                            "    grad_scores = grad_scores * 2\n    return grad_scores"),
                                ["b", "h", "s", "s"])) is None
    real = fam.analyze(load_problem_dir(
        sol_execbench_dir / "L1/066_masked_softmax_with_attention_dropout_backward").definition)
    assert real.fixed == {"MASK_PER_HEAD": 0}
    assert (real.info["p_drop"], real.info["keep"]) == ("p_dropout", "dropout_mask")
    with pytest.raises(FamilyError):
        fam.instantiate(_smb_def(SMB, ["b", "h", "s", "s"]), {"TPR": 48, "ROWS": 1})


def test_gate_is_read_from_family_json(monkeypatch):
    import json

    from solforge.kernels import gate
    for name in NEW_FAMILIES:
        fam = get_family(name)
        data = json.loads((CUDA_DIR / fam.source_dir / "family.json").read_text())
        monkeypatch.undo()  # the real property, not the fixture's
        assert fam.offered == bool(data["offered"]) == gate.family_offered(fam.source_dir)
        assert data["family"] == name and fam.source_dir
    assert gate.family_offered("no_such_family") is False
