// GEMM / implicit-GEMM mainloops for the trace-driven compiler (solforge/compiler/templates/gemm.py).
//
//   out(b, row, col) = epi( sum_k pro_A(A(b, row, k)) * pro_B(B(b, col, k)) )
//
// The operands are not tensors of a fixed layout: a generated struct P (one per GEMM segment) gives
// element (b, r, k) of each operand as a float (P::load<W>(b, r, k), W = 0 for A, 1 for B: any
// strides, gathers such as im2col with padding, a prologue such as dequant or an elementwise op;
// tails are handled here) and, for operands the 16-byte copy path can take, its base pointer and
// element offset (P::ptr<W>, P::off<W>); P::epi says what to do with each result (alpha, bias,
// activation, residual, casts, several outputs). Transposes and permutes of an operand are its
// offset expression, never a copy.
//
// Two mainloops share that contract:
//  * gemm_mma: fp16/bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), ST-stage shared
//    ring. An operand whose elements are contiguous along K (P::CONTIG<W> == 1) or along its rows
//    (== 2) and whose base/strides are 16-byte aligned at run time (P::vec_ok<W>) is copied with
//    16-byte cp.async (K or row tails zero-filled by the copy's source size); otherwise each thread
//    fetches its elements into registers before the tile's MMAs and stores them after (the loads'
//    latency hides behind the MMAs). Shared tiles are K-major [rows][BK+8] or row-major
//    [BK][rows+8] (the +8 halves = 16 bytes of padding make ldmatrix conflict-free); row-major
//    tiles are read with ldmatrix.trans.
//  * gemm_simt: fp32 operands with fp32 FMA (PyTorch's fp32 matmul does not use TF32), 2-stage
//    register-prefetched shared tiles, TM x TN outer products per thread.
// Split-K: SPLIT > 1 writes fp32 partial tiles to the workspace (every element, so it needs no
// zeroing) and a second kernel (splitk_reduce) sums them in split order and runs the epilogue.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace sfg {

typedef long long i64;

// ---- element conversions -------------------------------------------------------------------------
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__nv_fp8_e4m3 v) { return float(v); }
__device__ __forceinline__ float to_f(__nv_fp8_e5m2 v) { return float(v); }
__device__ __forceinline__ float to_f(signed char v) { return (float)v; }
__device__ __forceinline__ float to_f(unsigned char v) { return (float)v; }
__device__ __forceinline__ float to_f(int v) { return (float)v; }

template <class T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_f<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }
template <> __device__ __forceinline__ __nv_fp8_e5m2 from_f<__nv_fp8_e5m2>(float v) { return __nv_fp8_e5m2(v); }

// ---- PTX wrappers --------------------------------------------------------------------------------
// Without __CUDACC__ (the host C++ emulation of tests and of the compiler's CPU check) each wrapper
// is emulated: shared addresses are offsets into the block's dynamic shared buffer, cp.async is a
// synchronous copy, and the warp-collective ldmatrix / mma exchange their operands through a static
// array between two block barriers (every thread of a block reaches them together: the mainloops'
// control flow around them is uniform).
#if defined(__CUDACC__)
#define SFG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define SFG_LAUNDER(x) asm volatile("" : "+r"(x))
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; `bytes` (0..16) are read, the rest of the 16 destination bytes are zero-filled
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

template <class T> struct MmaKind;
template <> struct MmaKind<__half> { static constexpr bool bf = false; };
template <> struct MmaKind<__nv_bfloat16> { static constexpr bool bf = true; };

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (MmaKind<T>::bf) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}
__device__ __forceinline__ float u2f(unsigned u) { return __uint_as_float(u); }
// tf32: x rounded to 10 mantissa bits (round to nearest, ties away), kept in an fp32 register
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#else  // host emulation
}  // namespace sfg
#include <algorithm>
#include <cstring>
namespace sfg {
using std::max;
using std::min;
static unsigned char sfg_emu_smem[232448] __attribute__((aligned(1024)));
static unsigned sfg_emu_xch[1024][8];
#define SFG_DYN_SMEM(name) unsigned char* name = sfg::sfg_emu_smem
#define SFG_LAUNDER(x) ((void)0)
inline unsigned smem_u32(const void* p) {
    return (unsigned)(static_cast<const unsigned char*>(p) - sfg_emu_smem);
}
inline void cp_async16(unsigned dst, const void* src, int bytes) {
    std::memset(sfg_emu_smem + dst, 0, 16);
    if (bytes > 0) std::memcpy(sfg_emu_smem + dst, src, bytes);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
inline unsigned emu_lane() { return threadIdx.x & 31; }
inline unsigned emu_warp0() { return threadIdx.x & ~31u; }
inline unsigned short emu_b16(unsigned addr) { unsigned short v; std::memcpy(&v, sfg_emu_smem + addr, 2); return v; }
template <bool TRANS>
inline void emu_ldsm(unsigned (&r)[4], unsigned addr) {
    sfg_emu_xch[threadIdx.x][0] = addr;
    __syncthreads();
    const unsigned l = emu_lane(), w0 = emu_warp0();
    for (int i = 0; i < 4; ++i) {
        unsigned lo, hi;
        if (!TRANS) {   // row l/4 of matrix i, elements 2(l%4), +1
            const unsigned row = sfg_emu_xch[w0 + i * 8 + l / 4][0];
            lo = emu_b16(row + (l % 4) * 4);
            hi = emu_b16(row + (l % 4) * 4 + 2);
        } else {        // column l/4 of matrix i, rows 2(l%4), +1
            lo = emu_b16(sfg_emu_xch[w0 + i * 8 + 2 * (l % 4)][0] + (l / 4) * 2);
            hi = emu_b16(sfg_emu_xch[w0 + i * 8 + 2 * (l % 4) + 1][0] + (l / 4) * 2);
        }
        r[i] = lo | (hi << 16);
    }
    __syncthreads();
}
inline void ldsm_x4(unsigned (&r)[4], unsigned addr) { emu_ldsm<false>(r, addr); }
inline void ldsm_x4_t(unsigned (&r)[4], unsigned addr) { emu_ldsm<true>(r, addr); }
template <class T> inline float emu_f(unsigned short bits) { T v; std::memcpy(&v, &bits, 2); return to_f(v); }
template <class T>
inline void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    unsigned* x = sfg_emu_xch[threadIdx.x];
    for (int i = 0; i < 4; ++i) x[i] = a[i];
    x[4] = b0;
    x[5] = b1;
    __syncthreads();
    const unsigned l = emu_lane(), w0 = emu_warp0();
    float A[16][16], B[16][8];
    for (unsigned ln = 0; ln < 32; ++ln) {
        const unsigned* y = sfg_emu_xch[w0 + ln];
        const unsigned g = ln / 4, t = ln % 4;
        for (int i = 0; i < 4; ++i)
            for (int h = 0; h < 2; ++h)   // a0 (g, 2t), a1 (g+8, 2t), a2 (g, 2t+8), a3 (g+8, 2t+8)
                A[g + 8 * (i & 1)][2 * t + h + 8 * (i >> 1)] = emu_f<T>((unsigned short)(y[i] >> (16 * h)));
        for (int i = 0; i < 2; ++i)
            for (int h = 0; h < 2; ++h)   // b0 (k 2t, n g), b1 (k 2t+8, n g)
                B[2 * t + h + 8 * i][g] = emu_f<T>((unsigned short)(y[4 + i] >> (16 * h)));
    }
    const unsigned g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {   // d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
        const unsigned row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float s = 0.f;
        for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
        d[e] += s;
    }
    __syncthreads();
}
inline unsigned to_tf32(float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    return u;
}
inline float u2f(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline void mma1688_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    unsigned* x = sfg_emu_xch[threadIdx.x];
    for (int i = 0; i < 4; ++i) x[i] = a[i];
    x[4] = b0;
    x[5] = b1;
    __syncthreads();
    const unsigned l = emu_lane(), w0 = emu_warp0();
    float A[16][8], B[8][8];
    for (unsigned ln = 0; ln < 32; ++ln) {
        const unsigned* y = sfg_emu_xch[w0 + ln];
        const unsigned g = ln / 4, t = ln % 4;   // a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4)
        A[g][t] = u2f(y[0]);
        A[g + 8][t] = u2f(y[1]);
        A[g][t + 4] = u2f(y[2]);
        A[g + 8][t + 4] = u2f(y[3]);
        B[t][g] = u2f(y[4]);                 // b0 (k t, n g), b1 (k t+4, n g)
        B[t + 4][g] = u2f(y[5]);
    }
    const unsigned g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
        const unsigned row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = 0.f;
        for (int k = 0; k < 8; ++k) acc += A[row][k] * B[k][col];
        d[e] += acc;
    }
    __syncthreads();
}
#endif

