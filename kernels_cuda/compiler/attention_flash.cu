// Flash attention segment of the compiler (solforge/compiler/templates/attention.py fills the params):
// O[b,h,i,:] = softmax_j(mod(Q[b,h,i,:] . K[b,h/GROUP,j,:])) V[b,h/GROUP,j,:] with online softmax.
//
// One CTA per (tile of BLOCK_M rows, kv head, batch x split). A tile row is a (query position, q head
// of the kv head) pair, row = i * GROUP + g, so every K/V row staged in shared memory serves all GROUP
// q heads that share it (decode-like shapes with Sq = 1 still fill a 16-row mma tile when GROUP > 1).
// 16 rows per warp; K/V tiles of BLOCK_N rows through a STAGES-deep cp.async ring.
//
// Math: 16-bit inputs (IN_DTYPE 1 fp16, 2 bf16) use mma.sync m16n8k16 with fp32 accumulation
// (P rounded to the input dtype for P V, as the reference's P.to(dtype) @ V). fp32 inputs
// (IN_DTYPE 0) use mma.sync m16n8k8 tf32 three times per product (big*big + big*small + small*big,
// "3xTF32"), which keeps fp32 accuracy: the fp32 references run true fp32 matmuls.
//
// Layouts: every tensor is a base pointer + element offset + one int64 stride per logical dim
// (b, h, s, d) for Q/K/V/O, (b, h, i, j) for the bias and the boolean mask, (b, h, i) for the lse,
// so transposes, permutes, head splits and broadcasts are folded into the indexing (stride 0 =
// broadcast). 16-byte cp.async when a tensor's dim stride is 1 and its rows are 16-byte aligned
// (checked at run time, uniform per CTA), element loads otherwise. Head dims are padded in shared
// memory to a multiple of 16 (8 for fp32) with zeros; rows are padded so ldmatrix is conflict-free.
//
// Score modifiers, in the reference's order: s = q.k; s *= scale; softcap: s = tanh(s / c) * c;
// s += bias; masked out (-inf) where the boolean mask says so, where j > i + causal_off (CAUSAL),
// where i + causal_off - j >= window (WINDOW) and past Sk. ROUND_S rounds s to the input dtype after
// each of those ops (a 16-bit reference computes them in its dtype). A row that sees no key gives
// NaN (EMPTY_NAN, as softmax of all -inf does) or 0.
//
// NSPLIT > 1 (split-KV for decode-like shapes): the launch picks nsplit <= NSPLIT from the shapes
// (attention.py: enough CTAs for the machine, never more splits than kv blocks); split z of nsplit
// takes an equal share of the kv blocks and writes its normalized O (fp32) and base-2 lse to the
// workspace, and attn_combine merges. With nsplit 1 attn_fwd writes the output and attn_combine
// returns at once, so one candidate serves prefill and decode shapes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/cstdint>

#define NEG_INF (__int_as_float(0xff800000))
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define NWARPS (BLOCK_M / 16)
#define NTHREADS (NWARPS * 32)

#if IN_DTYPE == 2
typedef __nv_bfloat16 in_t;
#elif IN_DTYPE == 1
typedef __half in_t;
#else
typedef float in_t;
#endif
#if O_DTYPE == 2
typedef __nv_bfloat16 o_t;
#elif O_DTYPE == 1
typedef __half o_t;
#else
typedef float o_t;
#endif
#if BIAS_DTYPE == 2
typedef __nv_bfloat16 bias_t;
#elif BIAS_DTYPE == 1
typedef __half bias_t;
#else
typedef float bias_t;
#endif

__device__ __forceinline__ float tof(float v) { return v; }
__device__ __forceinline__ float tof(__half v) { return __half2float(v); }
__device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
// round to the input dtype and back (ROUND_S)
__device__ __forceinline__ float rnd_in(float v) {
#if IN_DTYPE == 2
    return __bfloat162float(__float2bfloat16_rn(v));
#elif IN_DTYPE == 1
    return __half2float(__float2half_rn(v));
#else
    return v;
#endif
}
#if ROUND_S
#define RS(x) rnd_in(x)
#else
#define RS(x) (x)
#endif

