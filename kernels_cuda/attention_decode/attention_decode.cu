// Paged GQA decode attention (page size 1), split-KV ("flash-decoding") for sm_90a:
// one query token per request, mma.sync m16n8k16 bf16 -> fp32 with the kv head's GROUP q heads as
// the rows of a 16-row Q tile (rows >= GROUP are zero padding), ldmatrix from XOR-swizzled shared
// memory, cp.async STAGES-deep ring of K/V rows gathered through kv_indices, online softmax base 2.
//
// Params (#defined by solforge): NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM (=128), CHUNK (kv tokens per
// CTA), BLOCK_N (kv tokens per ring step), NWARPS (warps per CTA; warp w takes columns
// [w*WN, (w+1)*WN) of every step, WN = BLOCK_N / NWARPS), STAGES (ring depth).
//
// Each K/V row is read once: a CTA covers one (request, kv head, chunk of CHUNK kv tokens) and all
// GROUP q heads of the kv head. Chunk scheduler without a workspace of offsets: request b owns CTA
// indices [off(b), off(b+1)) with off(b) = floor(kv_indptr[b] / CHUNK) + b; the range holds its
// ceil(kv_len_b / CHUNK) chunks since floor(A + a) - floor(A) + 1 >= ceil(a). grid.x =
// floor(num_kv_indices / CHUNK) + batch = off(batch) covers every request; a CTA finds its request by
// binary search (off is strictly increasing); spare CTAs exit. The CTA index is also its slot in
// the workspace (n_slots = grid.x slots of NUM_QO_HEADS x (HEAD_DIM + 1) floats).
//
// gqa_decode_split: the warps' partial (m, l, O) are merged in shared memory; a request with one
// chunk writes output/lse directly; otherwise the chunk's normalized O and its base-2 lse go to the
// workspace, and gqa_decode_combine (one CTA per request, a warp per q head) merges the chunks:
// lse = M + log2(sum 2^(lse_c - M)), O = sum 2^(lse_c - lse) O_c. A request with kv_len 0 gets
// output 0 and lse -inf (the reference's). No workspace slot is read that the same call did not
// write, so the workspace needs no zeroing.
#include <cuda_bf16.h>
#include <cuda/std/cstdint>

#define GROUP (NUM_QO_HEADS / NUM_KV_HEADS)
#define NTHREADS (NWARPS * 32)
#define WN (BLOCK_N / NWARPS)           // kv columns per warp and step
#define CHUNKS (HEAD_DIM / 8)           // 16-byte chunks per row
#define NEG_INF (__int_as_float(0xff800000))

static_assert(HEAD_DIM == 128, "the swizzle and fragment loops assume head_dim 128");
static_assert(GROUP >= 1 && GROUP <= 16, "the GROUP q heads of a kv head are rows of one 16-row tile");
static_assert(WN % 16 == 0 && WN * NWARPS == BLOCK_N, "BLOCK_N / NWARPS: a multiple of 16");
static_assert(STAGES >= 2, "STAGES >= 2");
static_assert(CHUNK >= 16, "CHUNK >= 16");