// ---- wgmma (sm_90a) -------------------------------------------------------------------------------
// K-major operand tiles of R rows x 64 k (one 128-byte row each), stored with the 128-byte swizzle:
// 16-byte chunk c of row r at byte r*128 + ((c ^ (r & 7)) << 4) of a 1024-aligned tile. Descriptor:
// start >> 4, LBO 1 (unused for swizzled K-major), SBO 64 (1024 bytes between 8-row groups), layout
// 1 = 128-byte swizzle; a k-step of 16 inside the tile advances the start by 32 bytes (the same
// layout and descriptor as kernels_cuda/gemm_wgmma, measured on the H200).
#if defined(__CUDACC__)
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// MN-major operand (transpose bit set; the warp-specialized tier's row-contiguous operands): blocks
// of 64 rows (128 bytes, one swizzle row) x 64 k, k row kk at byte kk*128 of its block, blocks 8192
// bytes apart. PTX's MN-major swizzled strides: LBO = offset between (swizzle bytes / 16) = 8
// 16-byte row groups, i.e. between 64-row blocks (8192 -> 512); SBO = offset between groups of 8 k
// (8 k rows x 128 bytes = 1024 -> 64). A k-step of 16 advances the start by 16 k rows = 2048 bytes.
__device__ __forceinline__ unsigned long long wg_desc_mn(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (512ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// generic-proxy writes (cp.async, st.shared) made visible to the async proxy that wgmma reads through
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// D[64 x N] += A[64 x 16] * B[N x 16]^T, both from shared memory (generated wrappers: every one of
// the N/2 accumulators of a thread is its own asm operand)
template <class T, int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    if constexpr (N == 64) {
        if constexpr (MmaKind<T>::bf) {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "%32, %33, p, 1, 1, %35, %36;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        } else {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "%32, %33, p, 1, 1, %35, %36;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        }
    } else if constexpr (N == 128) {
        if constexpr (MmaKind<T>::bf) {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "%64, %65, p, 1, 1, %67, %68;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        } else {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
            "%64, %65, p, 1, 1, %67, %68;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        }
    } else if constexpr (N == 256) {
        if constexpr (MmaKind<T>::bf) {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
            "%128, %129, p, 1, 1, %131, %132;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        } else {
            asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
            "%128, %129, p, 1, 1, %131, %132;\n}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "l"(da), "l"(db), "n"(1), "n"(TA), "n"(TB)
            : "memory");
        }
    } else {
        static_assert(N == 64 || N == 128 || N == 256, "wgmma N: 64, 128 or 256");
    }
}
#else  // host emulation: synchronous, each thread computes its own accumulators from shared memory
inline unsigned long long wg_desc(unsigned addr) { return addr; }
inline unsigned long long wg_desc_mn(unsigned addr) { return addr; }
inline void wg_fence() {}
inline void wg_commit() {}
template <int N> inline void wg_wait() {}
inline void fence_proxy_async() {}
template <int R> inline void fence_acc(float (&)[R]) {}
// element k (< 16) of row r of a K-major 128B-swizzled operand whose descriptor start is `start`
template <class T> inline float wg_elem(unsigned start, int r, int k) {
    unsigned a = start + r * 128 + k * 2;
    a ^= ((a >> 7) & 7u) << 4;
    unsigned short bits;
    std::memcpy(&bits, sfg_emu_smem + a, 2);
    return emu_f<T>(bits);
}
// element k (< 16) of row r of an MN-major 128B-swizzled operand (wgmma transpose bit set): blocks
// of 64 rows WS_MN_BLOCK bytes apart (the descriptor's LBO), k rows of 128 bytes (SBO: 8 k rows)
template <class T> inline float wg_elem_mn(unsigned start, int r, int k) {
    unsigned a = start + (r / 64) * 8192 + k * 128 + (r % 64) * 2;
    a ^= ((a >> 7) & 7u) << 4;
    unsigned short bits;
    std::memcpy(&bits, sfg_emu_smem + a, 2);
    return emu_f<T>(bits);
}
template <class T, int N, int TA = 0, int TB = 0>
inline void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    const unsigned t = threadIdx.x & 127, w = t >> 5, l = t & 31;
    for (int i = 0; i < N / 2; ++i) {
        const int row = 16 * w + l / 4 + 8 * ((i / 2) & 1), col = 8 * (i / 4) + 2 * (l % 4) + (i & 1);
        float s = 0.f;
        for (int k = 0; k < 16; ++k)
            s += (TA ? wg_elem_mn<T>((unsigned)da, row, k) : wg_elem<T>((unsigned)da, row, k)) *
                 (TB ? wg_elem_mn<T>((unsigned)db, col, k) : wg_elem<T>((unsigned)db, col, k));
        d[i] += s;
    }
}
#endif

