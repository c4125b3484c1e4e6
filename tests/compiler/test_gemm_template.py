"""The compiler's GEMM template (solforge/compiler/templates/gemm.py) on GEMMs written here:

- NVRTC for sm_90a over many specs (dtypes, transposed and permuted operands, batches, split-K,
  FP8 prologues, epilogue hooks, every tier of the param space's corners): compiles, no local
  memory or stack, tensor-core SASS where the tier says so;
- the whole kernel run on the CPU (g++ with the header's host emulation of cp.async, ldmatrix and
  mma.sync: the generated indexing, tile loaders, fragment layouts, tails, split-K reduce and
  epilogue are the ones the GPU runs) at small odd shapes, against torch on the CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from solforge.compiler.templates import gemm as G
from solforge.problem import axis_expr

HAVE_GXX = shutil.which("g++") is not None

# ---------------------------------------------------------------------------------------------------
# host emulation: a CUDA block = OS threads with a barrier, blocks one after another
# ---------------------------------------------------------------------------------------------------
SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
struct emu_dim3 { unsigned x, y, z; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
static std::barrier<>* emu_bar = nullptr;
inline void __syncthreads() { emu_bar->arrive_and_wait(); }
struct __nv_bfloat16 { uint16_t x; };
struct __half { _Float16 x; };
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)}; }
inline float __half2float(__half h) { return (float)h.x; }
inline __half __float2half_rn(float f) { return {(_Float16)f}; }
template <int E, int M, bool FN> struct emu_f8 {
    uint8_t x = 0;
    static float dec(uint8_t v) {
        int s = v >> 7, e = (v >> M) & ((1 << E) - 1), m = v & ((1 << M) - 1);
        const int bias = (1 << (E - 1)) - 1;
        if (FN) { if (e == (1 << E) - 1 && m == (1 << M) - 1) return NAN; }
        else if (e == (1 << E) - 1) return m ? NAN : (s ? -INFINITY : INFINITY);
        float r = e ? std::ldexp(1.0f + m / (float)(1 << M), e - bias) : std::ldexp(m / (float)(1 << M), 1 - bias);
        return s ? -r : r; }
    emu_f8() {}
    explicit emu_f8(float f) {
        int best = 0; float bd = INFINITY;
        for (int v = 0; v < 256; ++v) { float d = dec((uint8_t)v); if (d != d) continue;
            float dist = std::fabs(d - f); if (dist < bd) { bd = dist; best = v; } }
        x = (uint8_t)best; }
    explicit operator float() const { return dec(x); }
};
typedef emu_f8<4, 3, true> __nv_fp8_e4m3;
typedef emu_f8<5, 2, false> __nv_fp8_e5m2;
static void emu_run(unsigned gx, unsigned bx, const std::function<void()>& body) {
    gridDim = {gx, 1, 1}; blockDim = {bx, 1, 1};
    for (unsigned x = 0; x < gx; ++x) {
        std::barrier<> bar(bx); emu_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < bx; ++t) ts.emplace_back([=, &body]() {
            blockIdx = {x, 0, 0}; threadIdx = {t, 0, 0}; body(); });
        for (auto& th : ts) th.join();
    }
}
"""

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*?)\) \{')
_BUILT: dict[str, ctypes.CDLL] = {}


def _unit_text(gen: G.Generated) -> str:
    """The .cu unit with the header inlined (include guard) and the toolkit includes dropped."""
    unit = next(v for k, v in gen.sources.items() if k.endswith(".cu"))
    unit = unit.replace(f'#include "{G.HEADER_NAME}"', G.guarded_header())
    return "\n".join(l for l in unit.splitlines() if not l.startswith("#include <cuda"))


def build_emulator(gens: list[G.Generated], tmp: Path) -> tuple[ctypes.CDLL, dict]:
    """One shared library with every kernel of `gens`; ({kernel: param C types})."""
    text = "\n".join(_unit_text(g) for g in gens)
    kernels, wrappers = {}, []
    for m in _KERNEL.finditer(text):
        name, params = m.group(1), m.group(2)
        decls = [p.strip() for p in params.split(",") if p.strip()]
        types = [re.sub(r"\s*\b\w+$", "", d).replace("__restrict__", "").strip() for d in decls]
        kernels[name] = types
        call = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        wrappers.append(f'extern "C" void run_{name}(unsigned gx, unsigned bx, void** a) '
                        f'{{ emu_run(gx, bx, [&]() {{ {name}({call}); }}); }}')
    full = SHIM + text + "\n" + "\n".join(wrappers) + "\n"
    key = hashlib.sha256(full.encode()).hexdigest()[:16]
    if key in _BUILT:
        return _BUILT[key], kernels
    src, so = tmp / f"emu_{key}.cpp", tmp / f"emu_{key}.so"
    src.write_text(full)
    r = subprocess.run(["g++", "-O1", "-std=c++20", "-w", "-pthread", "-shared", "-fPIC", "-ffp-contract=off",
                        str(src), "-o", str(so)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    lib = ctypes.CDLL(str(so))
    _BUILT[key] = lib
    return lib, kernels


_CT = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
       "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "float64": ctypes.c_double}


def emulate(lib, kernels: dict, gen: G.Generated, tensors: dict, axes: dict) -> None:
    """Run gen's launches on the CPU over torch CPU tensors (outputs written in place)."""
    env = dict(axes)
    ws_bytes = int(axis_expr.evaluate(gen.workspace, env))
    ws = torch.zeros(max(ws_bytes, 16), dtype=torch.uint8)
    for la in gen.launches:
        name = la["kernel"]
        grid = int(axis_expr.evaluate(la["grid"][0], env))
        block = int(axis_expr.evaluate(la["block"][0], env))
        vals = []
        for a in la["args"]:
            m = re.match(r"^(int32|int64|uint32|uint64|float32|float64):(.+)$", a)
            if m:
                v = axis_expr.evaluate(m.group(2), env)
                vals.append(_CT[m.group(1)](int(v) if m.group(1)[0] in "iu" else float(v)))
            else:
                t = ws if a == "workspace" else tensors[a]
                assert t.is_contiguous()
                vals.append(ctypes.c_void_p(t.data_ptr()))
        assert len(vals) == len(kernels[name]), (name, kernels[name], la["args"])
        arr = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        getattr(lib, f"run_{name}")(ctypes.c_uint(grid), ctypes.c_uint(block), arr)


def close(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> None:
    got, want = got.float(), want.float()
    err = (got - want).abs()
    bad = ~(err <= atol + rtol * want.abs())
    assert not bool(bad.any()), (f"{int(bad.sum())}/{bad.numel()} elements off, max abs err "
                                 f"{float(err.max()):.4g}; first at {tuple(bad.nonzero()[0].tolist())}")


# ---------------------------------------------------------------------------------------------------
# specs
# ---------------------------------------------------------------------------------------------------
TOL = {"float32": (1e-4, 1e-4), "float16": (2e-3, 5e-3), "bfloat16": (1e-2, 1e-2)}
TOL_CASE = {"tf32_1x": (5e-2, 1e-2)}   # TF32 rounds each operand to 10 mantissa bits
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def plain_spec(name: str, dt: str, ta: bool, tb: bool, ld_a: str = None, ld_b: str = None, bias=False,
               epi=None, alpha=None, out_dt=None) -> G.GemmSpec:
    """C[M, N] = op(A) @ op(B) with A stored [M, lda] (ta: [K, lda]) and B stored [N, ldb] (tb: [K, ldb])."""
    a = G.Operand.r_major("A", dt, ld_a or "M") if ta else G.Operand.k_major("A", dt, ld_a or "K")
    b = G.Operand.r_major("B", dt, ld_b or "N") if tb else G.Operand.k_major("B", dt, ld_b or "K")
    return G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", out=G.Output("C", out_dt or dt),
                      bias=G.Bias("bias", dt) if bias else None, alpha=alpha, epilogue=epi,
                      args=(G.KArg("int", "LDA", "int32:LDA"), G.KArg("int", "LDB", "int32:LDB"))
                      if (ld_a or ld_b) else ())


def perm_spec(name: str, dt: str, tb: bool) -> G.GemmSpec:
    """A stored [Bt, M, H, K] (a permuted view), batch b = bt * H + h; B [Bt*H, N, K] or [Bt*H, K, N]."""
    a = G.Operand("A", dt, k_stride="1", r_stride="H * K", b_offset="(b / H) * M * H * K + (b % H) * K")
    b = (G.Operand.r_major("B", dt, "N", b_offset="b * K * N") if tb
         else G.Operand.k_major("B", dt, "K", b_offset="b * N * K"))
    return G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", batch="Bt * H",
                      out=G.Output("C", dt, b_offset="b * M * N"), args=(G.KArg("int", "H", "int32:H"),))


MMA_SMALL = dict(tier="mma", BM=64, BN=64, BK=32, WM=2, WN=2, ST=3, SPLIT=1)


def _cases():
    """(spec, params, axes, builder of (tensors, reference))."""
    out = []

    def plain(name, dt, ta, tb, M, N, K, params, lda=None, ldb=None, bias=False, epi=None, alpha=None):
        spec = plain_spec(name, dt, ta, tb, "LDA" if lda else None, "LDB" if ldb else None, bias, epi, alpha)
        axes = dict(M=M, N=N, K=K, LDA=lda or 0, LDB=ldb or 0)

        def make():
            g = torch.Generator().manual_seed(hash(name) % 1000)
            t = TORCH[dt]
            la = lda or (M if ta else K)
            lb = ldb or (N if tb else K)
            A = (torch.randn((K if ta else M), la, generator=g)).to(t)
            B = (torch.randn((K if tb else N), lb, generator=g)).to(t)
            Al = A[:, :M].t() if ta else A[:, :K]
            Bl = B[:, :N] if tb else B[:, :K].t()
            ref = Al.double() @ Bl.double()
            if alpha:
                ref = ref * float(alpha.rstrip("f"))
            tens = dict(A=A, B=B, C=torch.full((M, N), float("nan"), dtype=t))
            if bias:
                bv = torch.randn(N, generator=g).to(t)
                tens["bias"] = bv
                ref = ref + bv.double()
            if epi:
                ref = torch.relu(ref)
            return tens, ref
        out.append((spec, params, axes, make, "C", dt))

    # vec path (aligned), K tail inside a 16-byte chunk via a padded row stride, bias + relu
    plain("nt_bf16_pad", "bfloat16", False, False, 37, 70, 52, MMA_SMALL, lda=56, ldb=64, bias=True,
          epi="v = v > 0.f ? v : 0.f;")
    # misaligned rows (K = 50): the run-time check sends both operands down the element path
    plain("nt_f16_odd", "float16", False, False, 33, 17, 50, MMA_SMALL)
    # transposed operands through ldmatrix.trans (M, N multiples of 8: 16-byte row chunks)
    plain("tn_bf16", "bfloat16", True, False, 40, 72, 45, MMA_SMALL, alpha="0.5f")
    plain("nn_f16", "float16", False, True, 24, 48, 70, dict(MMA_SMALL, BK=64, ST=2))
    plain("tt_bf16", "bfloat16", True, True, 48, 56, 33, dict(tier="mma", BM=16, BN=64, BK=64, WM=1, WN=4,
                                                             ST=4, SPLIT=1))
    # transposed with an odd M: the trans path's fallback
    plain("tn_f16_oddm", "float16", True, True, 21, 19, 40, MMA_SMALL)
    # split-K: partials to the workspace, reduce kernel runs the epilogue
    plain("splitk_bf16", "bfloat16", False, True, 9, 40, 200, dict(MMA_SMALL, SPLIT=3), bias=True)
    # 8 warps on 128 x 64 tiles
    plain("w8_bf16", "bfloat16", False, False, 70, 66, 64, dict(tier="mma", BM=128, BN=64, BK=32, WM=4, WN=2,
                                                               ST=3, SPLIT=1))
    # wgmma (sm_90a) tier: 128B-swizzled K-major tiles, N and K tails, split-K, misaligned fallback
    plain("wg_nt_bf16", "bfloat16", False, False, 70, 130, 100, dict(tier="wgmma", BM=128, BN=128, ST=3, SPLIT=1),
          lda=104, ldb=104, bias=True, epi="v = v > 0.f ? v : 0.f;")
    plain("wg_nt_f16_split", "float16", False, False, 40, 72, 300, dict(tier="wgmma", BM=64, BN=64, ST=4, SPLIT=2))
    plain("wg_nt_bf16_256", "bfloat16", False, False, 17, 260, 64, dict(tier="wgmma", BM=64, BN=256, ST=3, SPLIT=1))
    plain("wg_nt_f16_odd", "float16", False, False, 33, 65, 50, dict(tier="wgmma", BM=128, BN=64, ST=3, SPLIT=1))
    # warp-specialized wgmma tier (producer warpgroup, mbarrier ring): K-major and MN-major operands
    # (wgmma's transpose bit), M/N/K tails, split-K, persistent CTAs (the ring carried across tiles),
    # misaligned operands written element by element
    WS = dict(tier="wgws", BM=128, BN=128, ST=3, SPLIT=1, CTAS=0)
    plain("ws_nt_bf16", "bfloat16", False, False, 70, 130, 100, WS, lda=104, ldb=104, bias=True,
          epi="v = v > 0.f ? v : 0.f;")
    plain("ws_nn_f16_split", "float16", False, True, 40, 72, 300, dict(WS, BM=64, BN=64, ST=4, SPLIT=2))
    plain("ws_tn_bf16_256", "bfloat16", True, True, 72, 260, 72, dict(WS, BN=256, ST=2), alpha="0.5f")
    plain("ws_tt_f16_pers", "float16", True, False, 136, 130, 80, dict(WS, BM=64, BN=64, ST=2, CTAS=3),
          bias=True)
    plain("ws_nn_bf16_pers", "bfloat16", False, True, 200, 136, 136, dict(WS, BN=64, ST=4, CTAS=2))
    plain("ws_tn_f16_odd", "float16", True, True, 70, 33, 50, dict(WS, BM=64, BN=64))        # A, B misaligned
    plain("ws_nt_f16_odd", "float16", False, False, 33, 65, 50, dict(WS, BN=64, CTAS=1))   # K odd
    # fp32 SIMT, transposed A, split-K
    plain("simt_tn", "float32", True, False, 37, 45, 70, dict(tier="simt", BM=32, BN=64, BK=16, TM=4, TN=4,
                                                              SPLIT=2), bias=True)
    plain("simt_nn", "float32", False, True, 33, 20, 17, dict(tier="simt", BM=64, BN=64, BK=8, TM=4, TN=4,
                                                              SPLIT=1))
    # fp32 on tensor cores: 3xTF32 (fp32-level error) and TF32 (a 10-bit mantissa: looser)
    plain("tf32_3x", "float32", True, False, 37, 45, 70, dict(tier="tf32", BM=64, BN=64, BK=32, WM=2, WN=2, ST=2,
                                                              PASSES=3, SPLIT=1), bias=True)
    plain("tf32_1x", "float32", False, True, 20, 70, 45, dict(tier="tf32", BM=128, BN=64, BK=32, WM=4, WN=2,
                                                              ST=2, PASSES=1, SPLIT=2))

    # batched, permuted batch layout
    for dt, tb, wg in (("bfloat16", False, False), ("float16", True, False), ("float32", False, False),
                       ("bfloat16", False, True), ("float16", True, "ws")):
        name = f"perm_{dt}_{int(tb)}_{wg if wg == 'ws' else int(wg)}"
        spec = perm_spec(name, dt, tb)
        params = MMA_SMALL if dt != "float32" else dict(tier="simt", BM=32, BN=64, BK=16, TM=4, TN=4, SPLIT=1)
        if wg == "ws":
            params = dict(tier="wgws", BM=64, BN=64, ST=2, SPLIT=1, CTAS=4)
        elif wg:
            params = dict(tier="wgmma", BM=64, BN=64, ST=3, SPLIT=1)
        Bt, H, M, N, K = 2, 3, 17, 24, 40

        def make(dt=dt, tb=tb, Bt=Bt, H=H, M=M, N=N, K=K, name=name):
            g = torch.Generator().manual_seed(7)
            t = TORCH[dt]
            A = torch.randn(Bt, M, H, K, generator=g).to(t)
            B = (torch.randn(Bt, H, K, N, generator=g) if tb else torch.randn(Bt, H, N, K, generator=g)).to(t)
            Bl = B if tb else B.transpose(-1, -2)
            ref = A.permute(0, 2, 1, 3).double() @ Bl.double()
            return dict(A=A, B=B, C=torch.full((Bt, H, M, N), float("nan"), dtype=t)), ref
        out.append((spec, params, dict(Bt=Bt, H=H, M=M, N=N, K=K), make, "C", dt))

    # epilogue hook with a residual input and two outputs (out=None: the hook stores both)
    spec = G.GemmSpec(name="epi_two_outputs", a=G.Operand.k_major("A", "bfloat16", "K"),
                      b=G.Operand.k_major("B", "bfloat16", "K"), m="M", n="N", k="K",
                      epilogue=("v += sfg::to_f(R[(i64)row * N + col]);\n"
                                "Y1[(i64)row * N + col] = sfg::from_f<__nv_bfloat16>(v);\n"
                                "Y2[(i64)col * M + row] = v > 0.f ? v : 0.f;"),
                      args=(G.KArg("const __nv_bfloat16*", "R", "R"), G.KArg("__nv_bfloat16*", "Y1", "Y1"),
                            G.KArg("float*", "Y2", "Y2")))

    def make_two(M=19, N=40, K=64):
        g = torch.Generator().manual_seed(5)
        A = torch.randn(M, K, generator=g).to(torch.bfloat16)
        B = torch.randn(N, K, generator=g).to(torch.bfloat16)
        R = torch.randn(M, N, generator=g).to(torch.bfloat16)
        v = A.double() @ B.double().t() + R.double()
        tens = dict(A=A, B=B, R=R, Y1=torch.full((M, N), float("nan"), dtype=torch.bfloat16),
                    Y2=torch.full((N, M), float("nan")))
        return tens, (v, torch.relu(v).t())
    out.append((spec, dict(tier="wgmma", BM=64, BN=64, ST=3, SPLIT=1), dict(M=19, N=40, K=64), make_two,
                ("Y1", "Y2"), "bfloat16"))

    # FP8 e4m3 with 1 x 128 activation and 128 x 128 weight block scales, dequantized on load
    spec = G.GemmSpec(name="fp8_block", a=G.Operand.k_major("A", "float8_e4m3fn", "K",
                                                            prologue="v * sa[(i64)r * (K / 128) + k / 128]"),
                      b=G.Operand.k_major("B", "float8_e4m3fn", "K",
                                          prologue="v * sb[(i64)(r / 128) * (K / 128) + k / 128]"),
                      m="M", n="N", k="K", out=G.Output("C", "bfloat16"),
                      args=(G.KArg("const float*", "sa", "sa"), G.KArg("const float*", "sb", "sb")))

    def make_fp8(M=20, N=130, K=256):
        g = torch.Generator().manual_seed(3)
        A = torch.randn(M, K, generator=g).to(torch.float8_e4m3fn)
        B = torch.randn(N, K, generator=g).to(torch.float8_e4m3fn)
        sa = torch.rand(M, K // 128, generator=g) + 0.5
        sb = torch.rand((N + 127) // 128, K // 128, generator=g) + 0.5
        # the kernel rounds each dequantized element to bf16 before the multiply
        a = (A.double() * sa.double().repeat_interleave(128, 1)).to(torch.bfloat16).double()
        b = (B.double() * sb.double().repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)).to(torch.bfloat16)
        ref = a @ b.double().t()
        return dict(A=A, B=B, sa=sa, sb=sb, C=torch.full((M, N), float("nan"), dtype=torch.bfloat16)), ref
    out.append((spec, MMA_SMALL, dict(M=20, N=130, K=256), make_fp8, "C", "bfloat16"))
    return out


CASES = _cases()


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_whole_kernels_on_the_cpu_match_torch(tmp_path):
    gens = [G.generate(spec, params) for spec, params, *_ in CASES]
    lib, kernels = build_emulator(gens, tmp_path)
    fails = []
    for (spec, params, axes, make, out_name, dt), gen in zip(CASES, gens):
        tensors, ref = make()
        emulate(lib, kernels, gen, tensors, axes)
        names, refs = (out_name, ref) if isinstance(out_name, tuple) else ((out_name,), (ref,))
        for nm, r in zip(names, refs):
            try:
                close(tensors[nm], r.to(tensors[nm].dtype), *TOL_CASE.get(spec.name, TOL[dt]))
            except AssertionError as e:
                fails.append(f"{spec.name} {params} {nm}: {e}")
    assert not fails, "\n".join(fails)


def test_vec_path_only_for_plain_16bit_unit_stride_operands():
    s = plain_spec("x", "bfloat16", False, True)
    assert G._vec_capable(s.a, "bfloat16") and s.a.contiguity() == 1
    assert G._vec_capable(s.b, "bfloat16") and s.b.contiguity() == 2
    assert not G._vec_capable(G.Operand("A", "bfloat16", k_stride="2", r_stride="K"), "bfloat16")
    assert not G._vec_capable(G.Operand.k_major("A", "float8_e4m3fn", "K"), "bfloat16")
    assert not G._vec_capable(G.Operand.k_major("A", "bfloat16", "K", prologue="v * 2.f"), "bfloat16")
    assert not G._vec_capable(G.Operand.k_major("A", "float32", "K"), "float32")


def test_params_space_valid_and_default_per_bucket():
    s = plain_spec("x", "bfloat16", False, False)
    space = G.param_space(s)
    assert space and all(G.valid_params(s, p) for p in space)
    assert G.default_params(s, 1, 4096, 4096)["BM"] == 16 and G.default_params(s, 1, 4096, 4096)["SPLIT"] > 1
    big = dict(tier="wgws", BM=128, BN=256, ST=4, CTAS=132, SPLIT=1)
    # both operands K-major, two waves of 128 x 256 tiles or more: the cp.async wgmma tier (faster
    # there on the H200); fewer tiles: the warp-specialized one
    assert G.default_params(s, 8192, 8192, 4096) == dict(tier="wgmma", BM=128, BN=256, ST=4, SPLIT=1)
    assert G.default_params(s, 2048, 2048, 2048)["tier"] == "wgws"
    # a transposed operand: no "wgmma" tier, but the warp-specialized one reads it MN-major
    for ta, tb in ((True, False), (False, True), (True, True)):
        t = plain_spec("t", "bfloat16", ta, tb)
        assert G.default_params(t, 8192, 8192, 4096) == big
        assert not any(p["tier"] == "wgmma" for p in G.param_space(t))
        assert any(p["tier"] == "wgws" for p in G.param_space(t))
    assert any(p["tier"] == "wgmma" for p in space) and space[0]["tier"] == "wgws"
    # tiles by output size: 128 x 256 while it fills most of a wave, then 128 x 128, then 64 x 128;
    # persistent only past a wave, split-K only under half a wave
    assert G.default_params(s, 2048, 2048, 2048) == dict(big, CTAS=0)
    assert G.default_params(s, 1024, 1024, 1024) == dict(tier="wgws", BM=64, BN=128, ST=4, CTAS=0, SPLIT=1)
    assert G.default_params(s, 4096, 128, 4096)["SPLIT"] == 2
    # misaligned at run time is the kernel's business (element path): eligibility is static
    assert G.default_params(plain_spec("p", "float16", True, True, "LDA"), 4096, 4096, 4096)["tier"] == "wgws"
    # a register-path operand (prologue) keeps the mma tier
    q = G.GemmSpec(name="q", a=G.Operand.k_major("A", "bfloat16", "K", prologue="v * 2.f"),
                   b=G.Operand.k_major("B", "bfloat16", "K"), m="M", n="N", k="K", out=G.Output("C", "bfloat16"))
    assert G.default_params(q, 4096, 4096, 4096)["tier"] == "mma"
    f = plain_spec("y", "float32", False, False)
    fs = G.param_space(f)
    assert {p["tier"] for p in fs} == {"simt", "tf32"} and G.default_params(f, 512, 512, 512)["tier"] == "simt"
    with pytest.raises(ValueError):
        G.generate(f, MMA_SMALL)          # fp32 operands never take the 16-bit tensor-core tier


# ---------------------------------------------------------------------------------------------------
# NVRTC sm_90a: compiles, no spills, the expected SASS
# ---------------------------------------------------------------------------------------------------
def _compile(gen: G.Generated, tmp_path: Path, want=()):
    from solforge.candidate import Candidate
    from tests.unit.family_checks import check_compiled

    cand = Candidate(problem="gemm_template", sources=gen.sources, launches=gen.launches,
                     workspace=gen.workspace, workspace_zero="0")
    return check_compiled(cand, tmp_path, want=want, kernels=len(gen.kernels))


NVRTC_CASES = [(spec, params) for spec, params, *_ in CASES] + [
    (plain_spec("big_nt", "bfloat16", False, False, bias=True, epi="v = v > 0.f ? v : 0.f;"), None),
    (plain_spec("big_tn", "float16", True, False), dict(tier="mma", BM=128, BN=256, BK=32, WM=2, WN=4, ST=3,
                                                         SPLIT=1)),
    (plain_spec("skinny", "bfloat16", False, False), dict(tier="mma", BM=16, BN=128, BK=64, WM=1, WN=4, ST=4,
                                                          SPLIT=8)),
    (plain_spec("big_f32", "float32", True, True), None),
    (plain_spec("wg_256", "bfloat16", False, False, bias=True), dict(tier="wgmma", BM=128, BN=256, ST=4, SPLIT=1)),
    (plain_spec("wg_128_split", "float16", False, False), dict(tier="wgmma", BM=64, BN=128, ST=5, SPLIT=4)),
    # warp-specialized tier: every layout, persistent 128 x 256 (registers moved to the consumers)
    (plain_spec("ws_nt", "bfloat16", False, False, bias=True, epi="v = v > 0.f ? v : 0.f;"), None),
    (plain_spec("ws_nn", "float16", False, True), dict(tier="wgws", BM=128, BN=256, ST=4, SPLIT=1, CTAS=132)),
    (plain_spec("ws_tn", "bfloat16", True, True, alpha="0.5f"), dict(tier="wgws", BM=128, BN=256, ST=4, SPLIT=1,
                                                                    CTAS=132)),
    (plain_spec("ws_tt", "float16", True, False), dict(tier="wgws", BM=128, BN=128, ST=6, SPLIT=1, CTAS=0)),
    (plain_spec("ws_split", "bfloat16", False, True), dict(tier="wgws", BM=64, BN=128, ST=4, SPLIT=2, CTAS=0)),
    (plain_spec("ws_tiers", "bfloat16", False, True, bias=True), "tiers"),
]


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(NVRTC_CASES)), ids=[s.name for s, _ in NVRTC_CASES])
def test_nvrtc_sm90a_no_spills(i, tmp_path):
    spec, params = NVRTC_CASES[i]
    if params == "tiers":
        params = G.default_params(spec, None, 4096, 4096)
    gen = G.generate(spec, params)
    want = ()
    tiers = G.tiers_of(params or G.default_params(spec))
    for t in tiers:   # a tiered kernel holds every tier's code
        want += {"wgmma": ("HGMMA", "LDGSTS"), "mma": ("HMMA",), "simt": ("FFMA",), "tf32": ("HMMA",),
                 "wgws": ("HGMMA", "LDGSTS", "SYNCS")}[t["tier"]]
        if t["tier"] == "wgws" and t["BN"] == 256 and max(G._threads(x) for x in tiers) == 384:
            want += ("USETMAXREG",)   # 128 accumulators a consumer thread: registers moved over
        if t["tier"] == "mma" and G._vec_capable(spec.a, spec.compute_type()):
            want += ("LDGSTS",)
    _compile(gen, tmp_path, want)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_m_tiers_pick_their_config_at_run_time(tmp_path):
    """One kernel, three tile configs chosen by M (split-K only in the first): each M lands in its
    tier in the kernel and in the launch expressions alike."""
    spec = plain_spec("tiered", "bfloat16", False, False, bias=True)
    params = {"tiers": [dict(tier="mma", BM=16, BN=64, BK=64, WM=1, WN=4, ST=3, SPLIT=2, max_m=16),
                        dict(tier="wgmma", BM=64, BN=64, ST=3, SPLIT=1, max_m=48),
                        dict(tier="mma", BM=64, BN=64, BK=32, WM=2, WN=2, ST=3, SPLIT=1)]}
    assert G.valid_params(spec, params)
    gen = G.generate(spec, params)
    lib, kernels = build_emulator([gen], tmp_path)
    env = lambda m: dict(M=m, N=70, K=96)  # noqa: E731
    assert axis_expr.evaluate(gen.launches[0]["grid"][0], env(5)) == 1 * 2 * 2
    assert axis_expr.evaluate(gen.launches[0]["block"][0], env(40)) == 128
    assert axis_expr.evaluate(gen.launches[1]["grid"][0], env(40)) == 1      # reduce: idle past tier 0
    assert axis_expr.evaluate(gen.workspace, env(100)) == 0
    for m in (5, 16, 17, 40, 100):
        g = torch.Generator().manual_seed(m)
        A = torch.randn(m, 96, generator=g).to(torch.bfloat16)
        B = torch.randn(70, 96, generator=g).to(torch.bfloat16)
        bias = torch.randn(70, generator=g).to(torch.bfloat16)
        t = dict(A=A, B=B, bias=bias, C=torch.full((m, 70), float("nan"), dtype=torch.bfloat16))
        emulate(lib, kernels, gen, t, env(m))
        close(t["C"], (A.double() @ B.double().t() + bias.double()).to(torch.bfloat16), 1e-2, 1e-2)


def test_default_params_without_m_are_tiers():
    s = plain_spec("x", "bfloat16", False, False)
    p = G.default_params(s, None, 4096, 4096)
    ts = G.tiers_of(p)
    assert [t.get("max_m") for t in ts][:2] == [16, 64] and "max_m" not in ts[-1]
    assert ts[0]["SPLIT"] > 1 and ts[-1]["tier"] == "wgws" and G.valid_params(s, p)
    assert ts[-1]["CTAS"] == G.NUM_SMS
    with pytest.raises(ValueError):
        G.tiers_of({"tiers": [dict(ts[0]), dict(ts[0], max_m=8)]})
