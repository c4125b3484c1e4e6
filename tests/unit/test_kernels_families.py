"""Activation and CuTe DSL RMSNorm families: matching, params, and real compiles for sm_90a."""

from __future__ import annotations

import pytest

from solforge.kernels import FamilyError, families_for, get_family
from solforge.kernels.build import compile_cuda_candidate
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir


def _act_def(reference: str, gated: bool, dtype: str = "float32") -> Definition:
    axes = {"b": {"type": "var"}, "d": {"type": "const", "value": 256}}
    if gated:
        axes["d2"] = {"type": "expr", "expression": "d * 2"}
    return Definition.model_validate({
        "name": "t_act", "axes": axes,
        "inputs": {"x": {"shape": ["b", "d2" if gated else "d"], "dtype": dtype}},
        "outputs": {"y": {"shape": ["b", "d"], "dtype": dtype}}, "reference": reference})


GELU = """
import torch, math
def run(x):
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + torch.tanh(inner))
"""
SWIGLU = """
import torch
import torch.nn.functional as F
def run(x):
    g, u = x.chunk(2, dim=-1)
    return F.silu(g) * u
"""
GEGLU_LINEAR_NAME = """
import torch
import torch.nn.functional as F
def run(x):
    x_gate, x_linear = x.chunk(2, dim=-1)
    return F.gelu(x_gate, approximate='tanh') * x_linear
"""


@pytest.mark.parametrize("ref,gated,op", [(GELU, False, 0), (SWIGLU, True, 2),
                                          (GEGLU_LINEAR_NAME, True, 1)])
def test_activation_matches_and_compiles(ref, gated, op):
    defn = _act_def(ref, gated, "bfloat16")
    fams = families_for(defn)
    assert [f.name for f in fams] == ["activation"]
    cand = fams[0].instantiate(defn, fams[0].param_space(defn)[0])
    assert cand.params["OP"] == op and cand.params["INNER"] == 256 and cand.params["VEC"] == 8
    cubin, _ = compile_cuda_candidate(cand)
    assert cubin[:4] == b"\x7fELF"


def test_activation_refuses_gelu_after_matmul_and_bad_vec():
    ref = GELU.replace("def run(x):", "def run(x):\n    x = torch.matmul(x, x.T)")
    assert families_for(_act_def(ref, False)) == []
    defn = _act_def(GELU, False)
    with pytest.raises(FamilyError):
        get_family("activation").instantiate(defn, {"VEC": 3, "BLOCK": 256, "UNROLL": 2})


def test_cute_rmsnorm_serves_plain_norm_only(sol_execbench_dir):
    fb = sol_execbench_dir / "FlashInfer-Bench"
    plain = load_problem_dir(fb / "025_rmsnorm_h4096")
    fused = load_problem_dir(fb / "001_fused_add_rmsnorm_h2048")
    cute = get_family("cute_rmsnorm")
    assert cute in families_for(plain) and cute not in families_for(fused)
    space = cute.param_space(plain)
    assert space and all(4096 % (p["THREADS"] * p["VEC"]) == 0 for p in space)
    with pytest.raises(FamilyError):
        cute.instantiate(plain, {"THREADS": 48, "VEC": 8})


def test_cute_rmsnorm_compiles_to_cubin(sol_execbench_dir):
    pytest.importorskip("cutlass")
    from solforge.compile.api import compile_candidate

    problem = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / "022_rmsnorm_h512")
    cute = get_family("cute_rmsnorm")
    cand = cute.instantiate(problem, cute.param_space(problem)[0])
    assert cand.language == "cute"
    res = compile_candidate(cand, use_cache=False)
    assert res.ok, res.log
    entry = res.entries["rmsnorm_cute"]
    # flat parameters in the launch's order: 3 pointers, rows, eps
    assert [p.kind for p in entry.params] == ["ptr", "ptr", "ptr", "i32", "f32"]
    assert all(blob[:4] == b"\x7fELF" for blob in res.cubins.values())


def test_rmsnorm_weight_preload_is_a_tunable(sol_execbench_dir):
    """WPRE (weight loaded with x) is searched both ways; large rows try it off first, small on,
    and each setting compiles to different code."""
    fam = get_family("rmsnorm")
    big = load_problem_dir(sol_execbench_dir / "L1/069_rms_norm")          # hidden 8192 bf16
    small = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/021_rmsnorm_h128")
    assert fam.param_space(big)[0]["WPRE"] == 0 and fam.param_space(small)[0]["WPRE"] == 1
    # 2: per call (one wave: preload); PERSIST=1 points (rmsnorm_persist) have no WPRE
    assert {p["WPRE"] for p in fam.param_space(big) if not p.get("PERSIST")} == {0, 1, 2}
    base = {k: v for k, v in fam.param_space(big)[0].items() if k != "WPRE"}
    cubins = {w: compile_cuda_candidate(fam.instantiate(big, {**base, "WPRE": w}))[0] for w in (0, 1, 2)}
    assert len(set(cubins.values())) == 3
    # old params without WPRE stay valid (the kernel's default is the preload)
    fam.instantiate(big, base)
    with pytest.raises(FamilyError):
        fam.instantiate(big, {**base, "WPRE": 3})