// ---- mbarriers (the warp-specialized wgmma tier's stage ring) -------------------------------------
#if defined(__CUDACC__)
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n.reg .pred P;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\n"
        "selp.u32 %0, 1, 0, P;\n}\n"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
// Every legitimate wait lasts about a k-tile (microseconds); one past 2 s is a lost phase: trap, so
// the launch fails with an error instead of hanging the GPU (as kernels_cuda/gemm_wgmma does).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    if (mbar_try(bar, parity)) return;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (!mbar_try(bar, parity)) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > 2000000000ull) __trap();
    }
}
// arrives on `bar` once every cp.async this thread issued so far has landed (noinc: the arrival is one
// of the barrier's expected count)
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
template <int R> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R)); }
template <int R> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R)); }
#else  // host emulation: a phase bit and a pending count per barrier address, under one lock
}  // namespace sfg
#include <map>
#include <mutex>
#include <thread>
namespace sfg {
struct EmuBar { int count, pending; unsigned phase; };
static std::map<unsigned, EmuBar> sfg_emu_bars;
static std::mutex sfg_emu_bar_mu;
inline void mbar_init(unsigned bar, unsigned count) {
    std::lock_guard<std::mutex> g(sfg_emu_bar_mu);
    sfg_emu_bars[bar] = EmuBar{(int)count, (int)count, 0u};
}
inline void mbar_arrive(unsigned bar) {
    std::lock_guard<std::mutex> g(sfg_emu_bar_mu);
    EmuBar& b = sfg_emu_bars.at(bar);
    if (--b.pending == 0) {
        b.pending = b.count;
        b.phase ^= 1u;
    }
}
inline bool mbar_try(unsigned bar, unsigned parity) {   // the phase of parity `parity` has completed
    std::lock_guard<std::mutex> g(sfg_emu_bar_mu);
    return sfg_emu_bars.at(bar).phase != parity;
}
inline void mbar_wait(unsigned bar, unsigned parity) {
    while (!mbar_try(bar, parity)) std::this_thread::yield();
}
inline void cp_async_arrive_noinc(unsigned bar) { mbar_arrive(bar); }   // copies are synchronous here
inline void cp_async_wait_all() {}
template <int R> inline void setmaxnreg_inc() {}
template <int R> inline void setmaxnreg_dec() {}
#endif

// ---- tile coordinates ----------------------------------------------------------------------------
// blockIdx.x -> (batch, split, m-tile, n-tile). Within one (batch, split), groups of GROUP m-tiles
// sweep all n-tiles, so the A and B tiles a wave of CTAs reads are reused from L2.
struct Tile {
    i64 b;
    int split, m0, n0;
};
template <int BM, int BN, int SPLIT>
__device__ __forceinline__ Tile tile_at(int M, int N, i64 bid) {
    constexpr int GROUP = 8;
    const int mt = (M + BM - 1) / BM, nt = (N + BN - 1) / BN;
    const i64 per = (i64)mt * nt;
    const i64 bs = bid / per;
    int in = (int)(bid - bs * per);
    const int g = in / (GROUP * nt);
    const int first = g * GROUP;
    const int gsize = min(mt - first, GROUP);
    in -= g * GROUP * nt;
    Tile t;
    t.b = bs / SPLIT;
    t.split = (int)(bs % SPLIT);
    t.m0 = (first + in % gsize) * BM;
    t.n0 = (in / gsize) * BN;
    return t;
}
template <int BM, int BN, int SPLIT>
__device__ __forceinline__ Tile tile_of(int M, int N) {
    return tile_at<BM, BN, SPLIT>(M, N, (i64)blockIdx.x);
}

// k range [kb, ke) of split `s`: whole BK tiles per split, the last one shorter
template <int BK, int SPLIT>
__device__ __forceinline__ void split_range(int K, int s, int& kb, int& ke) {
    const int per = ((K + SPLIT - 1) / SPLIT + BK - 1) / BK * BK;
    kb = min(K, s * per);
    ke = min(K, kb + per);
}

// ---- one operand's tile loader (mma mainloop) ----------------------------------------------------
// W: 0 = A (rows along M), 1 = B (rows along N). R rows x BK k per stage. KS: shared tile K-major.
template <class P, class T, int W, int R, int BK, int NT, bool KS>
struct OperandTile {
    static constexpr int PITCH = KS ? BK + 8 : R + 8;        // elements per shared row
    static constexpr int ELEMS = R * BK;
    static constexpr int STAGE = R * (BK + 8) > BK * (R + 8) ? R * (BK + 8) : BK * (R + 8);
    static constexpr int EPT = ELEMS / NT;                   // elements per thread (register path)
    static_assert(ELEMS % NT == 0, "tile elements must divide over the threads");

    // 16-byte cp.async chunks of 8 elements; KS: along k (P::CONTIG == 1), else along rows (== 2)
    __device__ __forceinline__ static void issue(const P& p, T* s, i64 b, int row0, int rows, int k0, int ke) {
        const T* base = p.template ptr<W>();
        const int tid = threadIdx.x;
        if constexpr (KS) {
            constexpr int CPR = BK / 8;
#pragma unroll
            for (int j = 0; j < (R * CPR + NT - 1) / NT; ++j) {
                const int i = tid + j * NT;
                if ((R * CPR) % NT != 0 && i >= R * CPR) break;
                const int r = i / CPR, c = i % CPR;
                const int gr = row0 + r, gk = k0 + c * 8;
                const int n = gr < rows ? min(max(ke - gk, 0), 8) : 0;
                const T* src = n > 0 ? base + p.template off<W>(b, gr, gk) : base;
                cp_async16(smem_u32(s + r * PITCH + c * 8), src, n * 2);
            }
        } else {
            constexpr int CPK = R / 8;
#pragma unroll
            for (int j = 0; j < (BK * CPK + NT - 1) / NT; ++j) {
                const int i = tid + j * NT;
                if ((BK * CPK) % NT != 0 && i >= BK * CPK) break;
                const int kr = i / CPK, c = i % CPK;
                const int gr = row0 + c * 8, gk = k0 + kr;
                const int n = gk < ke ? min(max(rows - gr, 0), 8) : 0;
                const T* src = n > 0 ? base + p.template off<W>(b, gr, gk) : base;
                cp_async16(smem_u32(s + kr * PITCH + c * 8), src, n * 2);
            }
        }
    }

