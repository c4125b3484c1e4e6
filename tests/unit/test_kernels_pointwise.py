"""Pointwise family: which problems it claims, real NVRTC compiles, and the generated element
function (pw_eval) compiled with the host C++ compiler and run against the reference on CPU."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch

from solforge.kernels import families_for, get_family
from solforge.kernels.build import compile_cuda_candidate
from solforge.kernels.pointwise_trace import trace_pointwise
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

NEW_FAMILIES = ("pointwise", "rope", "rope_freqs", "softmax_backward")


@pytest.fixture(autouse=True)
def _all_offered(monkeypatch):
    """Matching is tested with every new family offered, whatever its GPU gate says today (the
    gate itself: test_gate_is_read_from_family_json)."""
    for name in NEW_FAMILIES:
        monkeypatch.setattr(type(get_family(name)), "offered", property(lambda self: True))

SERVED = ["L1/084_silu_activation_backward", "L1/090_batched_2d_rope_position_encoding_backward",
          "L1/061_tanh_gated_residual_add_backward",
          "L1/056_mamba_ssm_dt_projection_softplus_clamp_backward"]
# elementwise-looking but not ours: cat (012), a row reduction inside (066), a norm (069)
NOT_POINTWISE = ["L1/012_fused_cos_sin_embedding_generation", "L1/069_rms_norm",
                 "L1/066_masked_softmax_with_attention_dropout_backward"]

HOST_SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline float rnd_bf16(float v) {  // round to nearest even, as __float2bfloat16_rn
    uint32_t u; std::memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r; std::memcpy(&r, &u, 4); return r;
}
static inline float rnd_f16(float v) { return (float)(_Float16)v; }
#include <math.h>
static inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
"""


def _host_eval(g, xs: list[np.ndarray], scalars: list[float], tmp_path) -> list[np.ndarray]:
    """Compile pw_eval (and pw_post) for the host (no FMA contraction) and run it on every
    element; sums in double over each kept slot. Returns the full outputs, then the reduced."""
    n = xs[0].size
    nin, nout, ns, nr, kept = len(xs), max(len(g.outputs), 1), len(scalars), len(g.reductions), g.kept
    nz = max(len(g.reduced_outputs), 1)
    post = ""
    if nr:
        post = f"""
    for (long k = 0; k < {kept}; ++k)
        pw_post({", ".join([f"in[{k_}][0]" for k_ in range(nin)] + [f"s[{k_}]" for k_ in range(ns)]
                           + [f"(float)red[{k_}][k]" for k_ in range(nr)]
                           + [f"out[{nout + k_}][k]" for k_ in range(len(g.reduced_outputs))])});"""
    main = f"""
static double red[{max(nr, 1)}][{kept}];
int main() {{
    const long n = {n};
    static float in[{nin}][{n}], out[{nout + nz}][{n}];
    FILE* f = std::fopen("in.bin", "rb");
    if (std::fread(in, sizeof(float), {nin} * n, f) != (size_t)({nin} * n)) return 2;
    std::fclose(f);
    const float s[{max(ns, 1)}] = {{{", ".join(repr(float(v)) + "f" for v in scalars) or "0"}}};
    float rv[{max(nr, 1)}];
    for (long i = 0; i < n; ++i) {{
        pw_eval({", ".join([f"in[{k}][i]" for k in range(nin)] + [f"s[{k}]" for k in range(ns)]
                           + [f"out[{k}][i]" for k in range(len(g.outputs))]
                           + [f"rv[{k}]" for k in range(nr)])});
        {" ".join(f"red[{k}][i % {kept}] += rv[{k}];" for k in range(nr))}
    }}{post}
    f = std::fopen("out.bin", "wb");
    std::fwrite(out, sizeof(float), {nout + nz} * n, f);
    std::fclose(f);
    return 0;
}}
"""
    (tmp_path / "pw.cpp").write_text(HOST_SHIM + g.cuda_eval() + (g.cuda_post() if nr else "") + main)
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-std=c++17", "pw.cpp", "-o", "pw"],
                   cwd=tmp_path, check=True, capture_output=True)
    np.stack([x.astype(np.float32).ravel() for x in xs]).tofile(tmp_path / "in.bin")
    subprocess.run(["./pw"], cwd=tmp_path, check=True)
    out = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(nout + nz, n)
    full = list(out[:len(g.outputs)])
    return full + [o[:kept] for o in out[nout:nout + len(g.reduced_outputs)]]