def test_cute_rmsnorm_leaves_small_rows_to_cuda(sol_execbench_dir):
    """One CTA per row cannot fill the GPU with 256-byte rows (021: 0.2x on 520k rows): the CUDA
    family, which packs rows per block, serves them alone; 512-byte rows (022) stay with both."""
    fb = sol_execbench_dir / "FlashInfer-Bench"
    names = lambda p: [f.name for f in families_for(load_problem_dir(fb / p))]
    assert names("021_rmsnorm_h128") == ["rmsnorm"]
    assert "cute_rmsnorm" in names("022_rmsnorm_h512")


def test_rmsnorm_ldh_accepted_but_not_searched(sol_execbench_dir):
    """LDH=1 (L2 256-byte prefetch hint on x/residual) measured 1-5% slower on the H200: it still
    compiles (to the hinted load) for old params, but the search space leaves it out."""
    fam = get_family("rmsnorm")
    big = load_problem_dir(sol_execbench_dir / "L1/069_rms_norm")
    assert all("LDH" not in p for p in fam.param_space(big))
    cand = fam.instantiate(big, {**fam.param_space(big)[0], "LDH": 1})
    cubin, _ = compile_cuda_candidate(cand)
    assert cubin[:4] == b"\x7fELF"
    with pytest.raises(FamilyError):
        fam.instantiate(big, {**fam.param_space(big)[0], "LDH": 3})


def _resource_usage(cubin: bytes) -> dict:
    """REG / STACK / SHARED of the cubin's kernel from cuobjdump (the venv's NVIDIA wheel), {} without it."""
    import re
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    import solforge
    tool = shutil.which("cuobjdump")
    if tool is None:
        hits = sorted(Path(solforge.__file__).resolve().parents[1].glob(
            ".venv/lib/python*/site-packages/nvidia/cu*/bin/cuobjdump"))
        tool = str(hits[0]) if hits else None
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", out)}