    // register path: any element type, any offset function, predicate and prologue
    __device__ __forceinline__ static void fetch(const P& p, T (&v)[EPT], i64 b, int row0, int rows, int k0, int ke) {
        // laundered: otherwise the compiler hoists every element's address, predicate and prologue
        // terms out of the k loop and keeps them live across it (255 registers and spills)
        int tid = threadIdx.x;
        SFG_LAUNDER(tid);
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = tid + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }  // threads along rows
            else { r = i / BK; kk = i % BK; }                                       // threads along k
            const int gr = row0 + r, gk = k0 + kk;
            v[j] = from_f<T>(gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f);
        }
    }
    // the fallback of a cp.async operand whose run-time alignment check failed: one element at a
    // time, straight to shared memory (rare; kept small so it costs no registers elsewhere)
    __device__ __forceinline__ static void copy_slow(const P& p, T* s, i64 b, int row0, int rows, int k0, int ke) {
#pragma unroll 1
        for (int i = threadIdx.x; i < ELEMS; i += NT) {
            int r, kk;
            if constexpr (KS) { r = i / BK; kk = i % BK; }
            else { kk = i / R; r = i % R; }
            const int gr = row0 + r, gk = k0 + kk;
            s[KS ? r * PITCH + kk : kk * PITCH + r] = from_f<T>(gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f);
        }
    }
    __device__ __forceinline__ static void store(const T (&v)[EPT], T* s) {
        const int tid = threadIdx.x;
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = tid + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }
            else { r = i / BK; kk = i % BK; }
            s[KS ? r * PITCH + kk : kk * PITCH + r] = v[j];
        }
    }
};

// ---- fp16/bf16 tensor-core mainloop ----------------------------------------------------------------
template <class P, class T, int BM, int BN, int BK, int WM, int WN, int ST, int SPLIT>
__device__ __forceinline__ void gemm_mma(const P& p, unsigned char* smem_raw, float* ws) {
    constexpr int NT = 32 * WM * WN;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0 && WTM % 16 == 0, "warp tile");
    static_assert(BK % 16 == 0 && ST >= 2, "BK multiple of 16, ST >= 2");
    constexpr bool KSA = P::template smem_kmajor<0>(), KSB = P::template smem_kmajor<1>();
    typedef OperandTile<P, T, 0, BM, BK, NT, KSA> TA;
    typedef OperandTile<P, T, 1, BN, BK, NT, KSB> TB;

    const int M = p.M, N = p.N, K = p.K;
    const Tile t = tile_of<BM, BN, SPLIT>(M, N);
    if (t.b >= p.batch) return;  // a grid sized for M's upper bound, M a count read on the device
    int kb, ke;
    split_range<BK, SPLIT>(K, t.split, kb, ke);
    const int KT = (ke - kb + BK - 1) / BK;

    T* sA = reinterpret_cast<T*>(smem_raw);
    T* sB = sA + ST * TA::STAGE;
    const bool va = P::template vec<0>() && p.template vec_ok<0>(t.b);
    const bool vb = P::template vec<1>() && p.template vec_ok<1>(t.b);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;

    // Register path: for an operand that cannot take cp.async at all (P::vec false) the loads of
    // stage kt+ST-1 are issued before the MMAs of stage kt and stored after them (their latency
    // hides behind the MMAs); for a cp.async operand whose run-time alignment check failed, the
    // loads are stored at once (correct, slower: nothing live across the MMAs costs registers).
    constexpr bool PA = !P::template vec<0>(), PB = !P::template vec<1>();
    T ra[PA ? TA::EPT : 1], rb[PB ? TB::EPT : 1];
    auto issue = [&](int stage, int kt) {
        const int k0 = kb + kt * BK;
        if constexpr (!PA) {
            if (va) TA::issue(p, sA + stage * TA::STAGE, t.b, t.m0, M, k0, ke);
            else TA::copy_slow(p, sA + stage * TA::STAGE, t.b, t.m0, M, k0, ke);
        }
        if constexpr (!PB) {
            if (vb) TB::issue(p, sB + stage * TB::STAGE, t.b, t.n0, N, k0, ke);
            else TB::copy_slow(p, sB + stage * TB::STAGE, t.b, t.n0, N, k0, ke);
        }
    };
    auto fetch = [&](int kt) {
        const int k0 = kb + kt * BK;
        if constexpr (PA) TA::fetch(p, ra, t.b, t.m0, M, k0, ke);
        if constexpr (PB) TB::fetch(p, rb, t.b, t.n0, N, k0, ke);
    };
    auto store = [&](int stage) {
        if constexpr (PA) TA::store(ra, sA + stage * TA::STAGE);
        if constexpr (PB) TB::store(rb, sB + stage * TB::STAGE);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < KT) {
            issue(s, s);
            fetch(s);
            store(s);
        }
        cp_async_commit();
    }

#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<ST - 2>();
        __syncthreads();  // stage kt landed for every thread; stage kt-1 is free again
        const int nk = kt + ST - 1;
        if (nk < KT) {
            issue(nk % ST, nk);
            fetch(nk);
        }
        cp_async_commit();

        const T* a = sA + (kt % ST) * TA::STAGE;
        const T* bt = sB + (kt % ST) * TB::STAGE;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                if constexpr (KSA) {
                    const int r = wm0 + mi * 16 + (lane & 15), c = kk * 16 + (lane >> 4) * 8;
                    ldsm_x4(af[mi], smem_u32(a + r * TA::PITCH + c));
                } else {
                    const int k = kk * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int m = wm0 + mi * 16 + ((lane >> 3) & 1) * 8;
                    ldsm_x4_t(af[mi], smem_u32(a + k * TA::PITCH + m));
                }
            }
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                const int j = lane >> 3;
                unsigned q[4];
                if constexpr (KSB) {
                    const int n = wn0 + nj * 16 + (j >> 1) * 8 + (lane & 7), c = kk * 16 + (j & 1) * 8;
                    ldsm_x4(q, smem_u32(bt + n * TB::PITCH + c));
                } else {
                    const int n = wn0 + nj * 16 + (j >> 1) * 8, k = kk * 16 + (j & 1) * 8 + (lane & 7);
                    ldsm_x4_t(q, smem_u32(bt + k * TB::PITCH + n));
                }
                bf[2 * nj][0] = q[0];
                bf[2 * nj][1] = q[1];
                bf[2 * nj + 1][0] = q[2];
                bf[2 * nj + 1][1] = q[3];
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) mma16816<T>(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
        if (nk < KT) store(nk % ST);  // after the MMAs: the register loads had their time
    }
    cp_async_wait<0>();

    const int g = lane >> 2, q2 = (lane & 3) * 2;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = t.m0 + wm0 + mi * 16 + g + 8 * (e >> 1);
                const int col = t.n0 + wn0 + ni * 8 + q2 + (e & 1);
                if (row < M && col < N) {
                    if (SPLIT == 1)
                        p.epi(acc[mi][ni][e], t.b, row, col);
                    else
                        ws[(((i64)t.split * p.batch + t.b) * M + row) * N + col] = acc[mi][ni][e];
                }
            }
}

