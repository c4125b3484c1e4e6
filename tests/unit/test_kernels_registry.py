"""Kernel families: matching, parameter spaces, valid candidates that compile with NVRTC for sm_90a."""

from __future__ import annotations

import pytest

from solforge.candidate import Candidate
from solforge.kernels import FAMILIES, FamilyError, families_for, get_family
from solforge.kernels.build import compile_cuda_candidate
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

# problem dir -> the family that must serve it (the shared dataset's problems)
EXPECTED = {
    "FlashInfer-Bench/001_fused_add_rmsnorm_h2048": "rmsnorm",
    "FlashInfer-Bench/003_fused_add_rmsnorm_h7168": "rmsnorm",
    "FlashInfer-Bench/021_rmsnorm_h128": "rmsnorm",
    "FlashInfer-Bench/022_rmsnorm_h512": "rmsnorm",
    "FlashInfer-Bench/023_rmsnorm_h1536": "rmsnorm",
    "FlashInfer-Bench/025_rmsnorm_h4096": "rmsnorm",
    "FlashInfer-Bench/026_rmsnorm_h7168": "rmsnorm",
    "L1/033_post_norm_residual": "rmsnorm",
    "L1/038_flux_multi_head_rmsnorm_qk": "rmsnorm",
    "L1/069_rms_norm": "rmsnorm",
}
# problems no family may claim (they compute something else around the same ops)
# (012, paged decode, is served since 2026-12-01: attention_decode passed its H200 check)
NOT_SERVED = ["L1/013_fused_residual_rms_norm_backward",
              "L1/015_grouped_query_attention_with_rope_and_qk_norm"]


def _rms_def(reference: str, with_residual: bool = True, dtype: str = "bfloat16") -> Definition:
    inputs = {"hidden_states": {"shape": ["b", "h"], "dtype": dtype},
              "weight": {"shape": ["h"], "dtype": dtype}}
    if with_residual:
        inputs["residual"] = {"shape": ["b", "h"], "dtype": dtype}
    return Definition.model_validate({
        "name": "t_rms", "axes": {"b": {"type": "var"}, "h": {"type": "const", "value": 1024}},
        "inputs": inputs, "outputs": {"out": {"shape": ["b", "h"], "dtype": dtype}},
        "reference": reference})


PRE_FLOAT = """
import torch
def run(hidden_states, residual, weight):
    x = hidden_states.to(torch.float32) + residual.to(torch.float32)
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    return ((x * inv) * weight.to(torch.float32)).to(hidden_states.dtype)
"""
PRE_ROUNDED = """
import torch
def run(hidden_states, residual, weight):
    x = residual + hidden_states
    v = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    xn = x.to(torch.float32) * torch.rsqrt(v + 1e-5)
    return weight * xn.to(torch.bfloat16)
"""
POST = """
import torch
def run(hidden_states, residual, weight):
    n = hidden_states.to(torch.float32)
    n = n * torch.rsqrt(n.pow(2).mean(-1, keepdim=True) + 1e-6)
    n = (weight.to(torch.float32) * n).to(hidden_states.dtype)
    return residual + n
"""


@pytest.mark.parametrize("ref,fixed", [
    (PRE_FLOAT, {"RESID_MODE": 1, "POST_RESID": 0, "WEIGHT_MODE": 0}),
    (PRE_ROUNDED, {"RESID_MODE": 2, "POST_RESID": 0, "WEIGHT_MODE": 1}),
    (POST, {"RESID_MODE": 0, "POST_RESID": 1, "WEIGHT_MODE": 0}),
])
def test_rmsnorm_reads_rounding_order_from_reference(ref, fixed):
    defn = _rms_def(ref)
    fams = families_for(defn)
    assert [f.name for f in fams] == ["rmsnorm"]
    cand = fams[0].instantiate(defn, fams[0].param_space(defn)[0])
    for k, v in fixed.items():
        assert cand.params[k] == v, k
    assert cand.params["HIDDEN"] == 1024 and cand.params["DTYPE"] == 2
    args = cand.launches[0].args
    assert args[:2] == ["hidden_states", "residual"]
    assert args[-1] in ("float32:1e-06", "float32:1e-05")


def test_rmsnorm_refuses_other_ops():
    softmaxed = PRE_FLOAT.replace("return (", "return torch.softmax((").replace(
        ".to(hidden_states.dtype)", ".to(hidden_states.dtype), -1)")
    assert families_for(_rms_def(softmaxed)) == []
    with pytest.raises(FamilyError):
        get_family("rmsnorm").instantiate(_rms_def(softmaxed), {"VEC": 8, "TPR": 128, "ROWS": 1})


