"""fp8_gemm family: it claims exactly Quant 001/006/015/021/022 among the shared problems (not the
FP8 problems whose references do more: MLPs, norms, QKV splits, MoE); every param point compiles
with NVRTC for sm_90a without local memory; the launch specs and the workspace size evaluate on
every workload; and a CPU emulation of the kernels' arithmetic (quantization with the scale
layouts, the workspace layout, tile order, per-128-K promotion, bias, bf16) reproduces the
reference's fp8 values and scales bit-exactly and its output within the workload tolerance. A
lane-level emulation of the ldmatrix / m16n8k32 fragment addressing checks the GEMM's tile math.

Not checkable on a CPU: the real e4m3 mma.sync (on sm_90 lowered to F2FP + HMMA.16816.F32, seen in
the SASS), cp.async ring races, cvt.rn.satfinite.e4m3x2's rounding (PTX ISA: RNE, `a` in the high
byte) and speed."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np

import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, all_families, families_for, get_family
from solforge.kernels.fp8_gemm import QUANT_THREADS, SMEM_LIMIT, smem_bytes
from solforge.problem.loader import load_problem_dir
from tests.unit.family_checks import check_compiled, claimed

SUBSET = "Quant"
CLAIMED = ["001_fp8_attention_output_projection", "006_fp8_vision_attention_output_projection",
           "015_fp8_mla_attention_output_projection", "021_fp8_mamba2_in_projection",
           "022_fp8_mamba2_out_projection"]
NOT_CLAIMED = ["002_fp8_attention_qkv_projection", "003_fp8_mlp_gate_up_projection",
               "004_fp8_moe_expert_linear", "012_fp8_shared_expert_mlp",
               "013_fp8_mla_kv_compression_projection", "016_fp8_multi_latent_attention_qkv_projection",
               "017_fp8_shared_expert_mlp"]
# per problem: (A_MODE, W_MODE, weight scales in the W^T layout [K/128, N/128], HAS_BIAS, K, N)
MODES = {"001": (1, 1, False, 1, 7680, 7680), "006": (2, 2, True, 0, 1280, 1280),
         "015": (0, 0, True, 0, 16384, 7168), "021": (1, 1, False, 0, 2688, 13952),
         "022": (0, 0, False, 0, 2688, 2688)}
CU = Path(__file__).resolve().parents[2] / "kernels_cuda" / "fp8_gemm" / "fp8_gemm.cu"
E4M3_MAX = 448.0


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return {n: load_problem_dir(sol_execbench_dir / SUBSET / n) for n in CLAIMED}


def _fam():
    return get_family("fp8_gemm")


def test_claims_exactly_the_five(sol_execbench_dir):
    assert claimed(_fam(), sol_execbench_dir) == CLAIMED


def test_fp8_problems_that_do_more_are_not_claimed(sol_execbench_dir):
    """Their references use the same BlockwiseScaler / scaled_mm helpers, plus more (several GEMMs,
    activations, norms, splits): no recipe matches them."""
    seen = 0
    for n in NOT_CLAIMED:
        d = sol_execbench_dir / SUBSET / n
        if not d.exists():
            continue
        p = load_problem_dir(d)
        assert "CuBLASRefBlockwiseGemm" in p.definition.reference or "BlockwiseScaler" in p.definition.reference
        assert not _fam().matches(p), n
        seen += 1
    assert seen >= 4


def test_modes_per_problem(problems):
    for name, p in problems.items():
        f = _fam().analyze(p.definition).fixed
        a, w, wt, bias, k, n = MODES[name[:3]]
        want_strides = (1, n // 128) if wt else (k // 128, 1)
        assert (f["A_MODE"], f["W_MODE"], (f["SW_SN"], f["SW_SK"]), f["HAS_BIAS"], f["K_DIM"], f["N_DIM"]) == \
            (a, w, want_strides, bias, k, n), name


def _with_reference(defn, ref):
    data = defn.model_dump()
    data["reference"] = ref
    return type(defn).model_validate(data)


def test_changed_references_are_not_claimed(problems):
    fam = _fam()
    d22, d01 = problems[CLAIMED[4]].definition, problems[CLAIMED[0]].definition
    for defn, old, new in (
            (d22, "scale_recipe_b=ScalingType.BlockWise128x128", "scale_recipe_b=ScalingType.BlockWise1x128"),
            (d22, "    return output\n", "    output = output * 2\n    return output\n"),   # one statement more
            (d01, "E4M3_MAX = 448.0", "E4M3_MAX = 240.0"),
            (d01, "scales = block_max / self.E4M3_MAX", "scales = block_max / self.E4M3_MAX / 2"),
            (d01, "qw = weight_scaled.T.to(torch.float8_e4m3fn)", "qw = weight_scaled.to(torch.float8_e4m3fn)"),
            (d01, "bias=o_proj_bias", "bias=None"),
            (d01, "scale_x = activation_scaler.compute_scales(attn_output_fp32)",
             "scale_x = weight_scaler.compute_scales(attn_output_fp32)")):
        assert old in defn.reference, old
        assert not fam.matches(_with_reference(defn, defn.reference.replace(old, new, 1))), new
    assert fam.matches(_with_reference(d22, d22.reference.replace("    return output\n", "    return output  # x\n")))
    # the matcher reads what the reference runs: a change to a helper that 022 never calls (it
    # takes fp8 operands, so nothing is quantized in its call) leaves its trace, and its claim, alone
    assert fam.matches(_with_reference(d22, d22.reference.replace("E4M3_MAX = 448.0", "E4M3_MAX = 240.0")))


def test_not_offered_before_a_gpu_check(problems):
    fam = _fam()
    assert fam in all_families()
    if not fam.offered:
        for p in problems.values():
            assert fam not in families_for(p)


def test_bad_params_rejected(problems):
    fam, p = _fam(), problems[CLAIMED[0]]
    for bad in ({"BM": 128, "BN": 128, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3},   # 64x64 warp tiles
                {"BM": 256, "BN": 64, "WARPS_M": 8, "WARPS_N": 1, "STAGES": 3},
                {"BM": 64, "BN": 32, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3},
                {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 1},
                {"BM": 128, "BN": 128, "WARPS_M": 4, "WARPS_N": 4, "STAGES": 6},    # shared memory
                {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2}):
        with pytest.raises(FamilyError):
            fam.instantiate(p, bad)


def _rows(p, w) -> int:
    x = p.definition.inputs[_fam().analyze(p.definition).info["names"]["x"]]
    return math.prod(w.axes[d] for d in x.shape[:-1])


def ws_layout(a_mode, w_mode, M, K, N):
    """The .cu's ws_*_off: (qw, qa, sw, sa) byte offsets and the total size."""
    kb, nb = K // 128, N // 128
    qa = 0 if w_mode == 0 else N * K
    sw = qa + (0 if a_mode == 0 else M * K)
    sa = sw + (nb * kb * 4 if w_mode == 1 else 0)
    total = sa + (M * kb * 4 if a_mode == 1 else 0)
    return 0, qa, sw, sa, total