// ---- fp16/bf16 wgmma mainloop (sm_90a) -----------------------------------------------------------
// Both operands K-major with 16-byte copies (P::contig == 1, P::vec), tiles BM (64: one consumer
// warpgroup, 128: two) x BN (64/128/256) x 64 k, ST stages (>= 3) of cp.async into 128B-swizzled
// shared memory; every thread loads and every warpgroup multiplies (no producer warpgroup: tails
// and strides stay in the copy path, and each k-tile needs only the block barrier). One wgmma group
// stays in flight while the next k-tile is prepared, so a stage is refilled two k-tiles after it
// was read (prefetch distance ST - 2). An operand whose run-time alignment check fails is written
// element by element into the same layout.
template <class P, class T, int W, int R, int NT>
__device__ __forceinline__ void wg_load(const P& p, unsigned char* sgen, unsigned dst0, bool vec, i64 b, int row0,
                                        int rows, int k0, int ke) {
    const int tid = threadIdx.x;
    if (vec) {
        const T* base = p.template ptr<W>();
#pragma unroll
        for (int j = 0; j < (R * 8 + NT - 1) / NT; ++j) {
            const int i = tid + j * NT;
            if ((R * 8) % NT != 0 && i >= R * 8) break;
            const int r = i >> 3, c = i & 7;
            const int gr = row0 + r, gk = k0 + c * 8;
            const int n = gr < rows ? min(max(ke - gk, 0), 8) : 0;
            const T* src = n > 0 ? base + p.template off<W>(b, gr, gk) : base;
            cp_async16(dst0 + r * 128 + ((c ^ (r & 7)) << 4), src, n * 2);
        }
    } else {
#pragma unroll 1
        for (int i = tid; i < R * 64; i += NT) {
            const int r = i >> 6, kk = i & 63, c = kk >> 3;
            const int gr = row0 + r, gk = k0 + kk;
            const T v = from_f<T>(gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f);
            *reinterpret_cast<T*>(sgen + dst0 + r * 128 + ((c ^ (r & 7)) << 4) + (kk & 7) * 2) = v;
        }
    }
}

// One consumer warpgroup's m64nN fp32 accumulator (wgmma's register layout: thread tw of the
// warpgroup holds rows warp*16 + lane/4 (+8) and column pairs 2*(lane%4) + 8j) to the epilogue, or to
// split-K's workspace; the "wgmma" and "wgws" tiers share it.
template <int SPLIT, class P, int R>
__device__ __forceinline__ void store_wg_acc(const P& p, float* ws, const Tile& t, const float (&acc)[R],
                                             int wg, int tw) {
    const int M = p.M, N = p.N, warp = tw >> 5, lane = tw & 31;
    const int row0 = t.m0 + wg * 64 + warp * 16 + (lane >> 2);
    const int col0 = t.n0 + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int row = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
        if (row < M && col < N) {
            if (SPLIT == 1)
                p.epi(acc[i], t.b, row, col);
            else
                ws[(((i64)t.split * p.batch + t.b) * M + row) * N + col] = acc[i];
        }
    }
}

template <class P, class T, int BM, int BN, int ST, int SPLIT>
__device__ __forceinline__ void gemm_wgmma(const P& p, unsigned char* smem_raw, float* ws) {
    constexpr int BK = 64, NWG = BM / 64, NT = 128 * NWG, R = BN / 2;
    constexpr int STAGE = (BM + BN) * 128;
    static_assert(BM == 64 || BM == 128, "BM: 64 or 128 (one or two consumer warpgroups)");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN: 64, 128 or 256");
    static_assert(ST >= 3, "ST >= 3: one wgmma group in flight while a stage is refilled");
    static_assert(P::template contig<0>() == 1 && P::template contig<1>() == 1 && P::template vec<0>() &&
                  P::template vec<1>(), "the wgmma tier takes K-major 16-byte-copyable operands");
    const int M = p.M, N = p.N, K = p.K;
    const Tile t = tile_of<BM, BN, SPLIT>(M, N);
    if (t.b >= p.batch) return;  // a grid sized for M's upper bound, M a count read on the device
    int kb, ke;
    split_range<BK, SPLIT>(K, t.split, kb, ke);
    const int KT = (ke - kb + BK - 1) / BK;
    // 128B swizzle: every tile on a 1024-byte boundary (the shared base rounded up at run time)
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char* sgen = smem_raw - raw;   // generic address of shared offset 0 (+ shared address)
    const bool va = p.template vec_ok<0>(t.b), vb = p.template vec_ok<1>(t.b);
    const int wg = threadIdx.x >> 7;

    auto load = [&](int stage, int kt) {
        const int k0 = kb + kt * BK;
        const unsigned sa = base + stage * STAGE;
        wg_load<P, T, 0, BM, NT>(p, sgen, sa, va, t.b, t.m0, M, k0, ke);
        wg_load<P, T, 1, BN, NT>(p, sgen, sa + BM * 128, vb, t.b, t.n0, N, k0, ke);
    };

    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.f;

#pragma unroll
    for (int s = 0; s < ST - 2; ++s) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<ST - 3>();   // this thread's copies of k-tile kt landed
        fence_proxy_async();       // ... and are visible to wgmma's async proxy
        __syncthreads();           // everyone's; and every wgmma of k-tile kt-2 has completed
        const int nk = kt + ST - 2;
        if (nk < KT) load(nk % ST, nk);   // the stage k-tile kt-2 used
        cp_async_commit();
        const unsigned sa = base + (kt % ST) * STAGE + wg * 64 * 128;
        const unsigned sb = base + (kt % ST) * STAGE + BM * 128;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) wgmma_ss<T, BN>(acc, wg_desc(sa + kk * 32), wg_desc(sb + kk * 32));
        wg_commit();
        wg_wait<1>();              // k-tile kt-1's group is done: its stage may be refilled next time
    }
    wg_wait<0>();
    fence_acc(acc);
    cp_async_wait<0>();

    store_wg_acc<SPLIT>(p, ws, t, acc, wg, threadIdx.x & 127);
}