#if IN_DTYPE == 0
#define PADK 8                              // head-dim padding granule (tf32 k8)
#define VEC 4                               // elements per 16-byte chunk
#define QS (DQKP + 4)                       // Q/K row stride: an odd number of 16-byte units
#define VS (DVC + ((40 - DVC % 32) % 32))   // V row stride = 8 mod 32 floats: scalar B loads conflict-free
#else
#define VEC 8
#define QS (DQKP + 8)
#define VS (DVC + 8)
#endif
#define Q_IN_REGS (IN_DTYPE != 0 && DQKP <= 128)   // else Q fragments are re-read from shared memory per block

static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 128, "BLOCK_M: 16 rows per warp, at most 8 warps");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N: a multiple of 16");
static_assert(STAGES >= 2, "STAGES >= 2");
#ifndef DV_SPLIT
#define DV_SPLIT 1
#endif
#define DVC (DVP / DV_SPLIT)                 // V / O columns per CTA (the O accumulator's width)
static_assert(DQKP % VEC == 0 && DVC % VEC == 0 && DVC * DV_SPLIT == DVP, "padded head dims: whole 16-byte chunks");

// ---- warp-level primitives (16-bit: as kernels_cuda/common/attention_mma.cuh) ----
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    // src-size 0 zero-fills (tails and padding stay finite: 0 * NaN garbage would poison O)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#if IN_DTYPE == 2
__device__ __forceinline__ void mma16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
#elif IN_DTYPE == 1
__device__ __forceinline__ void mma16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
#else
__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x = big + small with both representable in tf32: the 3xTF32 split
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
    uint32_t b;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(b) : "f"(x));
    const float r = x - __uint_as_float(b);
    uint32_t s;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(s) : "f"(r));
    big = b;
    small = s;
}
// c += a b in ~fp32 accuracy from split operands (the small*small term is below fp32's precision)
__device__ __forceinline__ void mma3(float* c, const uint32_t* ab, const uint32_t* as, uint32_t bb0, uint32_t bb1,
                                     uint32_t bs0, uint32_t bs1) {
    mma_tf32(c, as, bb0, bb1);
    mma_tf32(c, ab, bs0, bs1);
    mma_tf32(c, ab, bb0, bb1);
}
#endif

// The arguments of attn_fwd; the launch passes them in this order (attention.py: _fwd_args).
#define ATTN_ARGS                                                                                          \
    const in_t* __restrict__ q, long long q_off, long long sqb, long long sqh, long long sqs, long long sqd, \
    const in_t* __restrict__ k, long long k_off, long long skb, long long skh, long long sks, long long skd, \
    const in_t* __restrict__ v, long long v_off, long long svb, long long svh, long long svs, long long svd, \
    o_t* __restrict__ o, long long o_off, long long sob, long long soh, long long sos, long long sod,       \
    int Sq, int Sk, float scale, int causal_off, int window, float softcap

