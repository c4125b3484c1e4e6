// Blockwise-scaled FP8 GEMM (DeepSeek-style: 1x128 activation scales, 128x128 weight scales) on
// Hopper wgmma with native e4m3 operands (sm_90a), and the in-call quantization of bf16 operands.
// The same computation as kernels_cuda/fp8_gemm/fp8_gemm.cu (which uses mma.sync m16n8k32 e4m3,
// lowered on sm_90 to f16 HMMA + conversions):
//
//   out[m, n] = bf16( sum_kb (sum_{k in kb} qa[m,k] * qw[n,k]) * (sa[m,kb] * sw[n/128,kb]) + bias[n] )
//
// Params (#defined by solforge/kernels/fp8_gemm_wgmma.py): the fixed ones of fp8_gemm (K_DIM, N_DIM,
// A_MODE, W_MODE, SW_SN, SW_SK, HAS_BIAS: see fp8_gemm.cu) and the tunables BM (64 / 128: one or
// two consumer warpgroups, each owning 64 rows), BN (64 / 128: a tile lies in one 128-column weight
// scale block), STAGES (cp.async ring depth).
//
// fp8_quant and the workspace layout are fp8_gemm.cu's, copied verbatim (between the markers
// below; tests/unit/test_kernels_fp8_gemm_wgmma.py checks the text is identical).
//
// fp8_gemm_wgmma: a CTA of BM/64 warpgroups per BM x BN output tile (fp8_gemm's grouped launch
// order), a K step of 128 = one scale block = one 128-byte row per operand row = exactly one row of
// the 128-byte swizzle atom. Shared memory (base rounded up to 1024): STAGES x [A: BM x 128 bytes]
// [B: BN x 128 bytes], then STAGES x [BM activation scales]. Row r's 16-byte chunk c is stored at
// r*128 + ((c ^ (r & 7)) << 4): the hardware's 128B swizzle inside each 1024-byte aligned 8-row
// group (every tile is a multiple of 8 KB, so 1024-aligned). Per K block, after the ring's
// cp.async.wait + fence.proxy.async + __syncthreads, each warpgroup issues 4 wgmma m64nBNk32
// e4m3 x e4m3 -> f32 (A = its 64 rows, B = the BN-row tile; both K-major, the only layout FP8 wgmma
// has), the first with scale-d = 0 (a fresh partial), the k step advancing both descriptors' start
// by 32 bytes (as the bf16 family's k16 steps: 32 bytes = 2 chunks, no carry out of the chunk bits);
// commit, wait_group 0, then the promotion acc = fma(part, sa[m,kb] * sw[nb,kb], acc) exactly as
// fp8_gemm.cu (s = sS[row] * swv in fp32, one fmaf per element). Epilogue + bias in fp32, bf16 RNE.
// Rows >= M are zero-filled (cp.async src-size 0, scales 0) and not stored. The ring slot that
// load(kb + STAGES - 1) overwrites was read by the wgmmas of kb - 1, complete (wait_group 0) before
// this iteration's __syncthreads.
//
// Accumulator layout of m64nNk32 (f32, as m64nNk16): thread t of a warpgroup (warp w = t/32, lane
// l) holds d[i], i < N/2, for row 16w + l/4 + 8*((i/2)&1) and column 8*(i/4) + 2*(l%4) + (i&1).
#include <cuda_bf16.h>
#include <cuda/std/cstdint>

#define KB (K_DIM / 128)
#define NB (N_DIM / 128)
#define NWG (BM / 64)        // consumer warpgroups, 64 rows each
#define NT (NWG * 128)
#define GROUP_M 8
#define A_BYTES (BM * 128)
#define B_BYTES (BN * 128)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define E4M3_MAX 448.0f
#define QUANT_THREADS 256

static_assert(K_DIM % 128 == 0 && N_DIM % 128 == 0, "K and N: multiples of 128");
static_assert(BM == 64 || BM == 128, "BM 64 or 128: one or two consumer warpgroups");
static_assert(BN == 64 || BN == 128, "BN 64 or 128: a tile lies in one 128-column weight scale block");
static_assert(STAGES >= 2, "STAGES >= 2");
static_assert((BN * 8) % NT == 0 && BM <= NT, "load(): whole 16-byte chunks per thread, a scale per thread");

// FP8_QUANT_SECTION: fp8_gemm.cu's workspace layout and fp8_quant kernel (its text from "// ---- workspace
// layout" up to "// ---- GEMM") are spliced in here by solforge/kernels/fp8_gemm_wgmma.py, so the
// GPU-checked quantization exists once, in kernels_cuda/fp8_gemm/fp8_gemm.cu.

// ---- GEMM -------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// byte offset of (row, 16-byte chunk) in a [rows][128] fp8 tile: the 128B swizzle
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

// wgmma matrix descriptor (PTX ISA; the bf16 family's smem_desc, gemm_wgmma.cu explains each field):
// start >> 4, LBO 16 bytes (unused for swizzled K-major), SBO 1024 bytes between 8-row groups,
// base offset 0 (1024-aligned tiles), layout 1 = 128-byte swizzle
__device__ __forceinline__ unsigned long long smem_desc(uint32_t addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// keeps the compiler from moving reads of the accumulators above the wgmma wait
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[N / 2], unsigned long long da, unsigned long long db, int scale_d);

