"""nvfp4_moe family: which problems it claims, real NVRTC compiles (sm_90a, no spills), launch specs
on every workload, and CPU checks of the kernel's number format and data layout:

- the codec part of nvfp4_moe.cu (E2M1 thresholds, E4M3 encode/decode, block quantizer, the fp16
  bit trick the GEMMs dequantize with, the K permutation) built with g++ and compared bit for bit
  with the reference's BlockWiseScalerNVFP4 and torch's float8 conversions;
- an emulation of the whole five-launch pipeline (permuted activations, the per-lane weight fragment
  mapping of the mma.sync loop, the bf16-rounding epilogues) against the reference run on CPU through
  solforge's dequantizing FP4 shim, on small shapes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, families_for, get_family
from solforge.kernels.base import CUDA_DIR
from solforge.kernels.build import compile_cuda_candidate
from solforge.kernels.nvfp4_moe import SMEM_LIMIT, reference_as_on_cuda
from solforge.problem.loader import load_problem_dir
from tests.unit.test_compile_arch import sass_text as _sass

# the family's committed GPU evidence (bench rows, pipeline evaluations)
NVFP4_RESULTS = Path(__file__).resolve().parents[2] / "data" / "results" / "kernels_nvfp4_moe"

SRC = CUDA_DIR / "nvfp4_moe" / "nvfp4_moe.cu"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _quant_dir(root: Path, prefix: str) -> Path:
    return next((root / "Quant").glob(f"{prefix}_*"))


@pytest.fixture(scope="module")
def p032(request):
    # NVFP4_PROBLEM_DIR: a copy of the problem (the GPU box has no ../shared; the bench plan dir
    # holds one), see kernels_cuda/nvfp4_moe/README.md
    given = os.environ.get("NVFP4_PROBLEM_DIR")
    if given:
        return load_problem_dir(Path(given))
    return load_problem_dir(_quant_dir(request.getfixturevalue("sol_execbench_dir"), "032"))


# ---- matching ---------------------------------------------------------------------------------

def test_claims_032_and_nothing_else(sol_execbench_dir):
    fam = get_family("nvfp4_moe")
    claimed = []
    for defn_path in sorted(Path(sol_execbench_dir).glob("*/*/definition.json")):
        problem = load_problem_dir(defn_path.parent)
        if fam.matches(problem):
            claimed.append(defn_path.parent.name)
    assert claimed == ["029_nvfp4_fused_mlp_silu_gating", "032_nvfp4_moe_expert_linear_with_gating"]


@pytest.fixture(scope="module")
def p029(sol_execbench_dir):
    return load_problem_dir(_quant_dir(sol_execbench_dir, "029"))


def test_029_differs_only_in_names_sizes_and_bf16_swiglu(p029, p032):
    fam = get_family("nvfp4_moe")
    s29, s32 = fam.analyze(p029.definition), fam.analyze(p032.definition)
    assert s29.fixed == {"HID": 4096, "INTER": 12288, "EPI_BF16": 1, "DOWN_BF16": 1}
    assert s32.fixed == {"HID": 2048, "INTER": 5120, "EPI_BF16": 0}
    assert s29.info["t"] == "batch_size*seq_len" and s29.info["x"] == "x"
    cand = fam.instantiate(p029, fam.param_space(p029)[0])
    assert cand.launches[0].args[0] == "x"
    assert "float32:gate_global_decode_scale" in cand.launches[2].args
    for w in p029.workloads:  # 1.3 GB of workspace at 16384 tokens; grids in range
        env = launch_env(w.axes, {"gate_global_decode_scale": 1e-4, "up_global_decode_scale": 1e-4,
                                  "down_global_decode_scale": 1e-4}, cand.params)
        t = w.axes["batch_size"] * w.axes["seq_len"]
        assert eval_expr(cand.workspace, env) == 256 + 2 * t * 4096 + 6 * t * 12288
        for l in cand.launches:
            assert all(1 <= eval_expr(g, env) < 2 ** 31 for g in l.grid)
            assert eval_expr(l.smem, env) <= SMEM_LIMIT


def test_029_compiles_without_spills(p029, tmp_path):
    fam = get_family("nvfp4_moe")
    for params in fam.param_space(p029)[:2]:
        cubin, log = compile_cuda_candidate(fam.instantiate(p029, params))
        text = _sass(cubin, tmp_path)
        assert "LDL" not in text and "STL" not in text, params


def pipeline_evidence(problem) -> str:
    """'' when the committed runs of the pipeline's own evaluation on the H200
    (data/results/kernels_nvfp4_moe/nvfp4_moe_h200_2026-11-30_second_batch_pipeline_eval_*.json, benchmarks/pipeline_eval_check.py) passed every
    workload of the problem in every run of it (at least one); else what is missing or wrong."""
    RESULTS = NVFP4_RESULTS

    want = {w.uuid for w in problem.workloads}
    runs = [r for f in sorted(RESULTS.glob("nvfp4_moe_h200_2026-11-30_second_batch_pipeline_eval_*.json"))
            for r in json.loads(f.read_text()) if r["problem"] == problem.name]
    if not runs:
        return "no pipeline run"
    for r in runs:
        got = {w["uuid"] for w in r["workloads"] if w["status"] == "passed"}
        if got != want:
            return f"{r['stage']}: {len(want - got)} workloads not passed"
    return ""


def test_offered_only_with_gpu_evidence(p032, p029):
    """Offered (family.json's one `offered` flag) only while the committed GPU evidence shows every
    workload of each problem it serves correct: the bench rows (every variant) or the pipeline's own
    evaluation (every run of it)."""
    from tests.unit.test_kernels_attention_prefill import gpu_evidence

    RESULTS = NVFP4_RESULTS

    data = json.loads((CUDA_DIR / "nvfp4_moe" / "family.json").read_text())
    assert "offered_problems" not in data
    rows = {p032.name: RESULTS / "nvfp4_moe_h200_032_rows.jsonl",
            p029.name: RESULTS / "nvfp4_moe_h200_029_rows.jsonl"}
    for p in (p032, p029):
        served = "nvfp4_moe" in [f.name for f in families_for(p)]
        assert served == bool(data["offered"]), p.name
        if served:
            bench = gpu_evidence(rows[p.name], p) if rows[p.name].exists() else "no bench rows"
            assert bench == "" or pipeline_evidence(p) == "", (p.name, bench, pipeline_evidence(p))


def test_bad_params_rejected(p032):
    fam = get_family("nvfp4_moe")
    p = dict(fam.param_space(p032)[0])
    for bad in ({"G_BN": 96}, {"D_ST": 1}, {"G_BM": 256, "G_ST": 8}, {"D_BM": 256, "D_WM": 1},
                {"F16": 2}):
        with pytest.raises(FamilyError):
            fam.instantiate(p032, {**p, **bad})


# ---- compile and launch specs -----------------------------------------------------------------

def test_every_param_point_compiles_without_spills(p032, tmp_path):
    fam = get_family("nvfp4_moe")
    space = fam.param_space(p032)
    assert len(space) >= 4
    for params in space:
        cand = fam.instantiate(p032, params)
        Candidate.model_validate_json(cand.model_dump_json())
        cubin, log = compile_cuda_candidate(cand)
        assert cubin[:4] == b"\x7fELF", log
        text = _sass(cubin, tmp_path)
        for k in ("nvfp4_amax_x", "nvfp4_quant_x", "nvfp4_gateup", "nvfp4_quant_h", "nvfp4_down"):
            assert f"Function : {k}" in text
        mt_nt = lambda pre, nw: nw * (params[f"{pre}_BM"] // params[f"{pre}_WM"] // 16) * (
            params[f"{pre}_BN"] // params[f"{pre}_WN"] // 8) * 4
        # every mma of both GEMM main loops is there (4 k-steps per 64-wide chunk)
        hmma = "HMMA.16816.F32 " if params["F16"] else "HMMA.16816.F32.BF16 "
        assert text.count(hmma) == (mt_nt("G", 2) + mt_nt("D", 1)), params
        assert "LDL" not in text and "STL" not in text, params  # no local-memory spills


def test_only_the_amax_words_are_zeroed(p032):
    """workspace_zero covers the two atomicMax words (the head); the rest is overwritten every call:
    XQ by one thread per 16-block of x, H by the gate/up epilogue (every row < T, every column),
    HQ by one thread per 16-block of H."""
    from solforge.kernels.nvfp4_moe import WS_HEAD
    cand = get_family("nvfp4_moe").instantiate(p032, get_family("nvfp4_moe").param_space(p032)[0])
    assert cand.workspace_zero == str(WS_HEAD) and WS_HEAD >= 8
    src = SRC.read_text()
    assert "#define WS_XQ 256ull" in src and WS_HEAD == 256


def test_launch_spec_on_every_workload(p032):
    fam = get_family("nvfp4_moe")
    hid, inter = 2048, 5120
    for params in fam.param_space(p032):
        cand = fam.instantiate(p032, params)
        assert [l.kernel for l in cand.launches] == ["nvfp4_amax_x", "nvfp4_quant_x", "nvfp4_gateup",
                                                    "nvfp4_quant_h", "nvfp4_down"]
        for w in p032.workloads:
            t = w.axes["num_tokens"]
            scal = {"gate_global_decode": 1e-4, "up_global_decode": 1e-4, "down_global_decode": 1e-4}
            env = launch_env(w.axes, scal, cand.params)
            ws = eval_expr(cand.workspace, env)
            assert ws == 256 + 2 * t * hid + 4 * t * inter + 2 * t * inter
            assert ws < 2 ** 31
            for l in cand.launches:
                grid = [eval_expr(g, env) for g in l.grid]
                block = [eval_expr(b, env) for b in l.block]
                smem = eval_expr(l.smem, env)
                assert all(1 <= g < 2 ** 31 for g in grid) and len(grid) <= 2
                assert 32 <= block[0] <= 1024 and block[0] % 32 == 0
                assert 0 <= smem <= SMEM_LIMIT
                for a in l.args:
                    if a.startswith(("int32:", "float32:")):
                        v = eval_expr(a.split(":", 1)[1], env)
                        assert v > 0
            g = {l.kernel: [eval_expr(x, env) for x in l.grid] for l in cand.launches}
            # the GEMM grids cover all output tiles; the quantizers one thread per 16 elements
            assert g["nvfp4_gateup"][0] * params["G_BN"] == inter
            assert g["nvfp4_gateup"][1] * params["G_BM"] >= t
            assert g["nvfp4_down"][0] * params["D_BN"] == hid
            assert g["nvfp4_down"][1] * params["D_BM"] >= t
            assert g["nvfp4_quant_x"][0] * 256 * 16 >= t * hid
            assert g["nvfp4_quant_h"][0] * 256 * 16 >= t * inter


# ---- the codec, compiled on the host ----------------------------------------------------------

_HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#define NVFP4_HD static inline
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {  // CUDA's, without sign mode
    unsigned long long v = ((unsigned long long)y << 32) | x; unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
%CODEC%
template <class T> static std::vector<T> rd(const char* p) {
    FILE* f = fopen(p, "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    std::vector<T> v(n / sizeof(T)); if (n) fread(v.data(), 1, n, f); fclose(f); return v;
}
template <class T> static void wr(const char* p, const std::vector<T>& v) {
    FILE* f = fopen(p, "wb"); fwrite(v.data(), sizeof(T), v.size(), f); fclose(f);
}
int main(int argc, char** argv) {
    std::string mode = argv[1];
    if (mode == "e2m1") { auto x = rd<float>(argv[2]); std::vector<unsigned char> o;
        for (float v : x) o.push_back(nvfp4_float_to_e2m1(v)); wr(argv[3], o); }
    else if (mode == "e4m3") { auto x = rd<float>(argv[2]); std::vector<unsigned char> o;
        for (float v : x) o.push_back(nvfp4_float_to_e4m3(v)); wr(argv[3], o); }
    else if (mode == "e4m3dec") { std::vector<float> o;
        for (unsigned b = 0; b < 256; ++b) o.push_back(nvfp4_e4m3_to_float(b)); wr(argv[3], o); }
    else if (mode == "dq") {  // every byte x every scale byte: the GEMMs' fp16-trick dequantization
        std::vector<float> o;
        for (unsigned s = 0; s < 256; ++s) for (unsigned b = 0; b < 256; ++b) {
            unsigned hw[4], w = b << (8 * (b & 3)) | ((b * 37u + 11u) & 255u) << (8 * ((b + 1) & 3));
            nvfp4_word_half_bits(w, hw);               // the GEMMs' path: byte b at position b%4
            unsigned h2 = hw[b & 3];
            if (h2 != nvfp4_pair_half_bits(b)) { printf("word path differs at %u\n", b); return 1; }
            float sc = nvfp4_e4m3_to_float(s) * 16384.0f;
            o.push_back(nvfp4_half_bits_to_float(h2 & 0xFFFFu) * sc);
            o.push_back(nvfp4_half_bits_to_float(h2 >> 16) * sc); }
        wr(argv[3], o); }
    else if (mode == "quant") {  // [amax, 16*n values] -> n x (scale byte, 16 codes)
        auto x = rd<float>(argv[2]); std::vector<unsigned char> o;
        for (size_t b = 1; b + 16 <= x.size(); b += 16) { unsigned c[16];
            o.push_back(nvfp4_quant_block(&x[b], x[0], c)); for (int j = 0; j < 16; ++j) o.push_back(c[j]); }
        wr(argv[3], o); }
    else if (mode == "perm") { std::vector<int> o;
        for (int q = 0; q < 4; ++q) for (int j = 0; j < 16; ++j) o.push_back(nvfp4_perm_col(q, j)); wr(argv[3], o); }
    else if (mode == "natg") {  // [q, 8 words] per record -> the 2 gathered words
        auto x = rd<unsigned>(argv[2]); std::vector<unsigned> o;
        for (size_t i = 0; i + 9 <= x.size(); i += 9) { unsigned w[2];
            nvfp4_nat_gather(&x[i + 1], (int)x[i], w); o.push_back(w[0]); o.push_back(w[1]); }
        wr(argv[3], o); }
    else if (mode == "gdec") { auto x = rd<float>(argv[2]); std::vector<float> o;
        for (float v : x) o.push_back(nvfp4_global_decode(v)); wr(argv[3], o); }
    return 0;
}
"""


class Codec:
    def __init__(self, exe: Path, tmp: Path):
        self.exe, self.tmp = exe, tmp

    def __call__(self, mode: str, data: np.ndarray | None, out_dtype) -> np.ndarray:
        i, o = self.tmp / f"{mode}.in", self.tmp / f"{mode}.out"
        (np.zeros(0, np.float32) if data is None else data).tofile(i)
        subprocess.run([str(self.exe), mode, str(i), str(o)], check=True)
        return np.fromfile(o, dtype=out_dtype)


@pytest.fixture(scope="module")
def codec(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("nvfp4codec")
    src = SRC.read_text()
    m = re.search(r"// BEGIN_NVFP4_CODEC.*?\n(.*)// END_NVFP4_CODEC", src, re.S)
    (tmp / "codec.cpp").write_text(_HARNESS.replace("%CODEC%", m.group(1)))
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-std=c++17", "codec.cpp", "-o", "codec"],
                   cwd=tmp, check=True, capture_output=True)
    return Codec(tmp / "codec", tmp)


@pytest.fixture(scope="module")
def ref(p032):
    """The reference with CUDA's float semantics (the kernel follows the GPU that judges it)."""
    ns: dict = {}
    exec(compile(reference_as_on_cuda(p032.definition.reference), "reference", "exec"), ns)
    return ns


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def test_e2m1_encode_matches_reference_thresholds(codec, ref):
    ties = np.array([0, .25, .75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    near = np.concatenate([ties, np.nextafter(ties, 10), np.nextafter(ties, -10)])
    x = np.concatenate([near, -near, E2M1, [6, 7, 100, -100, -0.0, np.nan],
                        np.random.default_rng(0).uniform(-7, 7, 5000)]).astype(np.float32)
    x = x[: x.size // 2 * 2]
    got = codec("e2m1", x, np.uint8)                      # the kernel does not clamp: no need
    clamped = torch.clamp(torch.from_numpy(x), -6.0, 6.0).reshape(1, 1, -1)
    want = ref["BlockWiseScalerNVFP4"]()._cast_to_fp4x2(clamped).view(torch.uint8).numpy().ravel()
    want = np.stack([want & 15, want >> 4], -1).ravel()
    assert np.array_equal(got, want)


def test_e4m3_encode_decode_match_torch(codec):
    rng = np.random.default_rng(1)
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    mids = (grid[:-1] + grid[1:]) / 2                     # ties: round to even
    x = np.concatenate([grid, mids, np.nextafter(mids, 0), np.nextafter(mids, 500), [448.0],
                        np.exp(rng.uniform(np.log(1e-4), np.log(448), 20000))]).astype(np.float32)
    got = codec("e4m3", x, np.uint8)
    want = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(got, want)
    dec = codec("e4m3dec", None, np.float32)
    bytes_ = np.arange(256, dtype=np.uint8)
    ok = (bytes_ & 0x7F) != 0x7F                          # NaN codes never produced
    want = torch.from_numpy(bytes_).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(dec[ok], want[ok])


def test_fp4_dequant_all_codes_times_all_scales(codec):
    """The GEMMs' fp16 bit trick x (scale * 2^14), all 256 packed bytes x every finite scale, equals
    E2M1 value x E4M3 scale and is exact in bf16 (so the bf16 mma operands lose nothing)."""
    got = codec("dq", None, np.float32).reshape(256, 256, 2)
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    b = np.arange(256)
    want = np.stack([E2M1[b & 15], E2M1[b >> 4]], -1)[None] * scales[:, None, None]
    ok = (np.arange(256) & 0x7F) != 0x7F
    assert np.array_equal(got[ok], want[ok].astype(np.float32))
    g = torch.from_numpy(got[ok].copy())
    assert torch.equal(g.to(torch.bfloat16).float(), g)
    assert torch.equal(g.to(torch.float16).float(), g)   # F16=1: exact as fp16 operands too


def test_block_quantizer_matches_reference_bitwise(codec, ref):
    """Scale bytes and codes of the kernel's quantizer vs BlockWiseScalerNVFP4.quantize, on the
    activations of 032 (bf16 randn) and on SwiGLU-like fp32 values with zero and tiny blocks."""
    torch.manual_seed(0)
    h = (torch.nn.functional.silu(torch.randn(64, 512)) * torch.randn(64, 512)).float()
    h[3, :16] = 0.0
    h[5, 16:32] *= 1e-6
    for x in (torch.randn(64, 512, dtype=torch.bfloat16).float(), h):
        q, s, gd = ref["BlockWiseScalerNVFP4"]().quantize(x.unsqueeze(0))
        amax = x.abs().max().float()
        out = codec("quant", np.concatenate([[amax.item()], x.numpy().ravel()]).astype(np.float32),
                    np.uint8).reshape(-1, 17)
        codes = q.view(torch.uint8).numpy().reshape(-1)
        codes = np.stack([codes & 15, codes >> 4], -1).reshape(-1, 16)
        assert np.array_equal(out[:, 0], s.view(torch.uint8).numpy().ravel())
        assert np.array_equal(out[:, 1:], codes)
        gdec = codec("gdec", np.array([amax.item()], np.float32), np.float32)
        assert gdec[0] == np.float32(gd.item())


def test_quantizer_divides_by_six_as_cuda_does(codec, p032):
    """`block_max / 6.0` is a multiply by fp32(1/6) on CUDA, a division on the CPU; on blocks where
    the two round to different E4M3 scales the kernel's quantizer must give CUDA's byte."""
    cpu_ns: dict = {}
    exec(compile(p032.definition.reference, "reference_cpu", "exec"), cpu_ns)
    cuda_ns: dict = {}
    exec(compile(reference_as_on_cuda(p032.definition.reference), "reference_cuda", "exec"), cuda_ns)
    # block maxima just around 6 * (E4M3 midpoints) with global encode 1 (amax 2688): search the
    # fp32 neighbourhood for values where division and reciprocal-multiply pick different bytes
    vals = torch.arange(8, 126, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    mids = (vals[:-1] + vals[1:]) / np.float32(2) * np.float32(6)     # E4M3 midpoints, times 6
    cand = np.concatenate([m + np.arange(-64, 65, dtype=np.float32) * np.spacing(m) for m in mids]).astype(np.float32)
    inv6 = np.float32(1) / np.float32(6)
    e4 = lambda v: torch.from_numpy(v).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    differ = cand[e4((cand / np.float32(6)).astype(np.float32)) != e4((cand * inv6).astype(np.float32))]
    assert differ.size > 0
    blocks = np.zeros((differ.size + 1, 16), np.float32)
    blocks[:-1, 0] = differ
    blocks[-1, 0] = 2688.0   # amax 2688 -> global encode scale exactly 1
    x = torch.from_numpy(blocks.reshape(1, -1))
    got = codec("quant", np.concatenate([[2688.0], blocks.ravel()]).astype(np.float32), np.uint8).reshape(-1, 17)
    _, s_cuda, _ = cuda_ns["BlockWiseScalerNVFP4"]().quantize(x.unsqueeze(0))
    _, s_cpu, _ = cpu_ns["BlockWiseScalerNVFP4"]().quantize(x.unsqueeze(0))
    s_cuda, s_cpu = s_cuda.view(torch.uint8).numpy().ravel(), s_cpu.view(torch.uint8).numpy().ravel()
    assert np.array_equal(got[:, 0], s_cuda)
    assert not np.array_equal(got[:, 0], s_cpu)


def test_natural_order_gather(codec):
    """KNAT's byte gather: lane quad q gets bytes q and q+4 of each 8-byte block of a row chunk."""
    rng = np.random.default_rng(0)
    chunks = rng.integers(0, 256, size=(16, 32), dtype=np.uint8)
    recs, want = [], []
    for c in chunks:
        for q in range(4):
            recs.append(np.concatenate([[q], c.view(np.uint32)]).astype(np.uint32))
            want.append(np.array([c[8 * s + q + 4 * h] for s in range(4) for h in range(2)], np.uint8))
    got = codec("natg", np.concatenate(recs), np.uint32).view(np.uint8).reshape(-1, 8)
    assert np.array_equal(got, np.stack(want))


def test_k_permutation_is_a_bijection_per_chunk(codec):
    perm = codec("perm", None, np.int32).reshape(4, 16)
    assert sorted(perm.ravel()) == list(range(64))


# ---- the pipeline, emulated -------------------------------------------------------------------

def _bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).float().numpy()


def _quant_deq(codec, x: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """quant_x / quant_h: bf16 code*scale at the permuted columns, and the global decode scale."""
    amax = np.float32(np.abs(x).max())
    out = codec("quant", np.concatenate([[amax], x.ravel()]).astype(np.float32), np.uint8).reshape(-1, 17)
    sf = torch.from_numpy(out[:, 0].copy()).view(torch.float8_e4m3fn).float().numpy()
    deq = (E2M1[out[:, 1:]] * sf[:, None]).astype(np.float32).reshape(x.shape)
    rows, k = x.shape
    perm_deq = np.empty_like(deq)
    blocks = deq.reshape(rows, k // 64, 4, 16)
    dst = perm_deq.reshape(rows, k // 64, 64)
    for q in range(4):
        dst[:, :, perm[q]] = blocks[:, :, q, :]
    return perm_deq, codec("gdec", np.array([amax], np.float32), np.float32)[0]


def _fragment_weights(w_packed: np.ndarray, scale_bytes: np.ndarray, knat: bool = False) -> np.ndarray:
    """The weight matrix as the mma loop sees it: row n, chunk c, lane quad q loads bytes 8q..8q+7;
    byte 2s feeds k-step s fragment positions (2q, 2q+1), byte 2s+1 positions (2q+8, 2q+9).
    knat (KNAT=1): quad q takes bytes 8s+q (positions 2q, 2q+1) and 8s+q+4 (2q+8, 2q+9) for k-step s
    with block s's scale, i.e. the natural order."""
    n, kh = w_packed.shape
    sf = torch.from_numpy(scale_bytes.copy()).view(torch.float8_e4m3fn).float().numpy()
    out = np.zeros((n, kh * 2), np.float32)
    for c in range(kh // 32):
        for q in range(4):
            for i in range(8):
                s, hi = i // 2, i % 2
                if knat:
                    byte = w_packed[:, 32 * c + 8 * s + q + 4 * hi]
                    sc = sf[:, 4 * c + s]
                else:
                    byte = w_packed[:, 32 * c + 8 * q + i]
                    sc = sf[:, 4 * c + q]
                base = 64 * c + 16 * s + 2 * q + 8 * hi
                out[:, base] = E2M1[byte & 15] * sc
                out[:, base + 1] = E2M1[byte >> 4] * sc
    return out


def _emulate(codec, inp: dict, x: np.ndarray, glob: dict, epi_bf16: bool, down_bf16: bool = False,
             cuda_scales: bool = False, knat: bool = False) -> np.ndarray:
    """The five launches in numpy (fp64 sums of exact products), as the kernel orders them.
    cuda_scales: the global scales of bf16 scaled_mm results rounded to bf16 first, as the reference
    does on the GPU (the kernel's EPI_BF16 / DOWN_BF16); the CPU reference keeps them in fp32."""
    sc16 = (lambda v: _bf16(np.array([v], np.float32))[0]) if cuda_scales else (lambda v: v)
    perm = np.arange(64).reshape(4, 16) if knat else codec("perm", None, np.int32).reshape(4, 16)
    u8 = lambda name: inp[name].view(torch.uint8).numpy()[0]
    f32 = np.float32
    xq, gd_x = _quant_deq(codec, x, perm)
    wg = _fragment_weights(u8("gate_weight_fp4"), u8("gate_scale"), knat)
    wu = _fragment_weights(u8("up_weight_fp4"), u8("up_scale"), knat)
    acc_g = (xq.astype(np.float64) @ wg.T.astype(np.float64)).astype(f32)
    acc_u = (xq.astype(np.float64) @ wu.T.astype(np.float64)).astype(f32)
    sc_g, sc_u = gd_x * f32(inp[glob["gate"]]), gd_x * f32(inp[glob["up"]])
    if epi_bf16:
        sc_g, sc_u = sc16(sc_g), sc16(sc_u)
    g = _bf16(acc_g) * sc_g
    u = _bf16(acc_u) * sc_u
    if epi_bf16:
        g, u = _bf16(g), _bf16(u)
        h = _bf16(_bf16(g / (f32(1) + np.exp(-g))) * u)
    else:
        h = (g / (f32(1) + np.exp(-g))) * u
    hq, gd_h = _quant_deq(codec, h.astype(f32), perm)
    wd = _fragment_weights(u8("down_weight_fp4"), u8("down_scale"), knat)
    acc = (hq.astype(np.float64) @ wd.T.astype(np.float64)).astype(f32)
    sc = gd_h * f32(inp[glob["down"]])
    return _bf16(_bf16(acc) * (sc16(sc) if down_bf16 else sc))


@pytest.mark.parametrize("knat", [False, True])
def test_pipeline_emulation_matches_reference(codec, ref, p032, knat):
    """The emulated launches vs the reference's run() on CPU through solforge's dequantizing FP4
    shim, on the workload tolerance of 032."""
    from solforge.evaluate.reference import Fp4Shim
    torch.manual_seed(0)
    t, hid, inter = 128, 256, 384
    inp = ref["get_inputs"]({"num_tokens": t, "hidden_size": hid, "intermediate_size": inter},
                            torch.device("cpu"))
    shim = Fp4Shim().install()
    try:
        want = ref["run"](**inp).float().numpy()
    finally:
        shim.remove()
    assert shim.used
    glob = {p: f"{p}_global_decode" for p in ("gate", "up", "down")}
    got = _emulate(codec, inp, inp["hidden_states"].float().numpy(), glob, False, knat=knat)
    tol = p032.workloads[0].workload.tolerance
    close = np.abs(got - want) <= tol.max_atol + tol.max_rtol * np.abs(want)
    assert close.mean() >= tol.required_matched_ratio, (close.mean(), np.abs(got - want).max())
    # most elements agree to the bit: the only differences are summation order near FP4 ties
    assert (got == want).mean() > 0.9, (got == want).mean()


def test_emulation_catches_a_wrong_fragment_mapping(codec, ref):
    """Guard for the test above: swapping the two nibbles of each byte (a plausible format bug)
    must break agreement with the plain dequantized product."""
    torch.manual_seed(1)
    inp = ref["get_inputs"]({"num_tokens": 128, "hidden_size": 256, "intermediate_size": 128},
                            torch.device("cpu"))
    perm = codec("perm", None, np.int32).reshape(4, 16)
    xq, _ = _quant_deq(codec, inp["hidden_states"].float().numpy(), perm)
    w = inp["gate_weight_fp4"].view(torch.uint8).numpy()[0]
    s = inp["gate_scale"].view(torch.uint8).numpy()[0]
    plain = np.stack([E2M1[w & 15], E2M1[w >> 4]], -1).reshape(w.shape[0], -1)
    plain *= np.repeat(torch.from_numpy(s.copy()).view(torch.float8_e4m3fn).float().numpy(), 16, 1)
    x_plain = np.empty_like(xq)
    for q in range(4):
        x_plain.reshape(128, -1, 4, 16)[:, :, q, :] = xq.reshape(128, -1, 64)[:, :, perm[q]]
    good = xq.astype(np.float64) @ _fragment_weights(w, s).T
    np.testing.assert_allclose(good, x_plain.astype(np.float64) @ plain.T, rtol=1e-9, atol=1e-9)
    swapped = ((w & 15) << 4 | (w >> 4)).astype(np.uint8)
    bad = xq.astype(np.float64) @ _fragment_weights(swapped, s).T
    assert np.abs(bad - good).max() > 1e-2


def perm_col(q: int, j: int) -> int:
    """nvfp4_perm_col of the .cu, in Python (checked against the host build below)."""
    return 16 * (j >> 2) + 2 * q + (j & 1) + 8 * ((j >> 1) & 1)


def test_python_perm_matches_codec(codec):
    perm = codec("perm", None, np.int32).reshape(4, 16)
    assert perm.tolist() == [[perm_col(q, j) for j in range(16)] for q in range(4)]


# ---- on a GPU (skipped here): the real launches, with their intermediates checked --------------

def _deq_permuted(codes_packed: torch.Tensor, scales: torch.Tensor, dtype=torch.bfloat16,
                  knat: bool = False) -> torch.Tensor:
    """Reference quantizer outputs -> the bf16 XQ/HQ layout the kernels write (code*scale, K permuted;
    natural order with KNAT=1)."""
    b = codes_packed.view(torch.uint8)[0]
    lut = torch.tensor(E2M1, device=b.device)
    v = torch.stack([lut[(b & 15).long()], lut[(b >> 4).long()]], -1).reshape(b.shape[0], -1)
    v = v * scales[0].float().repeat_interleave(16, 1)
    if knat:
        return v.to(dtype)
    idx = torch.tensor([perm_col(q, j) for q in range(4) for j in range(16)],
                       device=b.device).reshape(-1)
    out = torch.empty_like(v)
    out.view(v.shape[0], -1, 64)[:, :, idx] = v.view(v.shape[0], -1, 64)
    return out.to(dtype)


def _h_expected(inp: dict, xq_codes, xq_scale) -> torch.Tensor:
    """silu(gate) * up from the reference quantizer's x codes, in float64 sums (for launch 3)."""
    lut = torch.tensor(E2M1, device=xq_scale.device)

    def deq(codes, scales):
        b = codes.view(torch.uint8)[0]
        v = torch.stack([lut[(b & 15).long()], lut[(b >> 4).long()]], -1).reshape(b.shape[0], -1)
        return (v * scales[0].float().repeat_interleave(16, 1)).double()

    x = deq(xq_codes, xq_scale)
    amax = inp["hidden_states"].abs().max().float()
    gd_x = torch.tensor(1.0, device=amax.device) / (torch.tensor(2688.0, device=amax.device) / amax)
    g = (x @ deq(inp["gate_weight_fp4"], inp["gate_scale"]).T).float() * (gd_x * inp["gate_global_decode"])
    u = (x @ deq(inp["up_weight_fp4"], inp["up_scale"]).T).float() * (gd_x * inp["up_global_decode"])
    return torch.nn.functional.silu(g) * u


def _h_close(h: torch.Tensor, h_want: torch.Tensor) -> tuple[float, float]:
    rel = ((h - h_want).abs() / (h_want.abs() + 1e-3)).flatten()
    return (rel <= 1e-2).float().mean().item(), rel.max().item()


@pytest.fixture(scope="module")
def gpu_stages(p032, tmp_path_factory):
    """variant index -> a loaded runtime (compiled once per module, NVRTC on the GPU box)."""
    from solforge.compile.api import compile_candidate, stage
    from solforge.compile.launcher import load_stage

    fam, out = get_family("nvfp4_moe"), {}
    staged = os.environ.get("NVFP4_STAGES")
    if staged:
        # the bench plan dir (benchmarks/bench_kernels.py prepare): its cubins were built on the CPU
        # box, so the GPU box needs no NVRTC headers and no compile time
        plan = json.loads((Path(staged) / "plan.json").read_text())
        entry = next(e for e in plan["problems"] if e["problem"] == p032.name and e["family"] == fam.name)
        for i, params in enumerate(fam.param_space(p032)):
            v = next(v for v in entry["variants"] if v["params"] == params)
            out[i] = (params, load_stage(Path(staged) / v["dir"]))
        return out
    folder = tmp_path_factory.mktemp("nvfp4_stages")
    for i, params in enumerate(fam.param_space(p032)):
        cand = fam.instantiate(p032, params)
        res = compile_candidate(cand)
        assert res.ok, res.log
        stage(cand, res, folder / f"v{i}")
        out[i] = (params, load_stage(folder / f"v{i}"))
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("variant", range(6))
@pytest.mark.parametrize("t", [128, 1024])
def test_gpu_launches_and_intermediates(p032, ref, gpu_stages, t, variant):
    """Each launch's product in the workspace, then the output: a failure names the launch."""
    from solforge.evaluate.reference import Fp4Shim

    params, rt = gpu_stages[variant]
    rw = next(w for w in p032.workloads if w.axes["num_tokens"] == t)
    torch.manual_seed(0)
    inp = ref["get_inputs"](rw.axes_and_scalars(), torch.device("cuda"))
    tensors = {k: v for k, v in inp.items() if isinstance(v, torch.Tensor)}
    scalars = {k: v for k, v in inp.items() if not isinstance(v, torch.Tensor)}
    shim = Fp4Shim().install()
    try:
        want = ref["run"](**inp)
    finally:
        shim.remove()
    scaler = ref["BlockWiseScalerNVFP4"]()
    xq_codes, xq_scale, _ = scaler.quantize(inp["hidden_states"].float().unsqueeze(0))
    dt = torch.float16 if params["F16"] else torch.bfloat16
    xq_want = _deq_permuted(xq_codes, xq_scale, dt, knat=bool(params.get("KNAT", 0)))
    out = torch.full_like(want, float("nan"))
    plan = rt.prepare({**tensors, "output": out}, dict(rw.axes), scalars)
    plan.run()
    torch.cuda.synchronize()
    ws = plan.workspace
    amax = ws[:8].view(torch.float32)
    assert amax[0].item() == inp["hidden_states"].abs().max().float().item(), "launch 1 (amax x)"
    xq = ws[256:256 + 2 * t * 2048].view(dt).view(t, 2048)
    assert torch.equal(xq, xq_want), ("launch 2 (quant x)", (xq != xq_want).float().mean().item())
    h0 = 256 + 2 * t * 2048
    h = ws[h0:h0 + 4 * t * 5120].view(torch.float32).view(t, 5120)
    # launch 3 against torch on the same (exact) operands: bf16-rounded sums may differ by an ulp
    h_want = _h_expected(inp, xq_codes, xq_scale)
    ok, worst = _h_close(h, h_want)
    assert ok > 0.999, ("launch 3 (gate/up GEMM)", ok, worst)
    assert amax[1].item() == h.abs().max().item(), "launch 3 (amax h)"
    tol = rw.workload.tolerance
    x, w_ = out.float(), want.float()
    close = (x - w_).abs() <= tol.max_atol + tol.max_rtol * w_.abs()
    assert close.float().mean().item() >= tol.required_matched_ratio, (
        "launches 4-5 (quant h, down GEMM)", close.float().mean().item(), (x - w_).abs().max().item())


def test_gpu_test_expectation_matches_the_emulation(codec, ref):
    """The XQ the GPU test expects (from the reference quantizer) is what the emulated kernel writes."""
    torch.manual_seed(2)
    x = torch.randn(32, 256, dtype=torch.bfloat16).float()
    q, s, _ = ref["BlockWiseScalerNVFP4"]().quantize(x.unsqueeze(0))
    perm = codec("perm", None, np.int32).reshape(4, 16)
    emu, _ = _quant_deq(codec, x.numpy(), perm)
    assert torch.equal(_deq_permuted(q, s), torch.from_numpy(emu).to(torch.bfloat16))


def test_gpu_test_launch3_expectation_matches_the_emulation(codec, ref):
    """The H the GPU test expects (torch, float64 sums) agrees with the emulated launch 3."""
    torch.manual_seed(3)
    t, hid, inter = 128, 256, 384
    inp = ref["get_inputs"]({"num_tokens": t, "hidden_size": hid, "intermediate_size": inter},
                            torch.device("cpu"))
    q, s, _ = ref["BlockWiseScalerNVFP4"]().quantize(inp["hidden_states"].float().unsqueeze(0))
    perm = codec("perm", None, np.int32).reshape(4, 16)
    u8 = lambda name: inp[name].view(torch.uint8).numpy()[0]
    f32 = np.float32
    xq, gd_x = _quant_deq(codec, inp["hidden_states"].float().numpy(), perm)
    acc_g = (xq.astype(np.float64) @ _fragment_weights(u8("gate_weight_fp4"), u8("gate_scale")).T).astype(f32)
    acc_u = (xq.astype(np.float64) @ _fragment_weights(u8("up_weight_fp4"), u8("up_scale")).T).astype(f32)
    g = _bf16(acc_g) * (gd_x * f32(inp["gate_global_decode"]))
    u = _bf16(acc_u) * (gd_x * f32(inp["up_global_decode"]))
    h = torch.from_numpy((g / (f32(1) + np.exp(-g))) * u)
    ok, worst = _h_close(h, _h_expected(inp, q, s))
    assert ok > 0.999, (ok, worst)
    ok_bad, _ = _h_close(h * 1.05, _h_expected(inp, q, s))
    assert ok_bad < 0.5   # the check can fail


def test_pipeline_emulation_matches_029_reference(codec, p029):
    """029: bf16 gate/up results and SwiGLU (EPI_BF16=1), 3-D x, rows padded to 128 by the reference
    (zero rows change no amax); T = 2 x 64 exercises the padding."""
    from solforge.evaluate.reference import Fp4Shim
    ns: dict = {}
    exec(compile(reference_as_on_cuda(p029.definition.reference), "reference029", "exec"), ns)
    torch.manual_seed(0)
    b, sl, hid, inter = 2, 64, 256, 384   # 029's get_inputs fixes 4096/12288: build small ones alike
    scaler = ns["BlockWiseScalerNVFP4"]()
    inp = {"x": torch.randn(b, sl, hid, dtype=torch.bfloat16)}
    for proj, (n, k) in {"gate": (inter, hid), "up": (inter, hid), "down": (hid, inter)}.items():
        q, sf, gd = scaler.quantize(torch.randn(1, n, k) * 0.02)
        inp.update({f"{proj}_weight_fp4": q, f"{proj}_scale": sf, f"{proj}_global_decode_scale": gd.item()})
    shim = Fp4Shim().install()
    try:
        want = ns["run"](**inp).float().numpy().reshape(b * sl, hid)
    finally:
        shim.remove()
    glob = {p: f"{p}_global_decode_scale" for p in ("gate", "up", "down")}
    got = _emulate(codec, inp, inp["x"].float().numpy().reshape(b * sl, hid), glob, True, down_bf16=True,
                   cuda_scales=True)
    tol = p029.workloads[0].workload.tolerance
    close = np.abs(got - want) <= tol.max_atol + tol.max_rtol * np.abs(want)
    assert close.mean() >= tol.required_matched_ratio, (close.mean(), np.abs(got - want).max())
    assert (got == want).mean() > 0.9, (got == want).mean()
    # and the fp32 SwiGLU of 032 would not be bit-faithful here
    assert (_emulate(codec, inp, inp["x"].float().numpy().reshape(b * sl, hid), glob, False, down_bf16=True,
                     cuda_scales=True) == want).mean() < (got == want).mean()


def test_029_kernel_follows_the_gpu_reference_scale_rounding(codec, p029):
    """On the GPU, `out[:, :, b] = result * global_scale` with a bf16 result and a 0-dim fp32 CUDA
    tensor loads the scale as bf16 (ATen's CUDA binary kernels keep only CPU 0-dim tensors as fp32
    scalars); on the CPU it stays fp32. The first H200 run of 029 failed every workload (~50% of
    outputs off by a few %) with the CPU semantics. Here the reference, with the scale cast to the
    result dtype the way CUDA loads it, against the kernel's arithmetic (EPI_BF16, DOWN_BF16)."""
    from solforge.evaluate.reference import Fp4Shim
    from solforge.kernels import get_family

    spec = get_family("nvfp4_moe").analyze(p029.definition)
    assert spec.fixed["EPI_BF16"] == 1 and spec.fixed["DOWN_BF16"] == 1
    cuda_like = reference_as_on_cuda(p029.definition.reference)
    assert "global_scale.to(result.dtype)" in cuda_like
    ns: dict = {}
    exec(compile(cuda_like, "reference029_cuda_scales", "exec"), ns)
    torch.manual_seed(1)
    b, sl, hid, inter = 1, 128, 256, 384
    scaler = ns["BlockWiseScalerNVFP4"]()
    inp = {"x": torch.randn(b, sl, hid, dtype=torch.bfloat16)}
    for proj, (n, k) in {"gate": (inter, hid), "up": (inter, hid), "down": (hid, inter)}.items():
        q, sf, gd = scaler.quantize(torch.randn(1, n, k) * 0.02)
        inp.update({f"{proj}_weight_fp4": q, f"{proj}_scale": sf, f"{proj}_global_decode_scale": gd.item()})
    shim = Fp4Shim().install()
    try:
        want = ns["run"](**inp).float().numpy().reshape(b * sl, hid)
    finally:
        shim.remove()
    glob = {p: f"{p}_global_decode_scale" for p in ("gate", "up", "down")}
    x = inp["x"].float().numpy().reshape(b * sl, hid)
    got = _emulate(codec, inp, x, glob, True, down_bf16=True, cuda_scales=True)
    assert (got == want).mean() > 0.9, (got == want).mean()
    tol = p029.workloads[0].workload.tolerance
    close = np.abs(got - want) <= tol.max_atol + tol.max_rtol * np.abs(want)
    assert close.mean() >= tol.required_matched_ratio, close.mean()
    # the CPU semantics (fp32 scales) against the CUDA-like reference: the mismatch the H200 saw
    cpu_like = _emulate(codec, inp, x, glob, True)
    assert (cpu_like == want).mean() < (got == want).mean()


def test_agents_static_check_accepts_custom_input_scalars(p032, p029):
    """The optimize loop checks launch expressions before compiling: the global decode scales are
    scalar inputs made by the custom-inputs entrypoint (no value in workload.jsonl), and the family
    passes them as float32 args; the check must not call them unknown names (it did: every 032
    candidate was rejected as invalid before reaching a GPU)."""
    from solforge.agents.lab import static_check

    fam = get_family("nvfp4_moe")
    for p in (p032, p029):
        cand = fam.instantiate(p, fam.param_space(p)[0])
        assert any(a.startswith("float32:") and "global_decode" in a for l in cand.launches for a in l.args)
        assert static_check(p, cand) is None, p.name
        bad = cand.model_copy(update={"launches": [
            l.model_copy(update={"args": [a.replace("global_decode", "global_decoder") for a in l.args]})
            for l in cand.launches]})
        assert "global_decoder" in (static_check(p, bad) or "")   # a wrong name is still caught