// swz, smem_u32, cp_async16/commit/wait, ldsm_x4(_t), mma16816, ex2, pack_bf16: common/attention_mma.cuh
// (prepended by solforge/kernels/attention_decode.py)
__device__ __forceinline__ int chunk_off(const int* __restrict__ kv_indptr, int b) {
    return kv_indptr[b] / CHUNK + b;
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
gqa_decode_split(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                 const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ kv_indptr,
                 const int* __restrict__ kv_indices, __nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                 float* __restrict__ ws, int batch, int n_slots, float sm_scale) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ float sM[NWARPS][16], sL[NWARPS][16];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* sK = sQ + 16 * HEAD_DIM;
    __nv_bfloat16* sV = sK + STAGES * BLOCK_N * HEAD_DIM;
    float* sO = reinterpret_cast<float*>(sK);   // [NWARPS][GROUP][HEAD_DIM] after the ring is drained

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kvh = blockIdx.y, t = blockIdx.x;
    if (batch <= 0) return;
    int lo = 0, hi = batch - 1;          // largest b with off(b) <= t
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (chunk_off(kv_indptr, mid) <= t) lo = mid; else hi = mid - 1;
    }
    const int b = lo;
    const int kv_start = kv_indptr[b], kv_len = kv_indptr[b + 1] - kv_start;
    const int n_chunks = (kv_len + CHUNK - 1) / CHUNK;
    const int j = t - chunk_off(kv_indptr, b);
    if (j < 0 || j >= n_chunks) return;
    const int c0 = kv_start + j * CHUNK;               // first kv_indices entry of the chunk
    const int n_tok = min(CHUNK, kv_len - j * CHUNK);  // >= 1
    const long long qrow0 = (long long)b * NUM_QO_HEADS + kvh * GROUP;

    for (int i = tid; i < 16 * CHUNKS; i += NTHREADS) {
        int r = i / CHUNKS, c = i % CHUNKS;
        bool ok = r < GROUP;
        cp_async16(smem_u32(sQ + swz(r, c)), q + (qrow0 + (ok ? r : 0)) * HEAD_DIM + c * 8, ok);
    }
    const int n_blocks = (n_tok + BLOCK_N - 1) / BLOCK_N;
    auto load_kv = [&](int blk) {
        const int slot = blk % STAGES;
        __nv_bfloat16* dk = sK + slot * BLOCK_N * HEAD_DIM;
        __nv_bfloat16* dv = sV + slot * BLOCK_N * HEAD_DIM;
        for (int i = tid; i < BLOCK_N * CHUNKS; i += NTHREADS) {
            int r = i / CHUNKS, c = i % CHUNKS;
            int n = blk * BLOCK_N + r;
            bool ok = n < n_tok;
            long long page = ok ? (long long)kv_indices[c0 + n] : 0;
            long long off = (page * NUM_KV_HEADS + kvh) * HEAD_DIM + c * 8;  // page_size 1
            cp_async16(smem_u32(dk + swz(r, c)), k_cache + off, ok);
            cp_async16(smem_u32(dv + swz(r, c)), v_cache + off, ok);
        }
    };
    load_kv(0);
    cp_async_commit();                       // group 0: Q + block 0
#pragma unroll
    for (int s = 1; s < STAGES - 1; ++s) {
        if (s < n_blocks) load_kv(s);
        cp_async_commit();
    }

    const float scale2 = sm_scale * 1.4426950408889634f;
    uint32_t qf[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int d = 0; d < HEAD_DIM / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;

    for (int blk = 0; blk < n_blocks; ++blk) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (blk + STAGES - 1 < n_blocks) load_kv(blk + STAGES - 1);
        cp_async_commit();
        if (blk == 0) {
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                int r = (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(smem_u32(sQ + swz(r, kk * 2 + (lane >> 4))), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
            }
        }
        const int slot = blk % STAGES;
        const __nv_bfloat16* bk = sK + slot * BLOCK_N * HEAD_DIM + warp * WN * HEAD_DIM;
        const __nv_bfloat16* bv = sV + slot * BLOCK_N * HEAD_DIM + warp * WN * HEAD_DIM;
        const int col0 = blk * BLOCK_N + warp * WN;   // chunk-relative kv token of the warp's column 0
        if (col0 >= n_tok) continue;                  // nothing of this step for this warp

        float s[WN / 8][4];
#pragma unroll
        for (int n = 0; n < WN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < WN / 16; ++n) {
                uint32_t b0, b1, b2, b3;
                // rows of bk are (warp*WN + r): the swizzle uses the absolute tile row, whose low 3
                // bits equal r's since WN is a multiple of 16
                int r = n * 16 + (lane & 7) + (lane >> 4) * 8;
                ldsm_x4(smem_u32(bk + swz(r, kk * 2 + ((lane >> 3) & 1))), b0, b1, b2, b3);
                mma16816(s[2 * n], qf[kk], b0, b1);
                mma16816(s[2 * n + 1], qf[kk], b2, b3);
            }
        }
        float mx_a = m_a, mx_b = m_b;
#pragma unroll
        for (int n = 0; n < WN / 8; ++n) {
            int c = col0 + n * 8 + (lane & 3) * 2;
            s[n][0] = c < n_tok ? s[n][0] * scale2 : NEG_INF;
            s[n][1] = c + 1 < n_tok ? s[n][1] * scale2 : NEG_INF;
            s[n][2] = c < n_tok ? s[n][2] * scale2 : NEG_INF;
            s[n][3] = c + 1 < n_tok ? s[n][3] * scale2 : NEG_INF;
            mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
            mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
        }
#pragma unroll
        for (int w = 1; w <= 2; w <<= 1) {
            mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffff, mx_a, w));
            mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffff, mx_b, w));
        }
        const float base_a = mx_a == NEG_INF ? 0.f : mx_a;
        const float base_b = mx_b == NEG_INF ? 0.f : mx_b;
        const float alpha_a = ex2(m_a - base_a), alpha_b = ex2(m_b - base_b);
        m_a = mx_a;
        m_b = mx_b;
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int n = 0; n < WN / 8; ++n) {
            s[n][0] = ex2(s[n][0] - base_a);
            s[n][1] = ex2(s[n][1] - base_a);
            s[n][2] = ex2(s[n][2] - base_b);
            s[n][3] = ex2(s[n][3] - base_b);
            sum_a += s[n][0] + s[n][1];
            sum_b += s[n][2] + s[n][3];
        }
        l_a = l_a * alpha_a + sum_a;
        l_b = l_b * alpha_b + sum_b;