def _run_reference(defn: Definition, inputs: dict):
    ns: dict = {}
    exec(compile(defn.reference, "ref", "exec"), ns)
    res = ns["run"](**inputs)
    return list(res) if isinstance(res, (tuple, list)) else [res]


def _check_against_reference(defn: Definition, shapes: dict, scalars: dict, tmp_path,
                             rtol: float, atol: float) -> None:
    g = trace_pointwise(defn)
    assert g is not None
    gen = torch.Generator().manual_seed(0)
    from solforge.problem.dtypes import to_torch
    inputs = {}
    for k, spec in defn.inputs.items():
        inputs[k] = scalars[k] if spec.is_scalar else \
            torch.randn(shapes[k], generator=gen).to(to_torch(spec.dtype))
    refs = dict(zip(defn.outputs, _run_reference(defn, dict(inputs))))
    out_shape = max((r.shape for r in refs.values()), key=len)
    xs = [inputs[m.name].expand(out_shape).float().contiguous().numpy() for m in g.inputs]
    got = _host_eval(g, xs, [scalars[s] for s in g.scalars], tmp_path)
    for (name, _, dtype), y in zip(g.outputs + g.reduced_outputs, got):
        ref = refs[name]
        if name in [o[0] for o in g.reduced_outputs]:  # a sum: float order differs, 1 bf16 ulp
            np.testing.assert_allclose(torch.from_numpy(y).to(to_torch(dtype)).float().numpy(),
                                       ref.float().numpy().ravel(), rtol=8e-3, atol=1e-5, err_msg=name)
            continue
        # the output is stored in its dtype: round the float result the same way
        y = torch.from_numpy(y).to(to_torch(dtype)).float().numpy()
        # tolerance None: 16-bit outputs exact, float32 ones within libm ulps (tanh, sin)
        rt, at = (rtol, atol) if rtol is not None else (0, 0) if dtype != "float32" else (4e-6, 1e-7)
        np.testing.assert_allclose(y, ref.float().numpy().ravel(), rtol=rt, atol=at, err_msg=name)


@pytest.mark.parametrize("rel", SERVED)
def test_served_and_compiles(sol_execbench_dir, rel):
    problem = load_problem_dir(sol_execbench_dir / rel)
    assert [f.name for f in families_for(problem)] == ["pointwise"]
    fam = get_family("pointwise")
    space = fam.param_space(problem)
    for params in (space[0], space[-1]):
        cand = fam.instantiate(problem, params)
        assert "--fmad=false" in cand.options
        cubin, _ = compile_cuda_candidate(cand)
        assert cubin[:4] == b"\x7fELF"
        from solforge.candidate import eval_expr, launch_env
        for w in problem.workloads:  # the grid covers every element
            env = launch_env(w.axes, w.scalars(), cand.params)
            n = eval_expr(cand.launches[0].args[-1].split(":", 1)[1], env)
            assert eval_expr(cand.launches[0].grid[0], env) * params["VEC"] * params["BLOCK"] \
                * params["UNROLL"] >= n


@pytest.mark.parametrize("rel", NOT_POINTWISE)
def test_not_claimed(sol_execbench_dir, rel):
    problem = load_problem_dir(sol_execbench_dir / rel)
    assert "pointwise" not in [f.name for f in families_for(problem)]


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@needs_gxx
@pytest.mark.parametrize("rel,exact", [(SERVED[0], True), (SERVED[1], False), (SERVED[2], "0d"),
                                       (SERVED[3], None)])