extern "C" __global__ void __launch_bounds__(NTHREADS)
attn_fwd(ATTN_ARGS
#if HAS_BIAS
         , const bias_t* __restrict__ bias, long long bias_off, long long sbb, long long sbh, long long sbi, long long sbj
#endif
#if HAS_MASK
         , const unsigned char* __restrict__ mask, long long mask_off, long long smb, long long smh, long long smi,
         long long smj
#endif
#if HAS_LSE
         , float* __restrict__ lse, long long lse_off, long long slb, long long slh, long long sli
#endif
#if NSPLIT > 1
         , float* __restrict__ ws, long long ws_off, int nsplit
#endif
) {
#if NSPLIT == 1
    const int nsplit = 1;
#endif
    extern __shared__ __align__(128) unsigned char smem_raw[];
    in_t* sQ = reinterpret_cast<in_t*>(smem_raw);
    in_t* sK = sQ + BLOCK_M * QS;
    in_t* sV = sK + STAGES * BLOCK_N * QS;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kvh = blockIdx.y;
    const int b = blockIdx.z / nsplit, split = blockIdx.z % nsplit;
    const int H = gridDim.y * GROUP;
    // last tiles first: under a causal mask they see the most keys, so the long CTAs start early
    const int m0 = (gridDim.x / DV_SPLIT - 1 - blockIdx.x / DV_SPLIT) * BLOCK_M;
    const int dv0 = (blockIdx.x % DV_SPLIT) * DVC;   // this CTA's V / O columns: [dv0, dv0 + DVC)
    const int rows_total = Sq * GROUP;

    // kv blocks this CTA covers: all rows' visible keys (causal / window bounds), this split's share
    const int i_first = m0 / GROUP, i_last = min(Sq - 1, (m0 + BLOCK_M - 1) / GROUP);
    int kv_hi = Sk, kv_lo = 0;
#if CAUSAL
    kv_hi = max(0, min(Sk, i_last + causal_off + 1));
#endif
#if WINDOW
    kv_lo = max(0, i_first + causal_off - window + 1);
#endif
    const int nb_lo = kv_lo / BLOCK_N;
    const int nb_all = kv_hi > kv_lo ? (kv_hi + BLOCK_N - 1) / BLOCK_N - nb_lo : 0;
    const int per = (nb_all + nsplit - 1) / nsplit;
    const int blk_begin = nb_lo + min(nb_all, split * per);
    const int n_blocks = min(nb_all, (split + 1) * per) - min(nb_all, split * per);

    // 16-byte copies where the dim stride is 1 and every row start is 16-byte aligned
    const bool q_vec = sqd == 1 && DQK % VEC == 0 && ((reinterpret_cast<uintptr_t>(q) & 15) | ((q_off | sqb | sqh | sqs) % VEC)) == 0;
    const bool k_vec = skd == 1 && DQK % VEC == 0 && ((reinterpret_cast<uintptr_t>(k) & 15) | ((k_off | skb | skh | sks) % VEC)) == 0;
    const bool v_vec = svd == 1 && DV % VEC == 0 && ((reinterpret_cast<uintptr_t>(v) & 15) | ((v_off | svb | svh | svs) % VEC)) == 0;

    // ---- Q tile (row r: position (m0 + r) / GROUP, head kvh * GROUP + (m0 + r) % GROUP) ----
    {
        const in_t* qb = q + q_off + (long long)b * sqb;
        if (q_vec) {
            for (int idx = tid; idx < BLOCK_M * (DQKP / VEC); idx += NTHREADS) {
                const int r = idx / (DQKP / VEC), c = idx % (DQKP / VEC);
                const int gr = m0 + r;
                const bool ok = gr < rows_total && c * VEC < DQK;
                const in_t* src = ok ? qb + (long long)(kvh * GROUP + gr % GROUP) * sqh + (long long)(gr / GROUP) * sqs + c * VEC : q;
                cp_async16(smem_u32(sQ + r * QS + c * VEC), src, ok);
            }
        } else {
            for (int idx = tid; idx < BLOCK_M * DQKP; idx += NTHREADS) {
                const int r = idx / DQKP, d = idx % DQKP;
                const int gr = m0 + r;
                in_t val = in_t(0.f);
                if (gr < rows_total && d < DQK)
                    val = qb[(long long)(kvh * GROUP + gr % GROUP) * sqh + (long long)(gr / GROUP) * sqs + d * sqd];
                sQ[r * QS + d] = val;
            }
        }
    }
    const in_t* kb = k + k_off + (long long)b * skb + (long long)kvh * skh;
    const in_t* vb = v + v_off + (long long)b * svb + (long long)kvh * svh + (long long)dv0 * svd;
    auto load_kv = [&](int blk) {   // absolute kv block blk into ring slot (blk - blk_begin) % STAGES
        const int slot = (blk - blk_begin) % STAGES;
        in_t* dk = sK + slot * BLOCK_N * QS;
        in_t* dv = sV + slot * BLOCK_N * VS;
        const int j0 = blk * BLOCK_N;
        if (k_vec) {
            for (int idx = tid; idx < BLOCK_N * (DQKP / VEC); idx += NTHREADS) {
                const int r = idx / (DQKP / VEC), c = idx % (DQKP / VEC);
                const bool ok = j0 + r < Sk && c * VEC < DQK;
                cp_async16(smem_u32(dk + r * QS + c * VEC), ok ? kb + (long long)(j0 + r) * sks + c * VEC : k, ok);
            }
        } else {
            for (int idx = tid; idx < BLOCK_N * DQKP; idx += NTHREADS) {
                const int r = idx / DQKP, d = idx % DQKP;
                dk[r * QS + d] = (j0 + r < Sk && d < DQK) ? kb[(long long)(j0 + r) * sks + d * skd] : in_t(0.f);
            }
        }
        if (v_vec) {
            for (int idx = tid; idx < BLOCK_N * (DVC / VEC); idx += NTHREADS) {
                const int r = idx / (DVC / VEC), c = idx % (DVC / VEC);
                const bool ok = j0 + r < Sk && dv0 + c * VEC < DV;
                cp_async16(smem_u32(dv + r * VS + c * VEC), ok ? vb + (long long)(j0 + r) * svs + c * VEC : v, ok);
            }
        } else {
            for (int idx = tid; idx < BLOCK_N * DVC; idx += NTHREADS) {
                const int r = idx / DVC, d = idx % DVC;
                dv[r * VS + d] = (j0 + r < Sk && dv0 + d < DV) ? vb[(long long)(j0 + r) * svs + d * svd] : in_t(0.f);
            }
        }
    };
    if (n_blocks > 0) load_kv(blk_begin);
    cp_async_commit();   // group 0: Q + first block
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) {
        if (s < n_blocks) load_kv(blk_begin + s);
        cp_async_commit();
    }

    // this thread's two rows (mma C layout: r_a = lane/4, r_b = r_a + 8 of the warp's 16)
    const int r_a = warp * 16 + (lane >> 2);
    const int gr_a = m0 + r_a, gr_b = gr_a + 8;
    const bool ok_a = gr_a < rows_total, ok_b = gr_b < rows_total;
    const int i_a = gr_a / GROUP, i_b = gr_b / GROUP;
    const int h_a = kvh * GROUP + gr_a % GROUP, h_b = kvh * GROUP + gr_b % GROUP;
    // rows of the warp: the block needs no per-element test if every row sees all of it
    const int wi_lo = (m0 + warp * 16) / GROUP, wi_hi = min(Sq - 1, (m0 + warp * 16 + 15) / GROUP);
    (void)wi_lo; (void)wi_hi;
    const float scale2 = scale * LOG2E;

    // s (raw q.k, fp32) -> modified score in base-2 units, or -inf where masked
    auto mod = [&](float x, bool row_ok, int i, int h, int j) -> float {
        if (!row_ok || j >= Sk) return NEG_INF;
#if CAUSAL
        if (j > i + causal_off) return NEG_INF;
#endif
#if WINDOW
        if (i + causal_off - j >= window) return NEG_INF;
#endif
#if HAS_MASK
        {
            const bool mv = mask[mask_off + (long long)b * smb + (long long)h * smh + (long long)i * smi + (long long)j * smj] != 0;
            if (mv != (MASK_KEEP != 0)) return NEG_INF;
        }
#endif
        x = RS(RS(x) * scale);
#if SOFTCAP
        x = RS(RS(tanhf(RS(x / softcap))) * softcap);
#endif
#if HAS_BIAS
        x = RS(x + tof(bias[bias_off + (long long)b * sbb + (long long)h * sbh + (long long)i * sbi + (long long)j * sbj]));
#endif
        return x * LOG2E;
    };

