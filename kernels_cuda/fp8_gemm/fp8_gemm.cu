// Blockwise-scaled FP8 GEMM (DeepSeek-style: 1x128 activation scales, 128x128 weight scales) for
// sm_90a with mma.sync m16n8k32 e4m3 x e4m3 -> fp32, and the in-call quantization of bf16 operands.
//
//   out[m, n] = bf16( sum_kb (sum_{k in kb} qa[m,k] * qw[n,k]) * (sa[m,kb] * sw[n/128,kb]) + bias[n] )
//
// Params (#defined by solforge/kernels/fp8_gemm.py): K_DIM, N_DIM (multiples of 128); A_MODE /
// W_MODE: 0 = the operand is an fp8 input with its scales given, 1 = a bf16 input quantized here
// with scales computed here, 2 = a bf16 input quantized here with its scales given; SW_SN, SW_SK:
// the element strides of the given weight scales (nb, kb) ([N/128, K/128]: K/128, 1; the W^T layout
// [K/128, N/128]: 1, N/128); HAS_BIAS; tunables BM, BN (64/128), WARPS_M, WARPS_N, STAGES.
//
// Quantization (fp8_quant, one launch for both operands; the reference's BlockwiseScaler on CUDA):
//   scale = max(amax * fl(1/448), 1e-12)    (torch's CUDA `tensor / python_scalar` multiplies by
//                                            the fp32 reciprocal of the scalar)
//   q     = e4m3_rn(clamp(x / scale, -448, 448))   (tensor / tensor: IEEE division, __fdiv_rn)
// The 128x128 weight block's amax is the same whether the reference blocks W or W^T, so only the
// scale layout differs. Workspace (bytes): [qw: N*K][qa: M*K][sw: NB*KB fp32 (nb, kb)][sa: M*KB fp32],
// each part present only where computed; written in full by fp8_quant before fp8_gemm reads it.
//
// fp8_gemm: a CTA per BM x BN output tile (grouped launch order, GROUP_M tiles of M per group), a
// K step of 128 = one scale block, STAGES-deep cp.async ring of the A and B tiles (128-byte rows,
// 16-byte chunks XOR-swizzled by row & 7) and the tile's BM activation scales; ldmatrix (the fp8
// fragments of m16n8k32 are the b16 fragments of m16n8k16 in bytes); per K block a fresh fp32
// partial that is promoted into the running sum with sa * sw (DeepSeek's per-128 promotion);
// epilogue + bias in fp32, bf16 round to nearest even. Rows >= M are zero-filled and not stored.
#include <cuda_bf16.h>
#include <cuda/std/cstdint>

#define KB (K_DIM / 128)
#define NB (N_DIM / 128)
#define NT (WARPS_M * WARPS_N * 32)
#define WTM (BM / WARPS_M)   // warp tile rows
#define WTN (BN / WARPS_N)   // warp tile cols
#define MI (WTM / 16)
#define NI (WTN / 8)
#define GROUP_M 8
#define STAGE_BYTES ((BM + BN) * 128 + BM * 4)
#define E4M3_MAX 448.0f
#define QUANT_THREADS 256

static_assert(K_DIM % 128 == 0 && N_DIM % 128 == 0, "K and N: multiples of 128");
static_assert(BN == 64 || BN == 128, "BN 64 or 128: a tile lies in one 128-column weight scale block");
static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "warp tile: multiples of 16");
static_assert(STAGES >= 2, "STAGES >= 2");

// ---- workspace layout -------------------------------------------------------------------------
__device__ __forceinline__ size_t ws_qa_off() { return W_MODE == 0 ? 0 : (size_t)N_DIM * K_DIM; }
__device__ __forceinline__ size_t ws_sw_off(int M) { return ws_qa_off() + (A_MODE == 0 ? 0 : (size_t)M * K_DIM); }
__device__ __forceinline__ size_t ws_sa_off(int M) { return ws_sw_off(M) + (W_MODE == 1 ? (size_t)NB * KB * 4 : 0); }

// ---- quantization -----------------------------------------------------------------------------
__device__ __forceinline__ float compute_scale(float amax) {
    return fmaxf(__fmul_rn(amax, 1.0f / E4M3_MAX), 1e-12f);
}
__device__ __forceinline__ float q_in(float v, float s) {   // clamp(v / s) before the fp8 cast
    return fminf(fmaxf(__fdiv_rn(v, s), -E4M3_MAX), E4M3_MAX);
}
// two floats -> two e4m3 bytes (lo in the low byte), round to nearest even
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
#ifdef SOLFORGE_HOST_EMU   // tests/unit/test_kernels_fp8_gemm.py runs fp8_quant on the CPU (g++)
    return emu_e4m3(lo) | (emu_e4m3(hi) << 8);