@pytest.mark.parametrize("rel,params", [
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 64, "ROWS": 4, "PERSIST": 1, "PF": 4, "BPS": 4}),
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 32, "ROWS": 8, "PERSIST": 1, "PF": 4, "BPS": 2,
                                           "LPOL": 2, "SPOL": 3}),
    ("FlashInfer-Bench/021_rmsnorm_h128", {"VEC": 8, "TPR": 16, "ROWS": 16, "PERSIST": 1, "PF": 4, "BPS": 4}),
    ("FlashInfer-Bench/001_fused_add_rmsnorm_h2048", {"VEC": 8, "TPR": 256, "ROWS": 1, "PERSIST": 1, "PF": 2,
                                                      "BPS": 4}),
    ("FlashInfer-Bench/022_rmsnorm_h512", {"VEC": 8, "TPR": 32, "ROWS": 8, "WPRE": 1, "LPOL": 3, "SPOL": 1}),
], ids=lambda v: str(v)[-60:])
def test_rmsnorm_persist_and_policies_compile_without_spills(sol_execbench_dir, rel, params):
    """PERSIST=1 launches rmsnorm_persist on a grid capped at NSM * BPS blocks; the k8 shapes keep
    their PF-deep register ring without local memory under __launch_bounds__(threads, BPS)."""
    from solforge.candidate import eval_expr, launch_env
    fam = get_family("rmsnorm")
    problem = load_problem_dir(sol_execbench_dir / rel)
    cand = fam.instantiate(problem, params)
    launch = cand.launches[0]
    persist = params.get("PERSIST", 0)
    assert launch.kernel == ("rmsnorm_persist" if persist else "rmsnorm_kernel")
    axis = next(iter(k for k, v in problem.definition.axes.items() if getattr(v, "type", "") == "var"))
    env = launch_env({**{k: v.value for k, v in problem.definition.axes.items()
                         if getattr(v, "value", None) is not None}, axis: 500_000}, {}, cand.params)
    blocks = eval_expr(launch.grid[0], env)
    assert blocks == (132 * params["BPS"] if persist else -(-500_000 // params["ROWS"]))
    cubin, _ = compile_cuda_candidate(cand)
    assert cubin[:4] == b"\x7fELF"
    use = _resource_usage(cubin)
    if not use:
        pytest.skip("no cuobjdump")
    assert use.get("STACK", 0) == 0 and use.get("LOCAL", 0) == 0, use
    if persist:
        assert use["REG"] * params["TPR"] * params["ROWS"] * params["BPS"] <= 65536, use


def test_rmsnorm_persist_params_checked(sol_execbench_dir):
    fam = get_family("rmsnorm")
    p022 = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench/022_rmsnorm_h512")
    qk = load_problem_dir(sol_execbench_dir / "L1/038_flux_multi_head_rmsnorm_qk")
    base = {"VEC": 8, "TPR": 32, "ROWS": 8}
    with pytest.raises(FamilyError):   # 3 x 1024 threads do not fit on one SM
        fam.instantiate(p022, {**base, "ROWS": 32, "PERSIST": 1, "BPS": 3})
    with pytest.raises(FamilyError):
        fam.instantiate(p022, {**base, "PERSIST": 1, "PF": 9})
    with pytest.raises(FamilyError):   # PF / BPS mean nothing without PERSIST
        fam.instantiate(p022, {**base, "PF": 2})
    with pytest.raises(FamilyError):
        fam.instantiate(p022, {**base, "SPOL": 4})
    with pytest.raises(FamilyError):   # two norms (Q, K) in one launch: not in rmsnorm_persist
        fam.instantiate(qk, {"VEC": 4, "TPR": 32, "ROWS": 8, "PERSIST": 1})
    with pytest.raises(FamilyError, match=r"unknown params \['NSM'\]"):  # derived by _build
        fam.instantiate(p022, {**base, "PERSIST": 1, "NSM": 132})


def test_rmsnorm_space_starts_from_measured_best_and_offers_k8_knobs(sol_execbench_dir, tmp_path, monkeypatch):
    """The offline search starts from best/<problem>.json's params (k8 folded in: PERSIST=1 won 025/026),
    then the k8 knobs one at a time around it; without a best/ file, around the heuristic's guess.
    Every point instantiates; the qk problem (two norms in one launch) gets no PERSIST."""
    import json

    from solforge.kernels import rmsnorm as rms
    fam = get_family("rmsnorm")
    fb = sol_execbench_dir / "FlashInfer-Bench"
    p025 = load_problem_dir(fb / "025_rmsnorm_h4096")
    best025 = json.loads((rms.CUDA_DIR / "rmsnorm" / "best" / "025_rmsnorm_h4096.json").read_text())["params"]
    space = fam.param_space(p025)
    assert space[0] == best025 and best025.get("PERSIST") == 1
    near = space[1:16]
    assert {**best025, "LPOL": 3} in near and {**best025, "SPOL": 3} in near
    assert {"VEC": 8, "TPR": 256, "ROWS": 1, "WPRE": 1} in near       # the other kernel, same shape
    assert {**best025, "BPS": 2} in near
    assert {**best025, "PF": 2} not in space     # its ring spills in 64 registers (_persist_fits)
    keys = [json.dumps(p, sort_keys=True) for p in space]
    assert len(keys) == len(set(keys))
    for p in space[:12] + space[-4:]:
        fam.instantiate(p025, p)
    # no best/ file: the heuristic's first guess, then its k8 neighbours; PERSIST for its first shapes
    monkeypatch.setattr(rms, "CUDA_DIR", tmp_path)
    space = fam.param_space(p025)
    guess = space[0]
    assert "PERSIST" not in guess and {**guess, "SPOL": 1} in space[1:10]
    assert any(p.get("PERSIST") and p["PF"] == 1 for p in space[1:10])
    assert sum(bool(p.get("PERSIST")) for p in space) >= 4
    qk = load_problem_dir(sol_execbench_dir / "L1/038_flux_multi_head_rmsnorm_qk")
    qspace = fam.param_space(qk)
    assert qspace and not any(p.get("PERSIST") for p in qspace)
    assert any(p.get("LPOL") for p in qspace)


RMS_PROBLEMS = ["FlashInfer-Bench/001_fused_add_rmsnorm_h2048", "FlashInfer-Bench/003_fused_add_rmsnorm_h7168",
                "FlashInfer-Bench/021_rmsnorm_h128", "FlashInfer-Bench/022_rmsnorm_h512",
                "FlashInfer-Bench/023_rmsnorm_h1536", "FlashInfer-Bench/025_rmsnorm_h4096",
                "FlashInfer-Bench/026_rmsnorm_h7168", "L1/033_post_norm_residual", "L1/069_rms_norm"]


def test_rmsnorm_offered_persist_points_do_not_spill(sol_execbench_dir):
    """Every PERSIST=1 point the search space offers on the RMSNorm problems keeps its register ring
    without stack under __launch_bounds__(threads, BPS) (the k8 winners of 025/026 among them)."""
    fam = get_family("rmsnorm")
    seen = 0
    for rel in RMS_PROBLEMS:
        problem = load_problem_dir(sol_execbench_dir / rel)
        for p in fam.param_space(problem):
            if not p.get("PERSIST"):
                continue
            cubin, _ = compile_cuda_candidate(fam.instantiate(problem, p))
            use = _resource_usage(cubin)
            if not use:
                pytest.skip("no cuobjdump")
            assert use.get("STACK", 0) == 0 and use.get("LOCAL", 0) == 0, (rel, p, use)
            seen += 1
    assert seen >= 20
