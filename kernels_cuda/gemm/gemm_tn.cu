// C[M,N] = A[M,K] @ B[N,K]^T in fp16 with fp32 accumulation (torch.matmul(A, B.T)), sm_80+ mma.sync.
//
// One kernel, three tiers picked at run time by M (the launch grid uses the same rule), so one
// candidate serves decode-sized M = 1 and prefill-sized M = 16k:
//   tier 0 (M <= T0_MAXM): thin tiles (BM 16) and split-K: the problem is reading B once at full
//           bandwidth, so the grid must have enough CTAs and bytes in flight; partial sums go to
//           the workspace and the last CTA of each tile (atomic ticket) adds them and writes C.
//   tier 1 (M <= T1_MAXM): medium tiles, optional split-K.
//   tier 2: 128x128 tiles, grouped rasterization so that A and B tiles are reused from L2.
// Every tier: 4 warps, cp.async multi-stage pipeline into XOR-swizzled shared memory (16-byte
// chunks, conflict-free ldmatrix), m16n8k16 mma.sync.
//
// Problem params: NN, KK (constant N and K); TICKETS (ints before the partial sums in the workspace,
// at least the tile count of any split tier, a multiple of 4). Tier params Tt_{BM,BN,BK,WM,ST,SPLIT} (WM warps along M,
// 4/WM along N; BK 64 or 128; ST pipeline stages) and T0_MAXM, T1_MAXM.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define NTHREADS 128

#ifndef DTYPE
#define DTYPE 1
#endif
#if DTYPE == 2  // bfloat16 operands and output
typedef __nv_bfloat16 half_t;
typedef __nv_bfloat162 half2_t;
#define MMA_TYPE "bf16"
__device__ __forceinline__ half2_t pack2(float a, float b) { return __floats2bfloat162_rn(a, b); }
#else           // float16
typedef __half half_t;
typedef __half2 half2_t;
#define MMA_TYPE "f16"
__device__ __forceinline__ half2_t pack2(float a, float b) { return __floats2half2_rn(a, b); }
#endif

namespace {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // 0 bytes read: the 16 destination bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element offset of 16-byte chunk c of row r in a [rows][BK] half_t tile, XOR-swizzled over 8 chunks.
template <int BK>
__device__ __forceinline__ int swz(int r, int c) {
    return r * BK + ((c ^ (r & 7)) << 3);
}

template <int BM, int BN, int BK, int WM, int ST, int SPLIT, bool GROUPED>
__device__ __forceinline__ void gemm_tier(const half_t* __restrict__ A, const half_t* __restrict__ B,
                                          half_t* __restrict__ C, float* __restrict__ ws, int M,
                                          half_t* smem) {
    constexpr int WN = 4 / WM;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    static_assert(WM * WN == 4 && MI >= 1 && NI >= 2 && NI % 2 == 0, "warp tile");
    static_assert(BK == 64 || BK == 128, "BK must be 64 or 128 (swizzle spans 8 chunks)");
    static_assert(KK % (BK * SPLIT) == 0 && NN % BN == 0, "tiles must divide K and N");
    constexpr int CPR = BK / 8;                 // 16-byte chunks per tile row
    constexpr int KT = KK / SPLIT / BK;         // k-tiles per CTA
    constexpr int N_TILES = NN / BN;

    const int m_tiles = (M + BM - 1) / BM;
    int bid = blockIdx.x;
    const int split = bid / (m_tiles * N_TILES);
    bid -= split * m_tiles * N_TILES;
    int m_tile, n_tile;
    if (GROUPED) {  // groups of 16 M-tiles sweep all N-tiles: A and B tiles stay in L2
        constexpr int G = 16;
        const int per_group = G * N_TILES;
        const int g = bid / per_group;
        const int first = g * G;
        const int gsize = min(m_tiles - first, G);
        const int in = bid - g * per_group;
        m_tile = first + in % gsize;
        n_tile = in / gsize;
    } else {        // M-tiles fastest: CTAs that share a B tile run together
        m_tile = bid % m_tiles;
        n_tile = bid / m_tiles;
    }
    const int m0 = m_tile * BM, n0 = n_tile * BN;
    const int kbeg = split * (KK / SPLIT);

    half_t* sA = smem;
    half_t* sB = smem + ST * BM * BK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;

    auto load_stage = [&](int stage, int kt) {
        const int k0 = kbeg + kt * BK;
        half_t* a = sA + stage * BM * BK;
        half_t* b = sB + stage * BN * BK;
#pragma unroll
        for (int j = 0; j < (BM * CPR + NTHREADS - 1) / NTHREADS; ++j) {
            const int i = tid + j * NTHREADS;
            if ((BM * CPR) % NTHREADS != 0 && i >= BM * CPR) break;
            const int r = i / CPR, c = i % CPR;
            const bool ok = m0 + r < M;
            const half_t* src = A + (size_t)(ok ? m0 + r : 0) * KK + k0 + c * 8;
            cp_async16(smem_u32(a + swz<BK>(r, c)), src, ok);
        }
#pragma unroll
        for (int j = 0; j < (BN * CPR + NTHREADS - 1) / NTHREADS; ++j) {
            const int i = tid + j * NTHREADS;
            if ((BN * CPR) % NTHREADS != 0 && i >= BN * CPR) break;
            const int r = i / CPR, c = i % CPR;
            cp_async16(smem_u32(b + swz<BK>(r, c)), B + (size_t)(n0 + r) * KK + k0 + c * 8, true);
        }
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
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }

#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<ST - 2>();
        __syncthreads();  // stage kt landed for all threads; stage kt-1 is free for reuse
        if (kt + ST - 1 < KT) load_stage((kt + ST - 1) % ST, kt + ST - 1);
        cp_async_commit();

        const half_t* a = sA + (kt % ST) * BM * BK;
        const half_t* b = sB + (kt % ST) * BN * BK;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int r = wm0 + mi * 16 + (lane & 15);
                ldmatrix_x4(af[mi], smem_u32(a + swz<BK>(r, kk * 2 + (lane >> 4))));
            }
#pragma unroll
            for (int nj = 0; nj < NI / 2; ++nj) {
                const int j = lane >> 3;
                const int r = wn0 + nj * 16 + (j >> 1) * 8 + (lane & 7);
                unsigned t[4];
                ldmatrix_x4(t, smem_u32(b + swz<BK>(r, kk * 2 + (j & 1))));
                bf[2 * nj][0] = t[0];
                bf[2 * nj][1] = t[1];
                bf[2 * nj + 1][0] = t[2];
                bf[2 * nj + 1][1] = t[3];
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) mma16816(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
    }
    cp_async_wait<0>();