// BEGIN GENERATED wgmma wrappers (gen_wgmma_ops.py; do not edit by hand)
template <> __device__ __forceinline__ void wgmma_e4m3<64>(float (&d)[32], unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
}

template <> __device__ __forceinline__ void wgmma_e4m3<128>(float (&d)[64], unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
}
// END GENERATED wgmma wrappers

// args (those of fp8_gemm): a_in/w_in (fp8 inputs; unused where quantized here), sa_in/sw_in
// (given scales; unused where computed here), bias (HAS_BIAS), out [M, N] bf16, ws, M.
extern "C" __global__ void __launch_bounds__(NT, 1)
fp8_gemm_wgmma(const unsigned char* __restrict__ a_in, const unsigned char* __restrict__ w_in,
               const float* __restrict__ sa_in, const float* __restrict__ sw_in,
               const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ out,
               const unsigned char* __restrict__ ws, int M) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // 128B swizzle: tiles at 1024-aligned shared addresses (the launch asks for 1024 spare bytes)
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char* smem = smem_raw + (base - raw);
    const float* sS_all = reinterpret_cast<const float*>(smem + STAGES * STAGE_BYTES);

    const unsigned char* A = A_MODE == 0 ? a_in : ws + ws_qa_off();
    const unsigned char* W = W_MODE == 0 ? w_in : ws;
    const float* SA = A_MODE == 1 ? reinterpret_cast<const float*>(ws + ws_sa_off(M)) : sa_in;
    const float* SW = W_MODE == 1 ? reinterpret_cast<const float*>(ws + ws_sw_off(M)) : sw_in;
    const int sw_sn = W_MODE == 1 ? KB : SW_SN, sw_sk = W_MODE == 1 ? 1 : SW_SK;

    const int tid = threadIdx.x;
    const int num_m = (M + BM - 1) / BM, num_n = N_DIM / BN;
    const int pid = blockIdx.x, per_group = GROUP_M * num_n;
    const int first_m = (pid / per_group) * GROUP_M, gsize = min(num_m - first_m, GROUP_M);
    const int pid_m = first_m + (pid % per_group) % gsize, pid_n = (pid % per_group) / gsize;
    const int m0 = pid_m * BM, n0 = pid_n * BN, nb = n0 / 128;

    auto load = [&](int kb) {
        const int s = kb % STAGES;
        const uint32_t sA = base + s * STAGE_BYTES, sB = sA + A_BYTES;
        const uint32_t sS = base + STAGES * STAGE_BYTES + s * BM * 4;
#pragma unroll
        for (int it = 0; it < BM * 8 / NT; ++it) {   // 16-byte chunks: BM * 8 / NT = 4 a thread
            const int i = it * NT + tid, r = i >> 3, c = i & 7;
            const bool ok = m0 + r < M;
            cp_async16(sA + swz(r, c), A + (size_t)(ok ? m0 + r : 0) * K_DIM + kb * 128 + c * 16, ok);
        }
#pragma unroll
        for (int it = 0; it < BN * 8 / NT; ++it) {
            const int i = it * NT + tid, r = i >> 3, c = i & 7;
            cp_async16(sB + swz(r, c), W + (size_t)(n0 + r) * K_DIM + kb * 128 + c * 16, true);
        }
        if (tid < BM) {                               // BM <= NT
            const bool ok = m0 + tid < M;
            cp_async4(sS + tid * 4, SA + (size_t)(ok ? m0 + tid : 0) * KB + kb, ok);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KB) load(s);
        cp_async_commit();
    }

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int row0 = wg * 64 + warp * 16 + (lane >> 2);   // tile row of d[i] with (i/2)&1 == 0
    float acc[BN / 2], part[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = part[i] = 0.f;

#pragma unroll 1
    for (int kb = 0; kb < KB; ++kb) {
        cp_async_wait<STAGES - 2>();
        // this thread's cp.async writes (generic proxy) -> visible to the wgmma reads (async proxy)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (kb + STAGES - 1 < KB) load(kb + STAGES - 1);
        cp_async_commit();
        const int s = kb % STAGES;
        const uint32_t sA = base + s * STAGE_BYTES + wg * 64 * 128, sB = base + s * STAGE_BYTES + A_BYTES;
        // the weight scale's global load is issued before the wgmmas: its latency hides behind them
        // (after the wait's memory clobber it would be exposed once per K block)
        const float swv = SW[nb * sw_sn + kb * sw_sk];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)   // 32 bytes of K per wgmma; kk = 0 starts a fresh partial
            wgmma_e4m3<BN>(part, smem_desc(sA + kk * 32), smem_desc(sB + kk * 32), kk);
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(part);
        const float* sS = sS_all + s * BM;
        const float s0 = sS[row0] * swv, s1 = sS[row0 + 8] * swv;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = fmaf(part[i], ((i >> 1) & 1) ? s1 : s0, acc[i]);
    }
    cp_async_wait<0>();

#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + j * 8 + (lane & 3) * 2;
        float b0 = 0.f, b1 = 0.f;
#if HAS_BIAS
        b0 = __bfloat162float(bias[col]);
        b1 = __bfloat162float(bias[col + 1]);
#endif
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + row0 + h * 8;
            if (row < M)
                *reinterpret_cast<__nv_bfloat162*>(out + (size_t)row * N_DIM + col) =
                    __floats2bfloat162_rn(acc[4 * j + 2 * h] + b0, acc[4 * j + 2 * h + 1] + b1);
        }
    }
}