def test_rmsnorm_bad_params_rejected():
    defn = _rms_def(PRE_FLOAT)
    fam = get_family("rmsnorm")
    with pytest.raises(FamilyError):
        fam.instantiate(defn, {"VEC": 16, "TPR": 128, "ROWS": 1})  # 32 bytes per load
    with pytest.raises(FamilyError):
        fam.instantiate(defn, {"VEC": 8, "TPR": 96, "ROWS": 16})  # 1536 threads
    with pytest.raises(FamilyError):
        fam.instantiate(defn, {"VEC": 8, "TPR": 128, "ROWS": 1, "HIDDEN": 7})  # fixed param


def test_every_family_has_sources_and_description():
    for fam in FAMILIES:
        assert fam.name and fam.description and fam.ops


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_shared_problem_served_and_compiles(sol_execbench_dir, rel):
    problem = load_problem_dir(sol_execbench_dir / rel)
    fams = families_for(problem)
    assert EXPECTED[rel] in [f.name for f in fams]
    fam = get_family(EXPECTED[rel])
    space = fam.param_space(problem)
    assert space, "empty parameter space"
    # first (best guess) and last (most different) choices must both build
    for params in {0: space[0], 1: space[-1]}.values():
        cand = fam.instantiate(problem, params)
        assert isinstance(cand, Candidate)
        Candidate.model_validate_json(cand.model_dump_json())  # round-trips as JSON
        for launch in cand.launches:  # every launch expression evaluates on every workload
            from solforge.candidate import eval_expr, launch_env
            for w in problem.workloads:
                env = launch_env(w.axes, w.scalars(), cand.params)
                assert all(eval_expr(g, env) >= 1 for g in launch.grid)
                assert 1 <= eval_expr(launch.block[0], env) <= 1024
        if cand.language == "cuda":
            cubin, _ = compile_cuda_candidate(cand)
            assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("rel", NOT_SERVED)
def test_shared_problem_not_claimed(sol_execbench_dir, rel):
    assert families_for(load_problem_dir(sol_execbench_dir / rel)) == []


GEMM_PROBLEMS = ["FlashInfer-Bench/004_gemm_n128_k2048", "FlashInfer-Bench/005_gemm_n256_k7168"]


@pytest.mark.parametrize("rel", GEMM_PROBLEMS)
def test_gemm_served_grid_matches_tiers(sol_execbench_dir, rel):
    problem = load_problem_dir(sol_execbench_dir / rel)
    fam = get_family("gemm_tn")
    assert fam in families_for(problem)
    params = fam.param_space(problem)[0]
    cand = fam.instantiate(problem, params)
    from solforge.candidate import eval_expr, launch_env
    n = cand.params["NN"]
    for w in problem.workloads:
        m = w.axes["M"]
        env = launch_env(w.axes, w.scalars(), cand.params)
        tier = 0 if m <= params["T0_MAXM"] else 1 if m <= params["T1_MAXM"] else 2
        p = {k: params[f"T{tier}_{k}"] for k in ("BM", "BN", "SPLIT")}
        assert eval_expr(cand.launches[0].grid[0], env) == -(-m // p["BM"]) * (n // p["BN"]) * p["SPLIT"]
        ws = eval_expr(cand.workspace, env)
        assert ws >= 4 * cand.params["TICKETS"] + (4 * n * m * p["SPLIT"] if p["SPLIT"] > 1 else 0)
    cubin, _ = compile_cuda_candidate(cand)
    assert cubin[:4] == b"\x7fELF"


def test_gemm_refuses_bias_and_bad_tiles(sol_execbench_dir):
    problem = load_problem_dir(sol_execbench_dir / GEMM_PROBLEMS[0])
    fam = get_family("gemm_tn")
    params = dict(fam.param_space(problem)[0])
    params["T2_SPLIT"] = 2
    with pytest.raises(FamilyError):
        fam.instantiate(problem, params)
    params = dict(fam.param_space(problem)[0])
    params["T0_BK"] = 32
    with pytest.raises(FamilyError):
        fam.instantiate(problem, params)
    biased = problem.definition.model_copy(update={
        "reference": "import torch\ndef run(A, B):\n    C = torch.matmul(A, B.T) + 1.0\n    return C\n"})
    assert fam not in families_for(biased)