#pragma unroll
        for (int d = 0; d < HEAD_DIM / 8; ++d) {
            o[d][0] *= alpha_a; o[d][1] *= alpha_a;
            o[d][2] *= alpha_b; o[d][3] *= alpha_b;
        }
#pragma unroll
        for (int kk = 0; kk < WN / 16; ++kk) {
            uint32_t pa[4];
            pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int d = 0; d < HEAD_DIM / 16; ++d) {
                uint32_t b0, b1, b2, b3;
                int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4_t(smem_u32(bv + swz(r, d * 2 + (lane >> 4))), b0, b1, b2, b3);
                mma16816(o[2 * d], pa, b0, b1);
                mma16816(o[2 * d + 1], pa, b2, b3);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();   // the ring is drained and read by everyone: sO may overwrite it

    // ---- merge the warps' partials: raw O, m and l of rows < GROUP into shared memory ----
#pragma unroll
    for (int w = 1; w <= 2; w <<= 1) {
        l_a += __shfl_xor_sync(0xffffffff, l_a, w);
        l_b += __shfl_xor_sync(0xffffffff, l_b, w);
    }
    const int r_a = lane >> 2, r_b = r_a + 8;
    if ((lane & 3) == 0) {
        sM[warp][r_a] = m_a; sL[warp][r_a] = l_a;
        sM[warp][r_b] = m_b; sL[warp][r_b] = l_b;
    }
#pragma unroll
    for (int d = 0; d < HEAD_DIM / 8; ++d) {
        int c = d * 8 + (lane & 3) * 2;
        if (r_a < GROUP) {
            sO[(warp * GROUP + r_a) * HEAD_DIM + c] = o[d][0];
            sO[(warp * GROUP + r_a) * HEAD_DIM + c + 1] = o[d][1];
        }
        if (r_b < GROUP) {
            sO[(warp * GROUP + r_b) * HEAD_DIM + c] = o[d][2];
            sO[(warp * GROUP + r_b) * HEAD_DIM + c + 1] = o[d][3];
        }
    }
    __syncthreads();
    for (int i = tid; i < GROUP * CHUNKS; i += NTHREADS) {
        const int r = i / CHUNKS, c8 = (i % CHUNKS) * 8;
        float M = NEG_INF;
#pragma unroll
        for (int w = 0; w < NWARPS; ++w) M = fmaxf(M, sM[w][r]);
        float acc[8], L = 0.f;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] = 0.f;
#pragma unroll
        for (int w = 0; w < NWARPS; ++w) {
            const float f = (sM[w][r] == NEG_INF) ? 0.f : ex2(sM[w][r] - M);
            L += f * sL[w][r];
            const float* src = sO + (w * GROUP + r) * HEAD_DIM + c8;
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[k] += f * src[k];
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        const float lse2 = L > 0.f ? M + __log2f(L) : NEG_INF;
        const long long row = qrow0 + r;
        if (n_chunks == 1) {   // the whole request in this CTA: final output
            uint4 v;
            v.x = pack_bf16(acc[0] * inv, acc[1] * inv);
            v.y = pack_bf16(acc[2] * inv, acc[3] * inv);
            v.z = pack_bf16(acc[4] * inv, acc[5] * inv);
            v.w = pack_bf16(acc[6] * inv, acc[7] * inv);
            *reinterpret_cast<uint4*>(out + row * HEAD_DIM + c8) = v;
            if (c8 == 0) lse[row] = lse2;
        } else {
            float* dst = ws + ((long long)t * NUM_QO_HEADS + kvh * GROUP + r) * HEAD_DIM + c8;
            *reinterpret_cast<float4*>(dst) = make_float4(acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv);
            *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4] * inv, acc[5] * inv, acc[6] * inv, acc[7] * inv);
            if (c8 == 0) ws[(long long)n_slots * NUM_QO_HEADS * HEAD_DIM + (long long)t * NUM_QO_HEADS + kvh * GROUP + r] = lse2;
        }
    }
}