@pytest.mark.parametrize("name", CLAIMED)
def test_every_point_compiles_without_spills_and_launches_fit(problems, name, tmp_path):
    fam, p = _fam(), problems[name]
    space = fam.param_space(p)
    assert len(space) >= 3
    f = fam.analyze(p.definition).fixed
    quant = f["A_MODE"] != 0 or f["W_MODE"] != 0
    for params in space:
        cand = fam.instantiate(p, params)
        Candidate.model_validate_json(cand.model_dump_json())
        assert [l.kernel for l in cand.launches] == (["fp8_quant"] if quant else []) + ["fp8_gemm"]
        assert cand.workspace_zero == "0"
        gemm = cand.launches[-1]
        if not quant:   # no workspace: the launcher refuses a "workspace" arg then
            assert cand.workspace == "0" and all("workspace" not in l.args for l in cand.launches)
        for w in p.workloads:
            env = launch_env(w.axes, w.scalars(), cand.params)
            M, K, N = _rows(p, w), f["K_DIM"], f["N_DIM"]
            assert eval_expr(gemm.grid[0], env) == math.ceil(M / params["BM"]) * (N // params["BN"]) < 2**31
            assert eval_expr(gemm.block[0], env) == params["WARPS_M"] * params["WARPS_N"] * 32
            smem = eval_expr(gemm.smem, env)
            assert smem == smem_bytes(params["BM"], params["BN"], params["STAGES"]) and 0 < smem <= SMEM_LIMIT
            assert eval_expr(gemm.args[-1].split(":", 1)[1], env) == M
            assert eval_expr(cand.workspace, env) == ws_layout(f["A_MODE"], f["W_MODE"], M, K, N)[-1]
            if quant:
                q = cand.launches[0]
                n_act = eval_expr(q.args[-1].split(":", 1)[1], env)
                assert n_act == (math.ceil(M * K // 128 / (QUANT_THREADS // 32)) if f["A_MODE"] else 0)
                assert eval_expr(q.grid[0], env) == n_act + (N // 128 * K // 128 if f["W_MODE"] else 0)
                assert eval_expr(q.args[-2].split(":", 1)[1], env) == M
        check_compiled(cand, tmp_path, ("LDSM", "LDGSTS", "HMMA"), kernels=2, what=params)


# ── CPU emulation ────────────────────────────────────────────────────────────────────────────────
INV448_CUDA = (torch.tensor(1.0) / torch.tensor(E4M3_MAX)).item()   # fl32(1/448), torch's CUDA a * (1/b)


class CudaScalarDivision(torch.overrides.TorchFunctionMode):
    """Runs (CPU) torch code with CUDA's `fp32 tensor / python scalar` = tensor * fl32(1 / scalar)
    (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu, the CPU-scalar branch): the reference as the
    GPU computes it. Tensor / tensor stays an IEEE division, as on CUDA."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func in (torch.Tensor.__truediv__, torch.Tensor.div, torch.div, torch.true_divide) and len(args) == 2
                and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float32
                and isinstance(args[1], (int, float)) and not kwargs):
            return args[0] * torch.tensor(np.float32(1.0) / np.float32(args[1]), dtype=torch.float32)
        return func(*args, **kwargs)


def semantics(cuda: bool):
    return CudaScalarDivision() if cuda else contextlib.nullcontext()


def scale_of(amax: torch.Tensor, cuda_semantics: bool) -> torch.Tensor:
    """compute_scale: torch's CUDA `tensor / python_scalar` multiplies by the fp32 reciprocal (what
    the kernel does: __fmul_rn(amax, 1.0f / 448)); CPU torch divides (what the CPU reference gets)."""
    s = amax * torch.tensor(INV448_CUDA, dtype=torch.float32) if cuda_semantics else amax / E4M3_MAX
    return torch.clamp(s, min=1e-12)


def quant(v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """q_in + e4m3: clamp(v / s, +-448) (IEEE division), then RNE to e4m3."""
    return torch.clamp(v / s, -E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def emulate_quant(x, w, sx_in, sw_in, fixed, cuda_semantics=True):
    """fp8_quant: the activation warps (a 1x128 block each) and the weight CTAs (a 128x128 block
    each), writing the workspace at the .cu's offsets. Returns the workspace (bytes, NaN-poisoned
    scale slots start as 0xff) and the (qa, qw, sa, sw) views the GEMM reads."""
    a_mode, w_mode, K, N = fixed["A_MODE"], fixed["W_MODE"], fixed["K_DIM"], fixed["N_DIM"]
    kb, nb = K // 128, N // 128
    M = x.shape[0]
    off_qw, off_qa, off_sw, off_sa, total = ws_layout(a_mode, w_mode, M, K, N)
    ws = torch.full((total,), 0xff, dtype=torch.uint8)
    if a_mode:
        for m in range(M):
            for b in range(kb):
                v = x[m, b * 128:(b + 1) * 128].float()
                if a_mode == 1:
                    s = scale_of(v.abs().max(), cuda_semantics)
                    ws[off_sa:off_sa + M * kb * 4].view(torch.float32)[m * kb + b] = s
                else:
                    s = sx_in[m * kb + b]
                q = quant(v, s)
                ws[off_qa + m * K + b * 128: off_qa + m * K + (b + 1) * 128] = q.view(torch.uint8)
    if w_mode:
        sn, sk = fixed["SW_SN"], fixed["SW_SK"]
        for n_ in range(nb):
            for b in range(kb):
                blk = w[n_ * 128:(n_ + 1) * 128, b * 128:(b + 1) * 128].float()
                if w_mode == 1:
                    s = scale_of(blk.abs().max(), cuda_semantics)
                    ws[off_sw:off_sw + nb * kb * 4].view(torch.float32)[n_ * kb + b] = s
                else:
                    s = sw_in[n_ * sn + b * sk]
                q = quant(blk, s).view(torch.uint8)
                for r in range(128):
                    o = off_qw + (n_ * 128 + r) * K + b * 128
                    ws[o:o + 128] = q[r]
    return ws


def emulate_gemm(a_in, w_in, sa_in, sw_in, bias, ws, M, fixed, params):
    """fp8_gemm over the grouped tile order: per K block a fresh fp32 partial (the mma's), promoted by
    sa[m, kb] * sw[nb, kb] with an fma into the running sum; + bias; bf16. Reads the operands the
    .cu reads for the modes (inputs or workspace). Output rows start as NaN."""
    a_mode, w_mode, K, N = fixed["A_MODE"], fixed["W_MODE"], fixed["K_DIM"], fixed["N_DIM"]
    kb_n = K // 128
    off_qw, off_qa, off_sw, off_sa, _ = ws_layout(a_mode, w_mode, M, K, N)
    A = (a_in.view(torch.uint8).reshape(M, K) if a_mode == 0 else ws[off_qa:off_qa + M * K].reshape(M, K))
    W = (w_in.view(torch.uint8).reshape(N, K) if w_mode == 0 else ws[off_qw:off_qw + N * K].reshape(N, K))
    A, W = (t.view(torch.float8_e4m3fn).float() for t in (A, W))
    SA = ws[off_sa:off_sa + M * kb_n * 4].view(torch.float32) if a_mode == 1 else sa_in.reshape(-1)
    SW = ws[off_sw:off_sw + (N // 128) * kb_n * 4].view(torch.float32) if w_mode == 1 else sw_in.reshape(-1)
    sn, sk = (kb_n, 1) if w_mode == 1 else (fixed["SW_SN"], fixed["SW_SK"])
    BM, BN, GROUP_M = params["BM"], params["BN"], 8
    num_m, num_n = -(-M // BM), N // BN
    out = torch.full((M, N), float("nan"))
    seen = set()
    for pid in range(num_m * num_n):
        per_group = GROUP_M * num_n
        first_m = (pid // per_group) * GROUP_M
        gsize = min(num_m - first_m, GROUP_M)
        pid_m, pid_n = first_m + (pid % per_group) % gsize, (pid % per_group) // gsize
        assert (pid_m, pid_n) not in seen and pid_m < num_m and pid_n < num_n
        seen.add((pid_m, pid_n))
        m0, n0 = pid_m * BM, pid_n * BN
        rows = torch.arange(m0, m0 + BM)
        ok = rows < M
        a_t = torch.where(ok[:, None], A[rows.clamp(max=M - 1)], 0.0)     # zero-filled rows >= M
        acc = torch.zeros(BM, BN)
        for kb in range(kb_n):
            part = a_t[:, kb * 128:(kb + 1) * 128] @ W[n0:n0 + BN, kb * 128:(kb + 1) * 128].T
            sa = torch.where(ok, SA[rows.clamp(max=M - 1) * kb_n + kb], 0.0)
            s = sa * SW[(n0 // 128) * sn + kb * sk]
            acc = torch.addcmul(acc, part, s[:, None])
        if bias is not None:
            acc = acc + bias[n0:n0 + BN].float()
        out[m0:min(m0 + BM, M), n0:n0 + BN] = acc[:int(ok.sum())].to(torch.bfloat16).float()
    assert len(seen) == num_m * num_n
    return out.to(torch.bfloat16)


def _reference_ns(defn):
    ns: dict = {}
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    return ns


def make_inputs(name, ns, M, K, N, seed, batch=None):
    """Small inputs the way each problem's get_inputs makes them (the reference's own scaler, CPU)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w = torch.randn(N, K, generator=g).to(torch.bfloat16)
    x[1, :128] = 0.0                                   # an all-zero block: scale 1e-12
    x[2, 5] = 300.0                                    # a block with an outlier
    w[3, :] *= 1e-3                                    # a small-magnitude row inside a weight block
    BS, ST = ns["BlockwiseScaler"], ns["ScalingType"]
    act, wgt = BS(ST.BlockWise1x128), BS(ST.BlockWise128x128)
    xf, wtf = x.float(), w.float().T
    sx, swt = act.compute_scales(xf), wgt.compute_scales(wtf)                 # [M, K/128], [K/128, N/128]
    qx = act.apply_scaling(xf, sx, inverse=False, clamp_to_fp8_range=True).to(torch.float8_e4m3fn)
    qw = wgt.apply_scaling(wtf, swt, inverse=False, clamp_to_fp8_range=True).T.to(torch.float8_e4m3fn)
    tag = name[:3]
    if tag == "001":
        return {"attn_output": x, "o_proj_weight": w, "o_proj_bias": torch.randn(N, generator=g).to(torch.bfloat16)}
    if tag == "006":
        return {"attn_output": x, "weight": w, "scale_attn": sx, "scale_weight": swt}
    if tag == "015":
        b = batch or 1
        return {"hidden_states": qx.view(b, M // b, K), "weight": qw, "scale_x": sx.view(b, M // b, K // 128),
                "scale_w": swt}
    if tag == "021":
        return {"hidden_states": x, "weight": w}
    return {"x": qx, "w": qw, "scale_x": sx, "scale_w": swt.T.contiguous()}


def within_tolerance(out, ref, atol=0.005, rtol=0.02, ratio=0.99) -> float:
    err = (out.float() - ref.float()).abs()
    ok = err <= atol + rtol * ref.float().abs()
    assert torch.isfinite(out.float()).all()
    frac = ok.float().mean().item()
    assert frac >= ratio, frac
    return frac


# K = 384 (3 scale blocks), N = 256 (2 weight blocks); M straddles the tiles (BM 64/128)
SHAPES = [(130, 384, 256), (7, 256, 128), (64, 384, 256)]


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda_division", "cpu_division"])
@pytest.mark.parametrize("name", CLAIMED)
def test_emulation_matches_reference(problems, name, cuda):
    """The emulated kernels against the reference run on the CPU, with the CPU's scalar division
    and (CudaScalarDivision) with CUDA's, which the kernel implements: within the workload
    tolerance on every param point, and close to the exact (float64) dequantized product."""
    p = problems[name]
    ns = _reference_ns(p.definition)
    for si, (M, K, N) in enumerate(SHAPES):
        f = _small_fixed(p, K, N)
        batch = 2 if (name.startswith("015") and M % 2 == 0) else 1
        with semantics(cuda):
            inputs = make_inputs(name, ns, M, K, N, seed=si, batch=batch)
            ref = ns["run"](**inputs)
            exact = exact_output(p, inputs, f, ns)
        for params in _fam().param_space(p):
            out, _ = run_emulation_fixed(p, inputs, params, f, cuda_semantics=cuda)
            assert out.shape == ref.shape and out.dtype == torch.bfloat16
            within_tolerance(out, ref)
            # against the exact dequantized product (float64): the promotion order only rounds fp32
            assert (out.float() - exact).abs().max() <= 2 ** -7 * exact.abs().max() + 1e-3


def _small_fixed(p, K, N):
    """The problem's fixed params at a small K, N (the scale strides follow the layout)."""
    f = dict(_fam().analyze(p.definition).fixed)
    wt = f["SW_SN"] == 1 and f["W_MODE"] != 1
    f.update(K_DIM=K, N_DIM=N, SW_SN=1 if wt else K // 128, SW_SK=N // 128 if wt else 1)
    return f


def run_emulation_fixed(p, inputs, params, fixed, cuda_semantics=True):
    names = _fam().analyze(p.definition).info["names"]
    x = inputs[names["x"]]
    M = x.numel() // fixed["K_DIM"]
    x2 = x.reshape(M, fixed["K_DIM"])
    sx, sw = inputs.get(names.get("sx", "")), inputs.get(names.get("sw", ""))
    ws = emulate_quant(x2, inputs[names["w"]], None if sx is None else sx.reshape(-1),
                       None if sw is None else sw.reshape(-1), fixed, cuda_semantics)
    out = emulate_gemm(x2, inputs[names["w"]], sx, sw, inputs.get(names.get("bias", "")), ws, M, fixed, params)
    return out.reshape(*x.shape[:-1], fixed["N_DIM"]), ws


def reference_quantized(name, ns, inputs):
    """(qx, qw, sx [M, K/128], sw [N/128, K/128]) as the reference computes them (CPU)."""
    BS, ST = ns["BlockwiseScaler"], ns["ScalingType"]
    act, wgt = BS(ST.BlockWise1x128), BS(ST.BlockWise128x128)
    tag = name[:3]
    if tag in ("015", "022"):
        x, w, sx, sw = inputs.values()
        sw = sw.T if tag == "015" else sw
        return x.reshape(-1, x.shape[-1]), w, sx.reshape(-1, sx.shape[-1]), sw
    x, w = list(inputs.values())[:2]
    xf, wf = x.float(), w.float()
    if tag == "006":
        sx, swt = inputs["scale_attn"], inputs["scale_weight"]
    else:
        sx = act.compute_scales(xf)
        swt = wgt.compute_scales(wf.T) if tag == "001" else wgt.compute_scales(wf).T
    qx = act.apply_scaling(xf, sx, inverse=False, clamp_to_fp8_range=True).to(torch.float8_e4m3fn)
    qw = wgt.apply_scaling(wf.T, swt, inverse=False, clamp_to_fp8_range=True).T.to(torch.float8_e4m3fn)
    return qx, qw, sx, swt.T


def exact_output(p, inputs, fixed, ns):
    qx, qw, sx, sw = reference_quantized(p.definition.name, ns, inputs)
    a = qx.double() * sx.double().repeat_interleave(128, 1)
    b = qw.double() * sw.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
    y = a @ b.T
    names = _fam().analyze(p.definition).info["names"]
    if "bias" in names:
        y = y + inputs[names["bias"]].double()
    x = inputs[names["x"]]
    return y.reshape(*x.shape[:-1], fixed["N_DIM"]).float()


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda_division", "cpu_division"])
@pytest.mark.parametrize("name", ["001_fp8_attention_output_projection", "006_fp8_vision_attention_output_projection",
                                  "021_fp8_mamba2_in_projection"])
def test_quantization_is_bit_exact(problems, name, cuda):
    """The kernel's quantization gives the reference's scales and fp8 bytes exactly (with either
    division semantics, matched on both sides), in the workspace layout the GEMM reads: the block
    structure, the W vs W^T scale layouts, clamp, RNE, the 1e-12 floor."""
    p = problems[name]
    ns = _reference_ns(p.definition)
    M, K, N = 130, 384, 256
    f = _small_fixed(p, K, N)
    with semantics(cuda):
        inputs = make_inputs(name, ns, M, K, N, seed=7)
        qx, qw, sx, sw = reference_quantized(name, ns, inputs)
    _, ws = run_emulation_fixed(p, inputs, {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 2}, f,
                                cuda_semantics=cuda)
    off_qw, off_qa, off_sw, off_sa, total = ws_layout(f["A_MODE"], f["W_MODE"], M, K, N)
    assert total == ws.numel()
    assert torch.equal(ws[off_qa:off_qa + M * K].reshape(M, K), qx.view(torch.uint8))
    assert torch.equal(ws[off_qw:off_qw + N * K].reshape(N, K), qw.view(torch.uint8))
    if f["A_MODE"] == 1:
        assert torch.equal(ws[off_sa:].view(torch.float32).reshape(M, K // 128), sx)
        assert sx[1, 0] == torch.tensor(1e-12, dtype=torch.float32)     # the all-zero block
    if f["W_MODE"] == 1:
        assert torch.equal(ws[off_sw:off_sw + N // 128 * K // 128 * 4].view(torch.float32).reshape(N // 128, K // 128), sw)


def test_the_division_semantics_matter(problems):
    """With the other division semantics than the reference's, many fp8 bytes differ (a 1-ulp scale
    change flips x / s at the many exact midpoints of bf16 ratios) and the output fails the
    tolerance: the kernel must use CUDA's (the GPU reference's) exactly."""
    p = problems[CLAIMED[0]]
    ns = _reference_ns(p.definition)
    M, K, N = 130, 384, 256
    f = _small_fixed(p, K, N)
    with semantics(True):
        inputs = make_inputs(p.definition.name, ns, M, K, N, seed=0)
        ref = ns["run"](**inputs)
    out, _ = run_emulation_fixed(p, inputs, {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 2}, f,
                                 cuda_semantics=False)
    with pytest.raises(AssertionError):
        within_tolerance(out, ref)


def test_cuda_scale_semantics():
    """torch on CUDA computes `scales = block_max / 448.0` as block_max * fl32(1/448)
    (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu: a CPU-scalar divisor becomes a reciprocal
    multiply); on CPU it divides. They differ in the last bit for many amax values, so the kernel
    multiplies (the GPU reference's scales) and the test reproduces the CPU reference with division.
    Both give outputs well within tolerance."""
    src = CU.read_text()
    assert "fmaxf(__fmul_rn(amax, 1.0f / E4M3_MAX), 1e-12f)" in src
    assert "fminf(fmaxf(__fdiv_rn(v, s), -E4M3_MAX), E4M3_MAX)" in src
    amax = torch.randn(4096).abs().to(torch.bfloat16).float()
    assert (scale_of(amax, True) != scale_of(amax, False)).any()
    assert ((scale_of(amax, True) - scale_of(amax, False)).abs() <= 2 ** -23 * scale_of(amax, False)).all()


def test_emulation_catches_a_wrong_scale_layout(problems):
    """Reading 015's W^T-layout weight scales as [N/128, K/128] breaks the output."""
    p = problems[CLAIMED[2]]
    ns = _reference_ns(p.definition)
    M, K, N = 64, 384, 256
    inputs = make_inputs(p.definition.name, ns, M, K, N, seed=3)
    inputs["scale_w"] = inputs["scale_w"] * torch.tensor([[1.0, 4.0]])   # blocks differ per n
    ref = ns["run"](**inputs)
    f = dict(_fam().analyze(p.definition).fixed, K_DIM=K, N_DIM=N)
    good = dict(f, SW_SN=1, SW_SK=N // 128)
    out, _ = run_emulation_fixed(p, inputs, {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 2}, good)
    within_tolerance(out, ref)
    bad = dict(f, SW_SN=K // 128, SW_SK=1)
    out, _ = run_emulation_fixed(p, inputs, {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 2}, bad)
    with pytest.raises(AssertionError):
        within_tolerance(out, ref)


# ── lane-level fragment emulation ────────────────────────────────────────────────────────────────
def swz(row, chunk):
    return row * 128 + ((chunk ^ (row & 7)) << 4)


def to_smem(t: torch.Tensor) -> torch.Tensor:
    """[rows][128] bytes stored swizzled, as the cp.async loads place them."""
    rows = t.shape[0]
    s = torch.zeros(rows * 128, dtype=torch.uint8)
    for r in range(rows):
        for c in range(8):
            s[swz(r, c):swz(r, c) + 16] = t[r, c * 16:(c + 1) * 16]
    return s


def ldsm_x4(smem: torch.Tensor, addr_of_lane) -> list:
    """ldmatrix.x4.b16: matrix q's row i comes from lane 8q+i's address (16 bytes); lane l
    receives, of each matrix, row l // 4, bytes (l % 4) * 4 .. +3."""
    regs = [[None] * 4 for _ in range(32)]
    for q in range(4):
        rows = [smem[addr_of_lane(8 * q + i):addr_of_lane(8 * q + i) + 16] for i in range(8)]
        for lane in range(32):
            regs[lane][q] = rows[lane // 4][(lane % 4) * 4:(lane % 4) * 4 + 4]
    return regs


def mma_m16n8k32(a_regs, b_regs) -> torch.Tensor:
    """PTX ISA m16n8k32 (8-bit types): a_i holds row g + 8 * (i & 1), k bytes 16 * (i >> 1) + 4t..;
    b_i holds column g, k bytes 16 * i + 4t..; returns the 16x8 product (fp32)."""
    A = torch.zeros(16, 32)
    B = torch.zeros(32, 8)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            vals = a_regs[lane][i].view(torch.float8_e4m3fn).float()
            A[g + 8 * (i & 1), 16 * (i >> 1) + 4 * t:16 * (i >> 1) + 4 * t + 4] = vals
        for i in range(2):
            B[16 * i + 4 * t:16 * i + 4 * t + 4, g] = b_regs[lane][i].view(torch.float8_e4m3fn).float()
    return A @ B


def test_warp_fragments_compute_the_tile_product():
    """The GEMM's ldmatrix addresses (A: rows wm0 + i*16 + (lane & 15), chunk kk*2 + (lane >> 4);
    B: rows wn0 + j*8 + (lane & 7) + ((lane >> 4) << 3), chunk kk*2 + ((lane >> 3) & 1)) and register
    use (bf[j] = r0, r1; bf[j+1] = r2, r3) give A_w @ B_w^T over a 128-byte K block."""
    g = torch.Generator().manual_seed(0)
    BM, BN, wm0, wn0, WTM, WTN = 64, 64, 32, 32, 32, 32
    A8 = (torch.randn(BM, 128, generator=g) * 8).to(torch.float8_e4m3fn)
    B8 = (torch.randn(BN, 128, generator=g) * 8).to(torch.float8_e4m3fn)
    sA, sB = to_smem(A8.view(torch.uint8)), to_smem(B8.view(torch.uint8))
    C = torch.zeros(WTM, WTN)
    for kk in range(4):
        af = [ldsm_x4(sA, lambda l, i=i: swz(wm0 + i * 16 + (l & 15), kk * 2 + (l >> 4))) for i in range(WTM // 16)]
        bf = {}
        for j in range(0, WTN // 8, 2):
            r = ldsm_x4(sB, lambda l, j=j: swz(wn0 + j * 8 + (l & 7) + ((l >> 4) << 3), kk * 2 + ((l >> 3) & 1)))
            bf[j] = [[r[l][0], r[l][1]] for l in range(32)]
            bf[j + 1] = [[r[l][2], r[l][3]] for l in range(32)]
        for i in range(WTM // 16):
            for j in range(WTN // 8):
                C[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8] += mma_m16n8k32(af[i], bf[j])
    want = A8.float()[wm0:wm0 + WTM] @ B8.float()[wn0:wn0 + WTN].T
    assert torch.allclose(C, want, rtol=1e-5, atol=1e-3)


def test_kernel_source_spells_the_emulated_formulas():
    src = CU.read_text()
    for expr in ("return row * 128 + ((chunk ^ (row & 7)) << 4);",
                 "swz(wm0 + i * 16 + (lane & 15), kk * 2 + (lane >> 4))",
                 "swz(wn0 + j * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))",
                 "bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]",
                 "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
                 "cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\\n\" : \"=h\"(r) : \"f\"(hi), \"f\"(lo)",
                 "const float swv = SW[nb * sw_sn + kb * sw_sk];",
                 "acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);",
                 "const int pid_m = first_m + (pid % per_group) % gsize, pid_n = (pid % per_group) / gsize;",
                 "return W_MODE == 0 ? 0 : (size_t)N_DIM * K_DIM;",
                 "return ws_qa_off() + (A_MODE == 0 ? 0 : (size_t)M * K_DIM);",
                 "return ws_sw_off(M) + (W_MODE == 1 ? (size_t)NB * KB * 4 : 0);",
                 "const int sw_sn = W_MODE == 1 ? KB : SW_SN, sw_sk = W_MODE == 1 ? 1 : SW_SK;",
                 "__floats2bfloat162_rn(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1)"):
        assert expr in src, expr


# ── fp8_quant's own text on the CPU (g++, tests/unit/cuda_host_emu.py) ──────────────────────────────
EMU_QUANT = r"""
#define SOLFORGE_HOST_EMU 1
inline float __fmul_rn(float a, float b) { return a * b; }      // -ffp-contract=off: one rounding
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
using std::fabs; using std::fmax; using std::fmin;
// c10::detail::fp8e4m3fn_from_fp32_value (torch's .to(float8_e4m3fn)): RNE; >= 480 -> NaN there,
// saturated here like cvt.rn.satfinite (the kernel clamps to +-448 first, so both agree)
inline uint32_t emu_e4m3(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    const uint32_t sign = u & 0x80000000u; u ^= sign;
    uint32_t r;
    if (u >= (1087u << 20)) r = 0x7e;
    else if (u < (121u << 23)) {
        const uint32_t dm = 141u << 23; float a, b; std::memcpy(&a, &u, 4); std::memcpy(&b, &dm, 4);
        a += b; std::memcpy(&u, &a, 4); r = u - dm;
    } else {
        const uint32_t odd = (u >> 20) & 1u; u += ((uint32_t)(7 - 127) << 23) + 0x7ffffu; u += odd; r = u >> 20;
    }
    if (r > 0x7e) r = 0x7e;
    return r | (sign >> 24);
}
"""

EMU_MAIN = r"""
int main() {
    FILE* f = std::fopen("in.bin", "rb");
    auto x = emu_read<__nv_bfloat16>(f, (size_t)EMU_M * K_DIM);
    auto w = emu_read<__nv_bfloat16>(f, (size_t)N_DIM * K_DIM);
    auto sx = emu_read<float>(f, (size_t)EMU_M * KB);
    auto sw = emu_read<float>(f, (size_t)NB * KB);
    std::fclose(f);
    std::vector<unsigned char> ws(EMU_WS, 0xff);                 // poisoned: every byte read is written
    const int n_act = A_MODE ? (EMU_M * KB + 7) / 8 : 0;
    emu_launch(n_act + (W_MODE ? NB * KB : 0), QUANT_THREADS,
               [&] { fp8_quant(x.data(), w.data(), sx.data(), sw.data(), ws.data(), EMU_M, n_act); });
    FILE* o = std::fopen("out.bin", "wb");
    std::fwrite(ws.data(), 1, ws.size(), o);
    std::fclose(o);
}
"""


@pytest.mark.parametrize("name", ["001_fp8_attention_output_projection", "006_fp8_vision_attention_output_projection",
                                  "021_fp8_mamba2_in_projection"])
def test_quant_kernel_text_on_the_cpu_is_bit_exact(problems, name, tmp_path):
    """fp8_quant's source (up to the GEMM part), compiled with g++ through the host shim (threads as
    std::threads, shuffles as block barriers), writes the workspace the GPU reference's quantization
    implies, byte for byte: the scales (CUDA's division semantics) and the fp8 values, at the
    offsets fp8_gemm reads. Only cvt.rn.satfinite.e4m3x2 is replaced (by torch's own fp32 -> e4m3
    routine; PTX ISA: RNE, `a` in the high byte)."""
    from tests.unit import cuda_host_emu as emu

    if not emu.HAVE_GXX:
        pytest.skip("no g++")
    p = problems[name]
    ns = _reference_ns(p.definition)
    M, K, N = 37, 384, 256                        # 37 * 3 = 111 blocks: the last CTA has spare warps
    f = _small_fixed(p, K, N)
    with semantics(True):
        inputs = make_inputs(name, ns, M, K, N, seed=11)
        qx, qw, sx, sw = reference_quantized(name, ns, inputs)
    names = _fam().analyze(p.definition).info["names"]
    x, w = inputs[names["x"]], inputs[names["w"]]
    sx_in = inputs[names["sx"]].reshape(-1) if "sx" in names else torch.zeros(M * K // 128)
    sw_in = inputs[names["sw"]].reshape(-1) if "sw" in names else torch.zeros(N * K // 128 // 128)
    _, off_qa, off_sw, off_sa, total = ws_layout(f["A_MODE"], f["W_MODE"], M, K, N)
    src = CU.read_text()
    src = emu.kernel_text(src[:src.index("// ---- GEMM")])
    params = {**f, "BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 2, "EMU_M": M, "EMU_WS": total}
    data = emu.build_and_run(tmp_path, emu.defines(params) + EMU_QUANT + src, EMU_MAIN,
                             [x.view(torch.int16).numpy(), w.view(torch.int16).numpy(),
                              sx_in.numpy(), sw_in.numpy()], total)
    ws = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    assert torch.equal(ws[off_qa:off_qa + M * K].reshape(M, K), qx.view(torch.uint8))
    assert torch.equal(ws[:N * K].reshape(N, K), qw.view(torch.uint8))
    if f["A_MODE"] == 1:
        assert torch.equal(ws[off_sa:].view(torch.float32).reshape(M, K // 128), sx)
    if f["W_MODE"] == 1:
        assert torch.equal(ws[off_sw:off_sa].view(torch.float32).reshape(N // 128, K // 128), sw)
    assert total == off_sa + (M * K // 128 * 4 if f["A_MODE"] == 1 else 0)