    const int rq = lane >> 2, cq = (lane & 3) * 2;
    if (SPLIT == 1) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int row = m0 + wm0 + mi * 16 + rq, col = n0 + wn0 + ni * 8 + cq;
                if (row < M)
                    *reinterpret_cast<half2_t*>(C + (size_t)row * NN + col) =
                        pack2(acc[mi][ni][0], acc[mi][ni][1]);
                if (row + 8 < M)
                    *reinterpret_cast<half2_t*>(C + (size_t)(row + 8) * NN + col) =
                        pack2(acc[mi][ni][2], acc[mi][ni][3]);
            }
        return;
    }

    // Split-K: write this CTA's partial tile, then the last CTA of the tile reduces all of them.
    // Workspace: TICKETS ints (one per tile, fixed place, reset after use) then the partials.
    int* tickets = reinterpret_cast<int*>(ws);
    float* parts = ws + TICKETS;
    float* part = parts + (size_t)split * M * NN;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            const int row = m0 + wm0 + mi * 16 + rq, col = n0 + wn0 + ni * 8 + cq;
            if (row < M)
                __stcg(reinterpret_cast<float2*>(part + (size_t)row * NN + col),
                       make_float2(acc[mi][ni][0], acc[mi][ni][1]));
            if (row + 8 < M)
                __stcg(reinterpret_cast<float2*>(part + (size_t)(row + 8) * NN + col),
                       make_float2(acc[mi][ni][2], acc[mi][ni][3]));
        }
    __threadfence();
    __syncthreads();
    __shared__ int s_last;
    const int tile = n_tile * m_tiles + m_tile;
    if (tid == 0) s_last = atomicAdd(tickets + tile, 1) == SPLIT - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    constexpr int C4 = BN / 4;
    for (int i = tid; i < BM * C4; i += NTHREADS) {
        const int r = i / C4, c = (i % C4) * 4;
        const int row = m0 + r;
        if (row >= M) continue;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
        for (int sp = 0; sp < SPLIT; ++sp) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(parts + ((size_t)sp * M + row) * NN + n0 + c));
            s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
        }
        half2_t h[2] = {pack2(s.x, s.y), pack2(s.z, s.w)};
        *reinterpret_cast<uint2*>(C + (size_t)row * NN + n0 + c) = *reinterpret_cast<uint2*>(h);
    }
    if (tid == 0) tickets[tile] = 0;  // ready for the next call on the same workspace
}

}  // namespace

extern "C" __global__ void __launch_bounds__(NTHREADS)
gemm_tn_kernel(const half_t* __restrict__ A, const half_t* __restrict__ B, half_t* __restrict__ C,
               float* __restrict__ ws, int M) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    half_t* smem = reinterpret_cast<half_t*>(smem_raw);
    if (M <= T0_MAXM)
        gemm_tier<T0_BM, T0_BN, T0_BK, T0_WM, T0_ST, T0_SPLIT, false>(A, B, C, ws, M, smem);
    else if (M <= T1_MAXM)
        gemm_tier<T1_BM, T1_BN, T1_BK, T1_WM, T1_ST, T1_SPLIT, false>(A, B, C, ws, M, smem);
    else
        gemm_tier<T2_BM, T2_BN, T2_BK, T2_WM, T2_ST, 1, true>(A, B, C, ws, M, smem);
}