// ---- warp-specialized wgmma mainloop (sm_90a), tier "wgws" ------------------------------------------
// The Hopper design of kernels_cuda/gemm_wgmma (there: 0.8-0.9x cuBLAS at large M) for this
// compiler's operand contract: warpgroup 0 is the producer (128 threads issuing 16-byte cp.async
// into 128B-swizzled stages, each thread's completion signalled on the stage's full barrier with
// cp.async.mbarrier.arrive.noinc), warpgroups 1..NWG the consumers (NWG = BM / 64, each owning 64 rows
// of the BM x BN tile and issuing m64nBNk16 wgmmas). Consumers keep one wgmma group in flight
// (wait_group 1) and release a stage on its empty barrier once the group that read it completed,
// so loads, MMAs and the next stage's refill all overlap; no block-wide barrier in the main loop.
// Operands are K-major (P::contig == 1: rows of 64 k, as the "wgmma" tier) or MN-major
// (contig == 2, e.g. X[K, N] of x @ X or a transposed A): 64-row blocks of 64 k rows, read by wgmma
// with its transpose bit (wg_desc_mn), so every 16-bit layout of a plain strided operand takes
// this tier. Tails: rows past M/N and k past the split's end are zero-filled by the copy's source
// size (MN-major: 8-row chunks, so a ragged M/N tail is a partial chunk). A failing run-time
// alignment check (P::vec_ok) writes the operand element by element into the same layout.
// Tiles: the grid may be smaller than the tile count (persistent CTAs: tile blockIdx.x, +gridDim.x,
// ...); producer and consumers walk the same tiles and carry the ring position from one to the
// next, so the producer fills the next tile's stages while the consumers run the epilogue.
// REG: the block is 384 threads at the kernel's launch bound (168 registers at entry): the producer
// gives registers back (setmaxnreg 40) and the consumers take them (232) for 128 accumulators.
template <class P, class T, int W, int R>
__device__ __forceinline__ void ws_load(const P& p, unsigned char* sgen, unsigned dst0, bool vec, i64 b, int row0,
                                        int rows, int k0, int ke, int pt) {
    const T* base = p.template ptr<W>();
    if constexpr (P::template contig<W>() == 1) {   // K-major: row r = 128 bytes of 64 k
        if (vec) {
            const int c = pt & 7, r0 = pt >> 3;
            const int gk = k0 + c * 8;
            const int nk = min(max(ke - gk, 0), 8);
#pragma unroll
            for (int j = 0; j < R / 16; ++j) {
                const int r = r0 + 16 * j, gr = row0 + r;
                const int n = gr < rows ? nk : 0;
                const T* src = n > 0 ? base + p.template off<W>(b, gr, gk) : base;
                cp_async16(dst0 + r * 128 + ((c ^ (r & 7)) << 4), src, n * 2);
            }
        } else {
#pragma unroll 1
            for (int i = pt; i < R * 64; i += 128) {
                const int r = i >> 6, kk = i & 63, c = kk >> 3;
                const int gr = row0 + r, gk = k0 + kk;
                const T v = from_f<T>(gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f);
                *reinterpret_cast<T*>(sgen + dst0 + r * 128 + ((c ^ (r & 7)) << 4) + (kk & 7) * 2) = v;
            }
        }
    } else {   // MN-major: block of 64 rows, k row kk = 128 bytes of 64 consecutive rows
        if (vec) {
            const int c = pt & 7, kk0 = pt >> 3;
#pragma unroll
            for (int blk = 0; blk < R / 64; ++blk) {
                const int gr = row0 + blk * 64 + c * 8;
                const int nr = min(max(rows - gr, 0), 8);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int kk = kk0 + 16 * j, gk = k0 + kk;
                    const int n = gk < ke ? nr : 0;
                    const T* src = n > 0 ? base + p.template off<W>(b, gr, gk) : base;
                    cp_async16(dst0 + blk * 8192 + kk * 128 + ((c ^ (kk & 7)) << 4), src, n * 2);
                }
            }
        } else {
#pragma unroll 1
            for (int i = pt; i < R * 64; i += 128) {
                const int r = i % R, kk = i / R, c = (r & 63) >> 3;
                const int gr = row0 + r, gk = k0 + kk;
                const T v = from_f<T>(gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f);
                *reinterpret_cast<T*>(sgen + dst0 + (r >> 6) * 8192 + kk * 128 + ((c ^ (kk & 7)) << 4) + (r & 7) * 2) = v;
            }
        }
    }
}

#ifndef SFG_WS_PREG
#define SFG_WS_PREG 40
#define SFG_WS_CREG 232
#endif
template <class P, class T, int BM, int BN, int ST, int SPLIT, bool REG>
__device__ __forceinline__ void gemm_wgws(const P& p, unsigned char* smem_raw, float* ws) {
    constexpr int BK = 64, NWG = BM / 64, R = BN / 2;
    constexpr int STAGE = (BM + BN) * 128;
    constexpr int TA = P::template contig<0>() == 2, TB = P::template contig<1>() == 2;
    static_assert(BM == 64 || BM == 128, "BM: 64 or 128 (one or two consumer warpgroups)");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN: 64, 128 or 256");
    static_assert(ST >= 2, "ST >= 2");
    static_assert(P::template contig<0>() != 0 && P::template contig<1>() != 0 && P::template vec<0>() &&
                  P::template vec<1>(), "the wgws tier takes 16-byte-copyable unit-stride operands");
    const int M = p.M, N = p.N, K = p.K;
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;   // 128B swizzle: 1024-aligned tiles
    unsigned char* sgen = smem_raw - raw;
    const unsigned full0 = base + ST * STAGE, empty0 = full0 + 8 * ST;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; ++s) {
            mbar_init(full0 + 8 * s, 128);
            mbar_init(empty0 + 8 * s, 128 * NWG);
        }
    }
    __syncthreads();
    const int mt = (M + BM - 1) / BM, nt = (N + BN - 1) / BN;
    const i64 tiles = (i64)mt * nt * p.batch * SPLIT;
    int stage = 0;
    unsigned ph = 0;
    if (threadIdx.x < 128) {   // producer warpgroup
        if (REG) setmaxnreg_dec<SFG_WS_PREG>();
        const int pt = threadIdx.x;
#pragma unroll 1
        for (i64 tix = blockIdx.x; tix < tiles; tix += gridDim.x) {
            const Tile t = tile_at<BM, BN, SPLIT>(M, N, tix);
            int kb, ke;
            split_range<BK, SPLIT>(K, t.split, kb, ke);
            const int KT = (ke - kb + BK - 1) / BK;
            const bool va = p.template vec_ok<0>(t.b), vb = p.template vec_ok<1>(t.b);
#pragma unroll 1
            for (int kt = 0; kt < KT; ++kt) {
                mbar_wait(empty0 + 8 * stage, ph ^ 1u);
                const unsigned sa = base + stage * STAGE;
                const int k0 = kb + kt * BK;
                // laundered: else the row addresses of every copy are hoisted out of the k loop and
                // spill (the producer runs on 40 registers)
                int ptl = pt;
                SFG_LAUNDER(ptl);
                ws_load<P, T, 0, BM>(p, sgen, sa, va, t.b, t.m0, M, k0, ke, ptl);
                ws_load<P, T, 1, BN>(p, sgen, sa + BM * 128, vb, t.b, t.n0, N, k0, ke, ptl);
                if (va && vb) {
                    cp_async_arrive_noinc(full0 + 8 * stage);
                } else {   // element stores (a misaligned operand): ordered before a plain arrive
                    cp_async_wait_all();
                    mbar_arrive(full0 + 8 * stage);
                }
                if (++stage == ST) { stage = 0; ph ^= 1u; }
            }
        }
        cp_async_wait_all();
        return;
    }
    if (REG) setmaxnreg_inc<SFG_WS_CREG>();
    const int ct = threadIdx.x - 128, wg = ct >> 7;
    const int tw = ct & 127;