def test_generated_math_matches_reference(sol_execbench_dir, rel, exact, tmp_path):
    """fp32 arithmetic chains are bit-exact without FMA; sin/cos differ only by libm ulps; bf16
    outputs exact, sums within a bf16 ulp (061: a full sum; 056: sums over batch and sequence,
    comparisons with two float scalar inputs). 061 multiplies by a 0-d tensor, which CPU PyTorch
    keeps in float and the GPU rounds to bf16 (see test_zero_dim_operand_rounded_to_common_dtype):
    there the CPU oracle is within one bf16 ulp (the problem's tolerance is 5%)."""
    problem = load_problem_dir(sol_execbench_dir / rel)
    w = min(problem.workloads, key=lambda w: sum(np.prod(s) for s in w.input_shapes.values() if s))
    scalars = {k: v for k, v in w.scalars().items() if k in problem.definition.inputs}
    tol = {True: 0, False: 2e-6, None: None, "0d": 1.6e-2}[exact]
    _check_against_reference(problem.definition, w.input_shapes, scalars, tmp_path, rtol=tol, atol=tol)


MIXED = """
import torch
def run(x, gate, mask, scale):
    g = torch.tanh(gate.to(torch.float32))
    y = x * mask * 1.3
    z = (y - x) * 0.75  # (bf16 +- a Python number differs between CPU and CUDA PyTorch)
    return torch.sigmoid(z) * scale, (y * y).to(torch.float32) + g
"""


def _mixed_def() -> Definition:
    return Definition.model_validate({
        "name": "t_mixed", "axes": {"b": {"type": "var"}, "h": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["b", "h"], "dtype": "bfloat16"},
                   "gate": {"shape": ["b", 1], "dtype": "bfloat16"},
                   "mask": {"shape": ["b", 1], "dtype": "bfloat16"},
                   "scale": {"shape": None, "dtype": "float32"}},
        "outputs": {"o": {"shape": ["b", "h"], "dtype": "bfloat16"},
                    "q": {"shape": ["b", "h"], "dtype": "float32"}},
        "reference": MIXED})


@needs_gxx
def test_bf16_rounding_broadcast_and_scalars(tmp_path):
    """bf16 steps rounded one by one, a Python number kept in float, [b, 1] inputs broadcast (one
    of them a float32 value added to a float32 output), a float scalar input becomes a kernel
    argument."""
    defn = _mixed_def()
    g = trace_pointwise(defn)
    assert g is not None and g.scalars == ["scale"]
    maps = {m.name: m for m in g.inputs}
    assert maps["x"].direct and not maps["mask"].direct and maps["mask"].div == "h"
    assert maps["gate"].div == "h" and maps["gate"].mod == "b"
    _check_against_reference(defn, {"x": (37, 64), "gate": (37, 1), "mask": (37, 1)}, {"scale": 1.7},
                             tmp_path, rtol=None, atol=None)
    cand = get_family("pointwise").instantiate(defn, {"VEC": 8, "BLOCK": 128, "UNROLL": 2})
    # scalars after the sizes; last: STEPS, vectors per thread (1 for calls under one full wave)
    assert cand.launches[0].args[-2] == "float32:scale"
    assert cand.launches[0].args[-1].startswith("int32:max(1, min(UNROLL, ")
    cubin, _ = compile_cuda_candidate(cand)
    assert cubin[:4] == b"\x7fELF"


def test_zero_dim_operand_rounded_to_common_dtype():
    """On the GPU a 0-d float32 CUDA tensor times a bf16 tensor is loaded as bf16 (the functor's
    argument type is the common dtype): the generated code rounds it (CPU PyTorch treats a 0-d
    CPU tensor as a scalar instead, so this is checked on the text, and on the GPU by 061-like
    problems)."""
    ref = ("import torch\ndef run(x, gate, mask, scale):\n    g = torch.tanh(gate.to(torch.float32))\n"
           "    return x * g, (x * 2.0).float()\n")
    base = _mixed_def().model_dump()
    base["inputs"]["gate"]["shape"] = []
    d = Definition.model_validate({**base, "reference": ref, "name": "t_0d"})
    g = trace_pointwise(d)
    assert g is not None
    assert "rnd_bf16(v_tanh)" in g.cuda_eval()