#if Q_IN_REGS
    uint32_t qf[DQKP / 16][4];
#endif
    float o_acc[DVC / 8][4];
#pragma unroll
    for (int d = 0; d < DVC / 8; ++d) o_acc[d][0] = o_acc[d][1] = o_acc[d][2] = o_acc[d][3] = 0.f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;

    for (int it = 0; it < n_blocks; ++it) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();   // block it visible to all; everyone is done with block it-1's slot
        if (it + STAGES - 1 < n_blocks) load_kv(blk_begin + it + STAGES - 1);
        cp_async_commit();
        const int slot = it % STAGES;
        const in_t* bk = sK + slot * BLOCK_N * QS;
        const in_t* bv = sV + slot * BLOCK_N * VS;
        const int n0 = (blk_begin + it) * BLOCK_N;

        // ---- S = Q K^T (16 x BLOCK_N per warp) ----
        float s[BLOCK_N / 8][4];
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#if IN_DTYPE != 0
#if Q_IN_REGS
        if (it == 0) {
#pragma unroll
            for (int kk = 0; kk < DQKP / 16; ++kk) {
                const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(smem_u32(sQ + r * QS + kk * 16 + (lane >> 4) * 8), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
            }
        }
#endif
#pragma unroll
        for (int kk = 0; kk < DQKP / 16; ++kk) {
#if Q_IN_REGS
            const uint32_t* a = qf[kk];
#else
            uint32_t a[4];
            {
                const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(smem_u32(sQ + r * QS + kk * 16 + (lane >> 4) * 8), a[0], a[1], a[2], a[3]);
            }
#endif
#pragma unroll
            for (int n = 0; n < BLOCK_N / 16; ++n) {
                uint32_t b0, b1, b2, b3;
                const int r = n * 16 + (lane & 7) + (lane >> 4) * 8;
                ldsm_x4(smem_u32(bk + r * QS + kk * 16 + ((lane >> 3) & 1) * 8), b0, b1, b2, b3);
                mma16(s[2 * n], a, b0, b1);
                mma16(s[2 * n + 1], a, b2, b3);
            }
        }
#else
#pragma unroll 2
        for (int kk = 0; kk < DQKP / 8; ++kk) {
            uint32_t ar[4], ab[4], as[4];
            {
                const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(smem_u32(sQ + r * QS + kk * 8 + (lane >> 4) * 4), ar[0], ar[1], ar[2], ar[3]);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(ar[e]), ab[e], as[e]);
#pragma unroll
            for (int n = 0; n < BLOCK_N / 16; ++n) {
                uint32_t br[4], bb[4], bs[4];
                const int r = n * 16 + (lane & 7) + (lane >> 4) * 8;
                ldsm_x4(smem_u32(bk + r * QS + kk * 8 + ((lane >> 3) & 1) * 4), br[0], br[1], br[2], br[3]);
#pragma unroll
                for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(br[e]), bb[e], bs[e]);
                mma3(s[2 * n], ab, as, bb[0], bb[1], bs[0], bs[1]);
                mma3(s[2 * n + 1], ab, as, bb[2], bb[3], bs[2], bs[3]);
            }
        }