#pragma unroll 1
    for (i64 tix = blockIdx.x; tix < tiles; tix += gridDim.x) {
        const Tile t = tile_at<BM, BN, SPLIT>(M, N, tix);
        int kb, ke;
        split_range<BK, SPLIT>(K, t.split, kb, ke);
        const int KT = (ke - kb + BK - 1) / BK;
        float acc[R];
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] = 0.f;
        int prev = 0;
#pragma unroll 1
        for (int kt = 0; kt < KT; ++kt) {
            mbar_wait(full0 + 8 * stage, ph);
            fence_proxy_async();   // cp.async / st.shared wrote through the generic proxy
            const unsigned sa = base + stage * STAGE + wg * 8192;   // this warpgroup's 64 rows of A
            const unsigned sb = base + stage * STAGE + BM * 128;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                const unsigned long long da = TA ? wg_desc_mn(sa + kk * 2048) : wg_desc(sa + kk * 32);
                const unsigned long long db = TB ? wg_desc_mn(sb + kk * 2048) : wg_desc(sb + kk * 32);
                wgmma_ss<T, BN, TA, TB>(acc, da, db);
            }
            wg_commit();
            if (kt > 0) {   // k-tile kt-1's group is done: its stage may be refilled
                wg_wait<1>();
                mbar_arrive(empty0 + 8 * prev);
            }
            prev = stage;
            if (++stage == ST) { stage = 0; ph ^= 1u; }
        }
        wg_wait<0>();
        fence_acc(acc);
        if (KT > 0) mbar_arrive(empty0 + 8 * prev);
        store_wg_acc<SPLIT>(p, ws, t, acc, wg, tw);
    }
}

// ---- fp32 operands on tensor cores: TF32 (PASSES 1) or 3xTF32 (PASSES 3) -------------------------
// Each fp32 operand element x = big + small with big = tf32(x), small = tf32(x - big); 3xTF32 sums
// small*big + big*small + big*big (the small*small term is below fp32's last bit), which keeps
// fp32-level accuracy at tensor-core speed; 1 pass is plain TF32 (what cuDNN uses for fp32
// convolutions by default). Tiles K-major [rows][BK + 4] floats (fragment reads conflict-free),
// filled through registers (every fp32 operand layout), mma.sync m16n8k8.
// The mma's add of its products to C is not fp32 round-to-nearest: the terms are aligned to the
// largest one and the sum truncated (round toward zero), a bias of up to an ulp of C per mma. With
// all of K chained through one accumulator (3 mma per k-step, C growing like sqrt(k)) the bias made
// 3xTF32's error 2.9e-3 at M=N=K=4096 on the H200 (randn * 0.5 operands; plain TF32 2.6e-2), where
// the same split with fp32 adds is ~1e-4; an emulation of that rounding (2 bits kept below the
// largest term's last bit, then round toward zero) reproduces the error and the share of elements
// past the fp32 tolerance. So 3xTF32 sums each k-step's products in a fresh fragment and adds that
// to the accumulator in fp32: the emulated error is then that of the fp32 adds.
template <class P, int W, int R, int BK, int NT>
struct F32Tile {
    static constexpr int PITCH = BK + 4;
    static constexpr int EPT = R * BK / NT;
    static_assert((R * BK) % NT == 0, "tile elements must divide over the threads");
    __device__ __forceinline__ static void fetch(const P& p, float (&v)[EPT], i64 b, int row0, int rows, int k0, int ke) {
        int tid = threadIdx.x;
        SFG_LAUNDER(tid);
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = tid + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }
            else { r = i / BK; kk = i % BK; }
            const int gr = row0 + r, gk = k0 + kk;
            v[j] = gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f;
        }
    }
    __device__ __forceinline__ static void store(const float (&v)[EPT], float* s) {
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = threadIdx.x + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }
            else { r = i / BK; kk = i % BK; }
            s[r * PITCH + kk] = v[j];
        }
    }
};

template <class P, int BM, int BN, int BK, int WM, int WN, int ST, int SPLIT, int PASSES>
__device__ __forceinline__ void gemm_tf32(const P& p, unsigned char* smem_raw, float* ws) {
    constexpr int NT = 32 * WM * WN;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(MI >= 1 && NI >= 1 && WTM % 16 == 0 && WTN % 8 == 0 && BK % 8 == 0 && ST == 2, "tf32 tiles");
    static_assert(PASSES == 1 || PASSES == 3, "PASSES: 1 (TF32) or 3 (3xTF32)");
    typedef F32Tile<P, 0, BM, BK, NT> TA;
    typedef F32Tile<P, 1, BN, BK, NT> TB;
    const int M = p.M, N = p.N, K = p.K;
    const Tile t = tile_of<BM, BN, SPLIT>(M, N);
    if (t.b >= p.batch) return;  // a grid sized for M's upper bound, M a count read on the device
    int kb, ke;
    split_range<BK, SPLIT>(K, t.split, kb, ke);
    const int KT = (ke - kb + BK - 1) / BK;
    float* sA = reinterpret_cast<float*>(smem_raw);
    float* sB = sA + 2 * BM * TA::PITCH;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    const int g = lane >> 2, q = lane & 3;

    float ra[TA::EPT], rb[TB::EPT];
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    if (KT > 0) {
        TA::fetch(p, ra, t.b, t.m0, M, kb, ke);
        TB::fetch(p, rb, t.b, t.n0, N, kb, ke);
        TA::store(ra, sA);
        TB::store(rb, sB);
    }
    __syncthreads();
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < KT;
        if (more) {
            TA::fetch(p, ra, t.b, t.m0, M, kb + (kt + 1) * BK, ke);
            TB::fetch(p, rb, t.b, t.n0, N, kb + (kt + 1) * BK, ke);
        }
        const float* a = sA + cur * BM * TA::PITCH;
        const float* bt = sB + cur * BN * TB::PITCH;
#pragma unroll
        for (int kk = 0; kk < BK / 8; ++kk) {
            unsigned ab[MI][4], as[MI][4], bb[NI][2], bs[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const float* r0 = a + (wm0 + mi * 16 + g) * TA::PITCH + kk * 8 + q;
                const float x[4] = {r0[0], r0[8 * TA::PITCH], r0[4], r0[8 * TA::PITCH + 4]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    ab[mi][e] = to_tf32(x[e]);
                    if (PASSES == 3) as[mi][e] = to_tf32(x[e] - u2f(ab[mi][e]));
                }
            }
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const float* c0 = bt + (wn0 + ni * 8 + g) * TB::PITCH + kk * 8 + q;
                const float x[2] = {c0[0], c0[4]};
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    bb[ni][e] = to_tf32(x[e]);
                    if (PASSES == 3) bs[ni][e] = to_tf32(x[e] - u2f(bb[ni][e]));
                }
            }
            // ni outer: with mi outer ptxas kept more PASSES 3 fragments in flight, 255 registers and
            // spills at 128x128 (174 this way, ptxas -v for sm_90a)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    if (PASSES == 3) {
                        // the three products of this k-step go into a zeroed fragment, added to acc in
                        // fp32 (round to nearest): the tensor cores' own adds truncate (see above), and
                        // chained through acc over all of K that bias outgrew the split's precision
                        float d[4] = {0.f, 0.f, 0.f, 0.f};
                        mma1688_tf32(d, as[mi], bb[ni][0], bb[ni][1]);
                        mma1688_tf32(d, ab[mi], bs[ni][0], bs[ni][1]);
                        mma1688_tf32(d, ab[mi], bb[ni][0], bb[ni][1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[mi][ni][e] += d[e];
                    } else {   // TF32's operand rounding dwarfs the accumulation's: no extra adds
                        mma1688_tf32(acc[mi][ni], ab[mi], bb[ni][0], bb[ni][1]);
                    }
                }
        }
        if (more) {
            TA::store(ra, sA + (cur ^ 1) * BM * TA::PITCH);
            TB::store(rb, sB + (cur ^ 1) * BN * TB::PITCH);
        }
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = t.m0 + wm0 + mi * 16 + g + 8 * (e >> 1);
                const int col = t.n0 + wn0 + ni * 8 + 2 * q + (e & 1);
                if (row < M && col < N) {
                    if (SPLIT == 1)
                        p.epi(acc[mi][ni][e], t.b, row, col);
                    else
                        ws[(((i64)t.split * p.batch + t.b) * M + row) * N + col] = acc[mi][ni][e];
                }
            }
}