def test_refuses_shape_dependent_and_reductions():
    base = _mixed_def().model_dump()
    for ref in ("import torch\ndef run(x, gate, mask, scale):\n    return (x * x.sum()), x\n",
                "import torch\ndef run(x, gate, mask, scale):\n    return x * x.shape[0], x * 2\n",
                "import torch\ndef run(x, gate, mask, scale):\n    return x * (scale * 2), x * 2\n"):
        d = Definition.model_validate({**base, "reference": ref, "name": "t_bad"})
        assert trace_pointwise(d) is None, ref


def test_values_of_0d_inputs_hoisted_out_of_the_element_loop(sol_execbench_dir):
    """061's tanh(gate) (a 0-d gate) is computed once per thread in pw_pre, not per element;
    a [b, 1] input (read per row) is never hoisted."""
    from solforge.kernels.pointwise import hoisted_nodes
    problem = load_problem_dir(sol_execbench_dir / "L1/061_tanh_gated_residual_add_backward")
    g = trace_pointwise(problem.definition)
    h = hoisted_nodes(g)
    assert "tanh" in h
    src = get_family("pointwise").instantiate(problem, {"VEC": 8, "BLOCK": 256, "UNROLL": 1}) \
        .sources["pointwise.cu"]
    pre = src[src.index("void pw_pre("):src.index("void pw_eval(")]
    ev = src[src.index("void pw_eval("):src.index("void pw_post(")]
    assert "tanhf(" in pre and "tanhf(" not in ev
    assert hoisted_nodes(trace_pointwise(_mixed_def())) == []


@pytest.mark.parametrize("rel", ["L1/056_mamba_ssm_dt_projection_softplus_clamp_backward",
                                 "L1/061_tanh_gated_residual_add_backward"])
def test_sums_finish_in_one_kernel_unless_fin_0(sol_execbench_dir, rel):
    """FIN (default 1): the reduction plan is one kernel that keeps its workspace zeroed itself
    (workspace_zero "0": no memset, so a direct launch); FIN=0 keeps the memset + post kernel."""
    from solforge.candidate import eval_expr, launch_env
    from solforge.kernels.base import FamilyError

    problem = load_problem_dir(sol_execbench_dir / rel)
    fam = get_family("pointwise")
    p0 = fam.param_space(problem)[0]
    one, two = fam.instantiate(problem, p0), fam.instantiate(problem, {**p0, "FIN": 0})
    g = trace_pointwise(problem.definition)
    nr, kept = len(g.reductions), g.kept
    assert nr and [l.kernel for l in one.launches] == ["pointwise_kernel"]
    assert [l.kernel for l in two.launches] == ["pointwise_kernel", "pointwise_post_kernel"]
    assert one.workspace_zero == "0" and two.workspace_zero is None
    env = launch_env(problem.workloads[0].axes, problem.workloads[0].scalars(), one.params)
    assert eval_expr(one.workspace, env) == 4 * nr * kept + 4   # the sums + the blocks counter
    assert eval_expr(two.workspace, env) == 4 * nr * kept
    for name, _, _ in g.reduced_outputs:  # the one kernel writes the reduced outputs itself
        assert name in one.launches[0].args and name not in two.launches[0].args
    assert "pointwise_post_kernel" not in one.sources["pointwise.cu"]
    for cand in (one, two):  # NVRTC, and the args checked against each kernel's parameter table
        cubin, _ = compile_cuda_candidate(cand)
        assert cubin[:4] == b"\x7fELF"
    assert one.source_hash() != two.source_hash()
    with pytest.raises(FamilyError):
        fam.instantiate(problem, {**p0, "FIN": 2})