#endif

        // ---- score modifiers + online softmax (base 2) ----
        bool plain = n0 + BLOCK_N <= Sk && SIMPLE_MOD;
#if CAUSAL
        plain = plain && n0 + BLOCK_N - 1 <= wi_lo + causal_off;
#endif
#if WINDOW
        plain = plain && wi_hi + causal_off - n0 < window;
#endif
        if (plain) {
#pragma unroll
            for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] *= scale2;
        } else {
#pragma unroll
            for (int n = 0; n < BLOCK_N / 8; ++n) {
                const int c = n0 + n * 8 + (lane & 3) * 2;
                s[n][0] = mod(s[n][0], ok_a, i_a, h_a, c);
                s[n][1] = mod(s[n][1], ok_a, i_a, h_a, c + 1);
                s[n][2] = mod(s[n][2], ok_b, i_b, h_b, c);
                s[n][3] = mod(s[n][3], ok_b, i_b, h_b, c + 1);
            }
        }
        float mx_a = m_a, mx_b = m_b;
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n) {
            mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
            mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
        }
#pragma unroll
        for (int w = 1; w <= 2; w <<= 1) {
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, w));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, w));
        }
        // a row with no visible key yet keeps max -inf: base 0 so exp2 gives 0, not NaN
        const float base_a = mx_a == NEG_INF ? 0.f : mx_a;
        const float base_b = mx_b == NEG_INF ? 0.f : mx_b;
        const float alpha_a = ex2(m_a - base_a), alpha_b = ex2(m_b - base_b);
        m_a = mx_a;
        m_b = mx_b;
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n) {
            s[n][0] = ex2(s[n][0] - base_a);
            s[n][1] = ex2(s[n][1] - base_a);
            s[n][2] = ex2(s[n][2] - base_b);
            s[n][3] = ex2(s[n][3] - base_b);
            sum_a += s[n][0] + s[n][1];
            sum_b += s[n][2] + s[n][3];
        }
        l_a = l_a * alpha_a + sum_a;   // per-thread partial sums; reduced across the quad at the end
        l_b = l_b * alpha_b + sum_b;
#pragma unroll
        for (int d = 0; d < DVC / 8; ++d) {
            o_acc[d][0] *= alpha_a; o_acc[d][1] *= alpha_a;
            o_acc[d][2] *= alpha_b; o_acc[d][3] *= alpha_b;
        }

        // ---- O += P V ----