// Merge of a request's chunks (requests with >= 2 chunks; 0 chunks: output 0, lse -inf; 1 chunk:
// written by gqa_decode_split). One CTA per request, COMBINE_WARPS warps, a warp per q head, each
// lane 4 of the 128 dims.
#define COMBINE_WARPS 8
extern "C" __global__ void __launch_bounds__(COMBINE_WARPS * 32)
gqa_decode_combine(const int* __restrict__ kv_indptr, const float* __restrict__ ws, __nv_bfloat16* __restrict__ out,
                   float* __restrict__ lse, int n_slots) {
    const int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kv_len = kv_indptr[b + 1] - kv_indptr[b];
    const int n_chunks = kv_len > 0 ? (kv_len + CHUNK - 1) / CHUNK : 0;
    if (n_chunks == 1) return;
    const int off = chunk_off(kv_indptr, b);
    const float* ws_lse = ws + (long long)n_slots * NUM_QO_HEADS * HEAD_DIM;
    for (int h = warp; h < NUM_QO_HEADS; h += COMBINE_WARPS) {
        const long long row = (long long)b * NUM_QO_HEADS + h;
        float M = NEG_INF;
        for (int c = 0; c < n_chunks; ++c) M = fmaxf(M, ws_lse[(long long)(off + c) * NUM_QO_HEADS + h]);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        float L = 0.f;
        if (M != NEG_INF) {
            for (int c = 0; c < n_chunks; ++c) {
                const long long slot = (long long)(off + c) * NUM_QO_HEADS + h;
                const float lc = ws_lse[slot];
                const float f = lc == NEG_INF ? 0.f : ex2(lc - M);
                const float4 v = *reinterpret_cast<const float4*>(ws + slot * HEAD_DIM + lane * 4);
                acc.x += f * v.x; acc.y += f * v.y; acc.z += f * v.z; acc.w += f * v.w;
                L += f;
            }
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        uint2 pk;
        pk.x = pack_bf16(acc.x * inv, acc.y * inv);
        pk.y = pack_bf16(acc.z * inv, acc.w * inv);
        *reinterpret_cast<uint2*>(out + row * HEAD_DIM + lane * 4) = pk;
        if (lane == 0) lse[row] = L > 0.f ? M + __log2f(L) : NEG_INF;
    }
}