#else
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}
__device__ __forceinline__ float bf_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// grid.x = n_act_ctas + (W_MODE ? NB * KB : 0). CTAs [0, n_act_ctas): 8 warps, a warp per 1x128
// block of x (lane: 4 elements); the others: a CTA per 128x128 block (nb, kb) of W.
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
fp8_quant(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
          const float* __restrict__ sx_in, const float* __restrict__ sw_in, unsigned char* __restrict__ ws,
          int M, int n_act_ctas) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if ((int)blockIdx.x < n_act_ctas) {
#if A_MODE != 0
        long long blk = (long long)blockIdx.x * (QUANT_THREADS / 32) + warp;
        const bool valid = blk < (long long)M * KB;   // a spare warp of the last CTA stores nothing
        if (!valid) blk = 0;
        const int m = (int)(blk / KB), kb = (int)(blk % KB);
        const size_t e = (size_t)m * K_DIM + kb * 128 + lane * 4;
        const uint2 raw = *reinterpret_cast<const uint2*>(x + e);
        float v[4] = {bf_lo(raw.x), bf_hi(raw.x), bf_lo(raw.y), bf_hi(raw.y)};
        float s;
#if A_MODE == 1
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
        for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        s = compute_scale(amax);
        if (lane == 0 && valid) reinterpret_cast<float*>(ws + ws_sa_off(M))[(size_t)m * KB + kb] = s;
#else
        s = sx_in[(size_t)m * KB + kb];
#endif
        const uint32_t q = e4m3x2(q_in(v[0], s), q_in(v[1], s)) | (e4m3x2(q_in(v[2], s), q_in(v[3], s)) << 16);
        if (valid) *reinterpret_cast<uint32_t*>(ws + ws_qa_off() + e) = q;
#endif
        return;
    }
#if W_MODE != 0
    __shared__ float red[QUANT_THREADS / 32];
    const int b = blockIdx.x - n_act_ctas;
    const int nb = b / KB, kb = b % KB;
    uint4 raw[8];      // 128 rows x 16 chunks of 8 bf16: chunk i = it * 256 + tid, row i / 16
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int i = it * QUANT_THREADS + tid, r = i >> 4, c = i & 15;
        raw[it] = *reinterpret_cast<const uint4*>(w + (size_t)(nb * 128 + r) * K_DIM + kb * 128 + c * 8);
    }
    float s;
#if W_MODE == 1
    float amax = 0.f;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const uint32_t u[4] = {raw[it].x, raw[it].y, raw[it].z, raw[it].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fmaxf(fabsf(bf_lo(u[j])), fabsf(bf_hi(u[j]))));
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    amax = red[0];
#pragma unroll
    for (int i = 1; i < QUANT_THREADS / 32; ++i) amax = fmaxf(amax, red[i]);
    s = compute_scale(amax);
    if (tid == 0) reinterpret_cast<float*>(ws + ws_sw_off(M))[nb * KB + kb] = s;
#else
    s = sw_in[nb * SW_SN + kb * SW_SK];
#endif
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int i = it * QUANT_THREADS + tid, r = i >> 4, c = i & 15;
        const uint32_t u[4] = {raw[it].x, raw[it].y, raw[it].z, raw[it].w};
        uint32_t q[2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
            q[h] = e4m3x2(q_in(bf_lo(u[2 * h]), s), q_in(bf_hi(u[2 * h]), s)) |
                   (e4m3x2(q_in(bf_lo(u[2 * h + 1]), s), q_in(bf_hi(u[2 * h + 1]), s)) << 16);
        *reinterpret_cast<uint2*>(ws + (size_t)(nb * 128 + r) * K_DIM + kb * 128 + c * 8) = make_uint2(q[0], q[1]);
    }
#endif
}