#if IN_DTYPE != 0
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            uint32_t pa[4];
            pa[0] = pack2(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack2(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int d = 0; d < DVC / 16; ++d) {
                uint32_t b0, b1, b2, b3;
                const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4_t(smem_u32(bv + r * VS + d * 16 + (lane >> 4) * 8), b0, b1, b2, b3);
                mma16(o_acc[2 * d], pa, b0, b1);
                mma16(o_acc[2 * d + 1], pa, b2, b3);
            }
        }
#else
        {
            const int t = lane & 3, g = lane >> 2;
            const int src0 = (lane & ~3) | (t >> 1), src1 = src0 + 2;
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 8; ++kk) {
                // C layout (row g / g+8, cols 2t, 2t+1) -> A layout (cols t and t+4) within the quad
                const float x0 = __shfl_sync(0xffffffff, s[kk][0], src0), x1 = __shfl_sync(0xffffffff, s[kk][1], src0);
                const float x2 = __shfl_sync(0xffffffff, s[kk][2], src0), x3 = __shfl_sync(0xffffffff, s[kk][3], src0);
                const float y0 = __shfl_sync(0xffffffff, s[kk][0], src1), y1 = __shfl_sync(0xffffffff, s[kk][1], src1);
                const float y2 = __shfl_sync(0xffffffff, s[kk][2], src1), y3 = __shfl_sync(0xffffffff, s[kk][3], src1);
                uint32_t pb[4], ps[4];
                split_tf32((t & 1) ? x1 : x0, pb[0], ps[0]);   // (g, t)
                split_tf32((t & 1) ? x3 : x2, pb[1], ps[1]);   // (g + 8, t)
                split_tf32((t & 1) ? y1 : y0, pb[2], ps[2]);   // (g, t + 4)
                split_tf32((t & 1) ? y3 : y2, pb[3], ps[3]);   // (g + 8, t + 4)
                const float* vrow0 = bv + (kk * 8 + t) * VS + g;
                const float* vrow1 = vrow0 + 4 * VS;
#pragma unroll
                for (int d = 0; d < DVC / 8; ++d) {
                    uint32_t vb0, vs0, vb1, vs1;
                    split_tf32(vrow0[d * 8], vb0, vs0);   // (k = t, n = g)
                    split_tf32(vrow1[d * 8], vb1, vs1);   // (k = t + 4, n = g)
                    mma3(o_acc[d], pb, ps, vb0, vb1, vs0, vs1);
                }
            }
        }
#endif
    }
    cp_async_wait<0>();

    // ---- epilogue ----
#pragma unroll
    for (int w = 1; w <= 2; w <<= 1) {
        l_a += __shfl_xor_sync(0xffffffff, l_a, w);
        l_b += __shfl_xor_sync(0xffffffff, l_b, w);
    }
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
#if NSPLIT > 1
  if (nsplit > 1) {
    // partial O (normalized) and base-2 lse of this split: ws[off + ((split*B + b)*H + h)*Sq + i][DV]
    const long long nrows = (long long)(gridDim.z / nsplit) * H * Sq;
    float* wo = ws + ws_off;
    float* wl = wo + (long long)nsplit * nrows * DV;
    const long long row_a = (((long long)split * (gridDim.z / nsplit) + b) * H + h_a) * Sq + i_a;
    const long long row_b = (((long long)split * (gridDim.z / nsplit) + b) * H + h_b) * Sq + i_b;
#pragma unroll
    for (int d = 0; d < DVC / 8; ++d) {
        const int c = dv0 + d * 8 + (lane & 3) * 2;
        if (ok_a && c < DV) wo[row_a * DV + c] = o_acc[d][0] * inv_a;
        if (ok_a && c + 1 < DV) wo[row_a * DV + c + 1] = o_acc[d][1] * inv_a;
        if (ok_b && c < DV) wo[row_b * DV + c] = o_acc[d][2] * inv_b;
        if (ok_b && c + 1 < DV) wo[row_b * DV + c + 1] = o_acc[d][3] * inv_b;
    }
    if ((lane & 3) == 0 && dv0 == 0) {
        if (ok_a) wl[row_a] = l_a > 0.f ? m_a + __log2f(l_a) : NEG_INF;
        if (ok_b) wl[row_b] = l_b > 0.f ? m_b + __log2f(l_b) : NEG_INF;
    }
    return;
  }
