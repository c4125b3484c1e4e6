"""fp8_gemm_wgmma family: fp8_gemm's computation (same matcher, quantization kernel, workspace and
launch args: reused, not copied) with the GEMM on Hopper wgmma m64nNk32 e4m3. Checked here: it
claims exactly fp8_gemm's problems and is not offered before a GPU check; every param point compiles
with NVRTC for sm_90a without local memory and the SASS holds the native FP8 GMMA (QGMMA ... E4M3,
no HMMA); the launches and workspace evaluate on every workload and equal fp8_gemm's but for the GEMM
kernel, block and shared memory; the quantization kernel is fp8_gemm.cu's text verbatim; a CPU model
of the kernel (the smem image the cp.async ring writes with the 128B swizzle, the wgmma descriptor
reads, the m64nNk32 accumulator layout per thread, the per-128-K promotion, bias, bf16) equals
fp8_gemm's emulation (tests/unit/test_kernels_fp8_gemm.py, imported).

Not checkable on a CPU: the real wgmma / descriptor / proxy-fence behaviour, cp.async ring races,
the tensor core's internal fp32 summation order within a K block, speed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, all_families, families_for, get_family
from solforge.kernels.fp8_gemm import SMEM_LIMIT
from solforge.kernels.fp8_gemm_wgmma import smem_bytes
from tests.unit import test_kernels_fp8_gemm as F
from tests.unit.family_checks import check_compiled, claimed

CU = Path(__file__).resolve().parents[2] / "kernels_cuda" / "fp8_gemm_wgmma" / "fp8_gemm_wgmma.cu"


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return {n: F.load_problem_dir(sol_execbench_dir / F.SUBSET / n) for n in F.CLAIMED}


def _fam():
    return get_family("fp8_gemm_wgmma")


def test_claims_exactly_fp8_gemms_problems(sol_execbench_dir):
    assert claimed(_fam(), sol_execbench_dir) == F.CLAIMED == claimed(F._fam(), sol_execbench_dir)


def test_not_offered_before_a_gpu_check(problems):
    fam = _fam()
    assert fam in all_families()
    fj = json.loads((CU.parent / "family.json").read_text())
    assert fj["offered"] is False and "offered_problems" not in fj
    for p in problems.values():
        assert fam not in families_for(p)


def test_bad_params_rejected(problems):
    fam, p = _fam(), problems[F.CLAIMED[0]]
    for bad in ({"BM": 256, "BN": 128, "STAGES": 4}, {"BM": 64, "BN": 256, "STAGES": 4},
                {"BM": 64, "BN": 32, "STAGES": 4}, {"BM": 128, "BN": 128, "STAGES": 1},
                {"BM": 128, "BN": 128, "STAGES": 7},                         # shared memory
                {"BM": 64, "BN": 64}, {"BM": 64, "BN": 64, "STAGES": 4, "WARPS_M": 2}):
        with pytest.raises(FamilyError):
            fam.instantiate(p, bad)


@pytest.mark.parametrize("name", F.CLAIMED)
def test_every_point_compiles_to_fp8_gmma_and_launches_fit(problems, name, tmp_path):
    fam, p = _fam(), problems[name]
    space = fam.param_space(p)
    assert len(space) >= 4
    f = fam.analyze(p.definition).fixed
    assert f == F._fam().analyze(p.definition).fixed
    quant = f["A_MODE"] != 0 or f["W_MODE"] != 0
    base = F._fam().instantiate(p, F._fam().param_space(p)[0])
    for params in space:
        cand = fam.instantiate(p, params)
        Candidate.model_validate_json(cand.model_dump_json())
        assert list(cand.sources) == ["fp8_gemm_wgmma.cu"]
        assert [l.kernel for l in cand.launches] == (["fp8_quant"] if quant else []) + ["fp8_gemm_wgmma"]
        # fp8_gemm's quant launch, workspace and GEMM args, unchanged
        assert cand.launches[:-1] == base.launches[:-1]
        assert (cand.workspace, cand.workspace_zero) == (base.workspace, base.workspace_zero)
        gemm = cand.launches[-1]
        assert gemm.args == base.launches[-1].args and gemm.grid == base.launches[-1].grid
        for w in p.workloads:
            env = launch_env(w.axes, w.scalars(), cand.params)
            M, K, N = F._rows(p, w), f["K_DIM"], f["N_DIM"]
            assert eval_expr(gemm.grid[0], env) == math.ceil(M / params["BM"]) * (N // params["BN"]) < 2**31
            assert eval_expr(gemm.block[0], env) == params["BM"] // 64 * 128
            smem = eval_expr(gemm.smem, env)
            assert smem == smem_bytes(params["BM"], params["BN"], params["STAGES"]) and 0 < smem <= SMEM_LIMIT
            assert eval_expr(gemm.args[-1].split(":", 1)[1], env) == M
            assert eval_expr(cand.workspace, env) == F.ws_layout(f["A_MODE"], f["W_MODE"], M, K, N)[-1]
        sass = check_compiled(cand, tmp_path, (f"QGMMA.64x{params['BN']}x32.F32.E4M3.E4M3", "LDGSTS"),
                              kernels=2, what=params)   # fp8_quant compiles (empty) in every mode
        if sass is not None:
            assert "HMMA" not in sass and "LDSM" not in sass, params


def _between(src: str, begin: str, end: str) -> str:
    return src[src.index(begin):src.index(end)]


def test_quant_kernel_is_fp8_gemms_text_spliced_in():
    """fp8_quant and the workspace offsets exist once, in fp8_gemm.cu (its GPU check and the g++
    bit-exact test of test_kernels_fp8_gemm.py cover them): the family splices that text into the
    candidate's source in place of the .cu's marker; the defines it relies on are the same."""
    from solforge.kernels.fp8_gemm_wgmma import QUANT_MARK, kernel_source, quant_section

    ours, theirs, built = CU.read_text(), F.CU.read_text(), kernel_source()
    assert QUANT_MARK in ours and "fp8_quant(" not in ours      # no copy on disk
    section = _between(theirs, "// ---- workspace layout", "// ---- GEMM")
    assert section == quant_section() and built.count(section) == 1 and QUANT_MARK not in built
    assert built.index("#define QUANT_THREADS") < built.index(section) < built.index("fp8_gemm_wgmma(")
    for d in ("#define E4M3_MAX 448.0f", "#define QUANT_THREADS 256", "#define KB (K_DIM / 128)",
              "#define NB (N_DIM / 128)", "#define GROUP_M 8"):
        assert d in ours and d in theirs, d


def test_kernel_source_spells_the_modelled_formulas():
    src = CU.read_text()
    for expr in ("const int pid_m = first_m + (pid % per_group) % gsize, pid_n = (pid % per_group) / gsize;",
                 "const int sw_sn = W_MODE == 1 ? KB : SW_SN, sw_sk = W_MODE == 1 ? 1 : SW_SK;",
                 "const float swv = SW[nb * sw_sn + kb * sw_sk];",
                 "const float s0 = sS[row0] * swv, s1 = sS[row0 + 8] * swv;",
                 "acc[i] = fmaf(part[i], ((i >> 1) & 1) ? s1 : s0, acc[i]);",
                 "const int row0 = wg * 64 + warp * 16 + (lane >> 2);",
                 "const int col = n0 + j * 8 + (lane & 3) * 2;",
                 "__floats2bfloat162_rn(acc[4 * j + 2 * h] + b0, acc[4 * j + 2 * h + 1] + b1)",
                 "wgmma_e4m3<BN>(part, smem_desc(sA + kk * 32), smem_desc(sB + kk * 32), kk);",
                 "const uint32_t sA = base + s * STAGE_BYTES + wg * 64 * 128, sB = base + s * STAGE_BYTES + A_BYTES;",
                 "cp_async16(sA + swz(r, c), A + (size_t)(ok ? m0 + r : 0) * K_DIM + kb * 128 + c * 16, ok);",
                 "cp_async16(sB + swz(r, c), W + (size_t)(n0 + r) * K_DIM + kb * 128 + c * 16, true);",
                 "row * 128 + ((chunk ^ (row & 7)) << 4)",
                 "| (1ull << 16) | (64ull << 32) | (1ull << 62)",
                 "const uint32_t base = (raw + 1023u) & ~1023u;",
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3",
                 '"%64, %65, p, 1, 1;\\n}\\n"'):
        assert expr in src, expr


# ── a CPU model of the wgmma kernel ───────────────────────────────────────────────────────────────
def smem_image(tile_u8: torch.Tensor) -> torch.Tensor:
    """[R, 128] bytes as load() stores them: row r's 16-byte chunk c at r*128 + ((c ^ (r & 7)) << 4)."""
    R = tile_u8.shape[0]
    img = torch.full((R * 128,), 0xAA, dtype=torch.uint8)
    r = torch.arange(R)[:, None, None]
    c = torch.arange(8)[None, :, None]
    b = torch.arange(16)[None, None, :]
    img[(r * 128 + ((c ^ (r & 7)) << 4) + b).reshape(-1)] = tile_u8.reshape(R, 8, 16).reshape(-1)
    return img