// ---- GEMM -------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// byte offset of (row, 16-byte chunk) in a [rows][128] fp8 tile, chunk XOR-swizzled by row & 7
__device__ __forceinline__ int swz(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mma_fp8(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// args: a_in/w_in (fp8 inputs; unused where quantized here), sa_in/sw_in (given scales; unused where
// computed here), bias (HAS_BIAS), out [M, N] bf16, ws (the workspace), M.
extern "C" __global__ void __launch_bounds__(NT)
fp8_gemm(const unsigned char* __restrict__ a_in, const unsigned char* __restrict__ w_in,
         const float* __restrict__ sa_in, const float* __restrict__ sw_in,
         const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ out,
         const unsigned char* __restrict__ ws, int M) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned char* A = A_MODE == 0 ? a_in : ws + ws_qa_off();
    const unsigned char* W = W_MODE == 0 ? w_in : ws;
    const float* SA = A_MODE == 1 ? reinterpret_cast<const float*>(ws + ws_sa_off(M)) : sa_in;
    const float* SW = W_MODE == 1 ? reinterpret_cast<const float*>(ws + ws_sw_off(M)) : sw_in;
    const int sw_sn = W_MODE == 1 ? KB : SW_SN, sw_sk = W_MODE == 1 ? 1 : SW_SK;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int num_m = (M + BM - 1) / BM, num_n = N_DIM / BN;
    const int pid = blockIdx.x, per_group = GROUP_M * num_n;
    const int first_m = (pid / per_group) * GROUP_M, gsize = min(num_m - first_m, GROUP_M);
    const int pid_m = first_m + (pid % per_group) % gsize, pid_n = (pid % per_group) / gsize;
    const int m0 = pid_m * BM, n0 = pid_n * BN, nb = n0 / 128;

    auto load = [&](int kb) {
        unsigned char* sA = smem + (kb % STAGES) * STAGE_BYTES;
        unsigned char* sB = sA + BM * 128;
        float* sS = reinterpret_cast<float*>(sB + BN * 128);
        for (int i = tid; i < BM * 8; i += NT) {
            const int r = i >> 3, c = i & 7;
            const bool ok = m0 + r < M;
            cp_async16(smem_u32(sA + swz(r, c)), A + (size_t)(ok ? m0 + r : 0) * K_DIM + kb * 128 + c * 16, ok);
        }
        for (int i = tid; i < BN * 8; i += NT) {
            const int r = i >> 3, c = i & 7;
            cp_async16(smem_u32(sB + swz(r, c)), W + (size_t)(n0 + r) * K_DIM + kb * 128 + c * 16, true);
        }
        for (int i = tid; i < BM; i += NT) {
            const bool ok = m0 + i < M;
            cp_async4(smem_u32(sS + i), SA + (size_t)(ok ? m0 + i : 0) * KB + kb, ok);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KB) load(s);
        cp_async_commit();
    }

    const int wm0 = (warp / WARPS_N) * WTM, wn0 = (warp % WARPS_N) * WTN;
    const int g = lane >> 2, t = lane & 3;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

    for (int kb = 0; kb < KB; ++kb) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kb + STAGES - 1 < KB) load(kb + STAGES - 1);
        cp_async_commit();
        const unsigned char* sA = smem + (kb % STAGES) * STAGE_BYTES;
        const unsigned char* sB = sA + BM * 128;
        const float* sS = reinterpret_cast<const float*>(sB + BN * 128);
        float part[MI][NI][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) part[i][j][0] = part[i][j][1] = part[i][j][2] = part[i][j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {          // 32 bytes of K per mma
            uint32_t af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i)
                ldsm_x4(smem_u32(sA + swz(wm0 + i * 16 + (lane & 15), kk * 2 + (lane >> 4))),
                        af[i][0], af[i][1], af[i][2], af[i][3]);
#pragma unroll
            for (int j = 0; j < NI; j += 2)
                ldsm_x4(smem_u32(sB + swz(wn0 + j * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))),
                        bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1]);
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_fp8(part[i][j], af[i], bf[j][0], bf[j][1]);
        }
        const float swv = SW[nb * sw_sn + kb * sw_sk];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            const float s0 = sS[wm0 + i * 16 + g] * swv, s1 = sS[wm0 + i * 16 + g + 8] * swv;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
                acc[i][j][1] = fmaf(part[i][j][1], s0, acc[i][j][1]);
                acc[i][j][2] = fmaf(part[i][j][2], s1, acc[i][j][2]);
                acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int j = 0; j < NI; ++j) {
        const int col = n0 + wn0 + j * 8 + t * 2;
        float b0 = 0.f, b1 = 0.f;
#if HAS_BIAS
        b0 = __bfloat162float(bias[col]);
        b1 = __bfloat162float(bias[col + 1]);
#endif
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm0 + i * 16 + g + h * 8;
                if (row < M)
                    *reinterpret_cast<__nv_bfloat162*>(out + (size_t)row * N_DIM + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1);
            }
        }
    }
}