#endif
  {   // one split: the final output
    const float empty = EMPTY_NAN ? __int_as_float(0x7fc00000) : 0.f;
    o_t* oa = o + o_off + (long long)b * sob + (long long)h_a * soh + (long long)i_a * sos;
    o_t* ob = o + o_off + (long long)b * sob + (long long)h_b * soh + (long long)i_b * sos;
#pragma unroll
    for (int d = 0; d < DVC / 8; ++d) {
        const int c = dv0 + d * 8 + (lane & 3) * 2;
        if (ok_a && c < DV) st(oa + c * sod, l_a > 0.f ? o_acc[d][0] * inv_a : empty);
        if (ok_a && c + 1 < DV) st(oa + (c + 1) * sod, l_a > 0.f ? o_acc[d][1] * inv_a : empty);
        if (ok_b && c < DV) st(ob + c * sod, l_b > 0.f ? o_acc[d][2] * inv_b : empty);
        if (ok_b && c + 1 < DV) st(ob + (c + 1) * sod, l_b > 0.f ? o_acc[d][3] * inv_b : empty);
    }
#if HAS_LSE
    if ((lane & 3) == 0 && dv0 == 0) {   // natural log, as torch.logsumexp
        if (ok_a) lse[lse_off + (long long)b * slb + (long long)h_a * slh + (long long)i_a * sli] = l_a > 0.f ? (m_a + __log2f(l_a)) * LN2 : NEG_INF;
        if (ok_b) lse[lse_off + (long long)b * slb + (long long)h_b * slh + (long long)i_b * sli] = l_b > 0.f ? (m_b + __log2f(l_b)) * LN2 : NEG_INF;
    }
#endif
  }
}

#if NSPLIT > 1
// Merge of the NSPLIT partials of each (b, h, i) row: lse = M + log2(sum 2^(lse_s - M)),
// O = sum 2^(lse_s - lse) O_s. One warp per row.
#define COMBINE_WARPS 8
extern "C" __global__ void __launch_bounds__(COMBINE_WARPS * 32)
attn_combine(o_t* __restrict__ o, long long o_off, long long sob, long long soh, long long sos, long long sod,
             const float* __restrict__ ws, long long ws_off, int B, int H, int Sq, int nsplit
#if HAS_LSE
             , float* __restrict__ lse, long long lse_off, long long slb, long long slh, long long sli
#endif
) {
    const long long row = (long long)blockIdx.x * COMBINE_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const long long nrows = (long long)B * H * Sq;
    if (nsplit <= 1 || row >= nrows) return;   // one split: attn_fwd wrote the output
    const int i = (int)(row % Sq), h = (int)((row / Sq) % H), b = (int)(row / ((long long)Sq * H));
    const float* wo = ws + ws_off;
    const float* wl = wo + (long long)nsplit * nrows * DV;
    float M = NEG_INF;
#pragma unroll
    for (int sp = 0; sp < NSPLIT; ++sp)
        if (sp < nsplit) M = fmaxf(M, wl[sp * nrows + row]);
    float f[NSPLIT], L = 0.f;
#pragma unroll
    for (int sp = 0; sp < NSPLIT; ++sp) {
        const float ls = sp < nsplit ? wl[sp * nrows + row] : NEG_INF;
        f[sp] = (ls == NEG_INF) ? 0.f : ex2(ls - M);
        L += f[sp];
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    const float empty = EMPTY_NAN ? __int_as_float(0x7fc00000) : 0.f;
    o_t* orow = o + o_off + (long long)b * sob + (long long)h * soh + (long long)i * sos;
    for (int d = lane; d < DV; d += 32) {
        float acc = 0.f;
#pragma unroll
        for (int sp = 0; sp < NSPLIT; ++sp)
            if (sp < nsplit) acc += f[sp] * wo[(sp * nrows + row) * DV + d];
        st(orow + d * sod, L > 0.f ? acc * inv : empty);
    }
#if HAS_LSE
    if (lane == 0) lse[lse_off + (long long)b * slb + (long long)h * slh + (long long)i * sli] = L > 0.f ? (M + __log2f(L)) * LN2 : NEG_INF;
#endif
}
#endif