// ---- fp32 SIMT mainloop ----------------------------------------------------------------------------
// (BM/TM) x (BN/TN) threads, each a TM x TN block of outputs (rows ty*TM.., cols tx*TN..); shared
// tiles [BK][BM+4] and [BK][BN+4] (k-major: a k-step reads TM and TN consecutive floats).
template <class P, int W, int R, int BK, int NT>
struct SimtTile {
    static constexpr int PITCH = R + 4;
    static constexpr int EPT = R * BK / NT;
    static_assert((R * BK) % NT == 0, "tile elements must divide over the threads");
    __device__ __forceinline__ static void fetch(const P& p, float (&v)[EPT], i64 b, int row0, int rows, int k0, int ke) {
        int tid = threadIdx.x;
        SFG_LAUNDER(tid);  // as in OperandTile::fetch
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = tid + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }
            else { r = i / BK; kk = i % BK; }
            const int gr = row0 + r, gk = k0 + kk;
            v[j] = gr < rows && gk < ke ? p.template load<W>(b, gr, gk) : 0.f;
        }
    }
    __device__ __forceinline__ static void store(const float (&v)[EPT], float* s) {
#pragma unroll
        for (int j = 0; j < EPT; ++j) {
            const int i = threadIdx.x + j * NT;
            int r, kk;
            if constexpr (P::template contig<W>() == 2) { kk = i / R; r = i % R; }
            else { r = i / BK; kk = i % BK; }
            s[kk * PITCH + r] = v[j];
        }
    }
};

template <class P, int BM, int BN, int BK, int TM, int TN, int SPLIT>
__device__ __forceinline__ void gemm_simt(const P& p, unsigned char* smem_raw, float* ws) {
    constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "TM, TN multiples of 4 (float4 shared reads)");
    typedef SimtTile<P, 0, BM, BK, NT> TA;
    typedef SimtTile<P, 1, BN, BK, NT> TB;
    const int M = p.M, N = p.N, K = p.K;
    const Tile t = tile_of<BM, BN, SPLIT>(M, N);
    if (t.b >= p.batch) return;  // a grid sized for M's upper bound, M a count read on the device
    int kb, ke;
    split_range<BK, SPLIT>(K, t.split, kb, ke);
    const int KT = (ke - kb + BK - 1) / BK;
    float* sA = reinterpret_cast<float*>(smem_raw);
    float* sB = sA + 2 * BK * TA::PITCH;
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;

    float ra[TA::EPT], rb[TB::EPT];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    if (KT > 0) {
        TA::fetch(p, ra, t.b, t.m0, M, kb, ke);
        TB::fetch(p, rb, t.b, t.n0, N, kb, ke);
        TA::store(ra, sA);
        TB::store(rb, sB);
    }
    __syncthreads();
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < KT;
        if (more) {
            TA::fetch(p, ra, t.b, t.m0, M, kb + (kt + 1) * BK, ke);
            TB::fetch(p, rb, t.b, t.n0, N, kb + (kt + 1) * BK, ke);
        }
        const float* a = sA + cur * BK * TA::PITCH;
        const float* bt = sB + cur * BK * TB::PITCH;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
#if defined(__CUDACC__)
                const float4 x = *reinterpret_cast<const float4*>(a + k * TA::PITCH + ty * TM + i);
                av[i] = x.x; av[i + 1] = x.y; av[i + 2] = x.z; av[i + 3] = x.w;
#else
                for (int q = 0; q < 4; ++q) av[i + q] = a[k * TA::PITCH + ty * TM + i + q];
#endif
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
#if defined(__CUDACC__)
                const float4 x = *reinterpret_cast<const float4*>(bt + k * TB::PITCH + tx * TN + j);
                bv[j] = x.x; bv[j + 1] = x.y; bv[j + 2] = x.z; bv[j + 3] = x.w;
#else
                for (int q = 0; q < 4; ++q) bv[j + q] = bt[k * TB::PITCH + tx * TN + j + q];
#endif
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) {
            TA::store(ra, sA + (cur ^ 1) * BK * TA::PITCH);
            TB::store(rb, sB + (cur ^ 1) * BK * TB::PITCH);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int row = t.m0 + ty * TM + i, col = t.n0 + tx * TN + j;
            if (row < M && col < N) {
                if (SPLIT == 1)
                    p.epi(acc[i][j], t.b, row, col);
                else
                    ws[(((i64)t.split * p.batch + t.b) * M + row) * N + col] = acc[i][j];
            }
        }
}

// ---- split-K: sum the partials in split order, then the epilogue ----------------------------------
template <class P, int SPLIT>
__device__ __forceinline__ void splitk_reduce(const P& p, const float* ws) {
    const i64 total = (i64)p.batch * p.M * p.N;
    const i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    float s = 0.f;
#pragma unroll 4
    for (int sp = 0; sp < SPLIT; ++sp) s += ws[(i64)sp * total + e];
    const int col = (int)(e % p.N);
    const i64 rest = e / p.N;
    p.epi(s, rest / p.M, (int)(rest % p.M), col);
}

}  // namespace sfg