def desc_read(img: torch.Tensor, start: int, rows: int) -> torch.Tensor:
    """What a K-major 128B-swizzle descriptor (SBO 1024, start 1024-aligned + kk*32) gives one k32
    wgmma: logical (row r, byte j < 32) at start + r*128 + j, address bits [4:6] XOR bits [7:9]."""
    r = torch.arange(rows)[:, None]
    j = torch.arange(32)[None, :]
    addr = start + (r // 8) * 1024 + (r % 8) * 128 + j          # SBO between 8-row core-matrix groups
    return img[addr ^ (((addr >> 7) & 7) << 4)]


def acc_layout(bn: int):
    """m64nNk32 f32 accumulators: thread t, register i -> (row, col) of the warpgroup's 64 x N tile."""
    t = torch.arange(128)[:, None]
    i = torch.arange(bn // 2)[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) & 1)
    col = 8 * (i // 4) + 2 * (t % 4) + (i & 1)
    return row, col


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # fp32 fma: the product exact in float64, one rounding of the sum (double rounding through
    # float64 is possible in theory, not seen at these magnitudes)
    return (a.double() * b.double() + c.double()).float()


def emulate_wgmma_gemm(a_in, w_in, sa_in, sw_in, bias, ws, M, fixed, params):
    """The GEMM kernel per CTA / warpgroup / thread, reading the same operands as F.emulate_gemm."""
    a_mode, w_mode, K, N = fixed["A_MODE"], fixed["W_MODE"], fixed["K_DIM"], fixed["N_DIM"]
    kb_n = K // 128
    off_qw, off_qa, off_sw, off_sa, _ = F.ws_layout(a_mode, w_mode, M, K, N)
    A = (a_in.view(torch.uint8).reshape(M, K) if a_mode == 0 else ws[off_qa:off_qa + M * K].reshape(M, K))
    W = (w_in.view(torch.uint8).reshape(N, K) if w_mode == 0 else ws[off_qw:off_qw + N * K].reshape(N, K))
    SA = ws[off_sa:off_sa + M * kb_n * 4].view(torch.float32) if a_mode == 1 else sa_in.reshape(-1)
    SW = ws[off_sw:off_sw + (N // 128) * kb_n * 4].view(torch.float32) if w_mode == 1 else sw_in.reshape(-1)
    sn, sk = (kb_n, 1) if w_mode == 1 else (fixed["SW_SN"], fixed["SW_SK"])
    BM, BN = params["BM"], params["BN"]
    row, col = acc_layout(BN)
    assert len(set(zip(row.reshape(-1).tolist(), col.reshape(-1).tolist()))) == 64 * BN   # a bijection
    out = torch.full((M, N), float("nan"))
    for m0 in range(0, M, BM):
        rows = torch.arange(m0, m0 + BM)
        ok = rows < M
        a_t = torch.where(ok[:, None], A[rows.clamp(max=M - 1)], torch.zeros((), dtype=torch.uint8))
        for n0 in range(0, N, BN):
            nb = n0 // 128
            acc = torch.zeros(BM // 64, 128, BN // 2)
            for kb in range(kb_n):
                img = torch.cat([smem_image(a_t[:, kb * 128:(kb + 1) * 128]),
                                 smem_image(W[n0:n0 + BN, kb * 128:(kb + 1) * 128])])
                sS = torch.where(ok, SA[rows.clamp(max=M - 1) * kb_n + kb], 0.0)
                swv = SW[nb * sn + kb * sk]
                for wg in range(BM // 64):
                    part = torch.zeros(64, BN)
                    for kk in range(4):
                        ga = desc_read(img, wg * 64 * 128 + kk * 32, 64)
                        gb = desc_read(img, BM * 128 + kk * 32, BN)
                        # the descriptor reads give exactly the operands' k32 slices
                        assert torch.equal(ga, a_t[wg * 64:(wg + 1) * 64, kb * 128 + kk * 32:kb * 128 + kk * 32 + 32])
                        assert torch.equal(gb, W[n0:n0 + BN, kb * 128 + kk * 32:kb * 128 + kk * 32 + 32])
                        fa, fb = (g.view(torch.float8_e4m3fn).float() for g in (ga, gb))
                        part = part + fa.double().matmul(fb.double().T).float()
                    row0 = wg * 64 + row[:, :1]          # a thread's row of its registers with (i/2)&1 == 0
                    s0 = sS[row0] * swv
                    s1 = sS[row0 + 8] * swv
                    s = torch.where(((torch.arange(BN // 2) >> 1) & 1).bool()[None, :], s1, s0)
                    acc[wg] = fma32(part[row, col], s, acc[wg])
            for wg in range(BM // 64):
                v = acc[wg]
                if bias is not None:
                    v = v + bias[n0 + col].float()
                r_abs = m0 + wg * 64 + row
                keep = r_abs < M
                out[r_abs[keep], n0 + col[keep]] = v[keep].to(torch.bfloat16).float()
    return out.to(torch.bfloat16)


@pytest.mark.parametrize("name", ["001_fp8_attention_output_projection", "006_fp8_vision_attention_output_projection",
                                  "015_fp8_mla_attention_output_projection", "021_fp8_mamba2_in_projection"])
def test_wgmma_model_matches_fp8_gemm(problems, name):
    """The model of this kernel against fp8_gemm's emulation (whose output the fp8_gemm test holds
    against the reference) on the same quantized workspace, every param point: the per-128-K
    promotion is the same arithmetic, so the bf16 outputs agree but for the summation order inside a
    K block (fp32 there, float64 -> fp32 per k32 step here)."""
    p = problems[name]
    ns = F._reference_ns(p.definition)
    names = F._fam().analyze(p.definition).info["names"]
    for si, (M, K, N) in enumerate([(130, 384, 256), (7, 256, 128)]):
        f = F._small_fixed(p, K, N)
        with F.semantics(True):
            inputs = F.make_inputs(name, ns, M, K, N, seed=si, batch=2 if (name.startswith("015") and M % 2 == 0) else 1)
        x = inputs[names["x"]]
        Mr = x.numel() // K
        x2 = x.reshape(Mr, K)
        sx, sw = inputs.get(names.get("sx", "")), inputs.get(names.get("sw", ""))
        ws = F.emulate_quant(x2, inputs[names["w"]], None if sx is None else sx.reshape(-1),
                             None if sw is None else sw.reshape(-1), f, True)
        bias = inputs.get(names.get("bias", ""))
        for params in _fam().param_space(p):
            if params["BN"] > N:
                continue
            ref = F.emulate_gemm(x2, inputs[names["w"]], sx, sw, bias, ws, Mr, f, params)
            out = emulate_wgmma_gemm(x2, inputs[names["w"]], sx, sw, bias, ws, Mr, f, params)
            assert not out.float().isnan().any()
            diff = (out.float() - ref.float()).abs()
            ulp = ref.float().abs() * 2 ** -7 + 1e-30
            assert (diff <= ulp).all(), (params, diff.max())
            assert (diff == 0).float().mean() >= 0.99, params


