// Paged GQA causal prefill attention (page size 1), FlashAttention-2 style for sm_90a:
// mma.sync m16n8k16 bf16 -> fp32, ldmatrix from XOR-swizzled shared memory, cp.async multi-stage
// K/V tiles gathered row by row through kv_indices, online softmax in fp32 (base 2).
//
// Params (#defined by solforge): NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM (=128), BLOCK_M (q rows per
// CTA: BLOCK_M / GROUP tokens x GROUP heads), BLOCK_N (kv tokens per step), STAGES (cp.async ring).
//
// Why one CTA per (q tile, kv head) holding the GROUP q heads that share the kv head: every K/V row
// gathered into shared memory then serves GROUP (4 or 8) q heads, so K/V traffic from L2/HBM drops
// GROUP-fold compared with one CTA per q head, and the GROUP heads of one token are contiguous in q
// (GROUP*256 bytes) so the Q tile is still a dense gather. Row r of the tile is token r / GROUP,
// head kv_head*GROUP + r % GROUP.
//
// Causal rule (the reference's): within a request, q token i sees kv tokens j < min(kv_len,
// i + 1 + kv_len - q_len). So only its last valid = min(q_len, kv_len) tokens see any kv; the
// first q_len - valid get output 0 and lse -inf, as in the reference. Those rows are written by a
// cheap first kernel (gqa_prefill_zero_rows, one warp per token, no shared memory), and the
// attention kernel tiles only the valid tokens: in the FlashInfer-Bench workloads total_q is often
// far above num_kv_indices, and those zero rows would otherwise cost a heavy CTA per 64 rows.
//
// Tile scheduler without a workspace: request b owns CTA indices [off(b), off(b+1)) with
// off(b) = floor(min(qo_indptr[b], kv_indptr[b])*GROUP / BLOCK_M) + b. The range holds all
// ceil(valid_b*GROUP/BLOCK_M) tiles of b because min(A+a, B+c) - min(A, B) >= min(a, c) and
// floor(u+x) - floor(u) + 1 >= ceil(x); grid.x = floor(min(total_q, num_kv_indices)*GROUP/BLOCK_M)
// + batch covers every request. A CTA finds its request by binary search (off is strictly
// increasing); spare CTAs exit.
//
// ZFUSE=1 (a tunable, default 0): one launch instead of two. The zero rows are written by extra CTAs
// of the attention grid (blockIdx.x >= n_attn, after the attention tiles), ZTOK consecutive tokens x
// the GROUP heads of kv head blockIdx.y each, one warp per token, the request found once per warp by
// binary search and then walked forward. On the small workloads the second launch and its
// dependent indptr loads are a third of the time; the zero CTAs carry the attention kernel's
// shared-memory allocation, so on zero-heavy workloads fewer of them are resident (hence a tunable).
#include <cuda_bf16.h>
#include <cuda/std/cstdint>

#define GROUP (NUM_QO_HEADS / NUM_KV_HEADS)
#define NWARPS (BLOCK_M / 16)
#define NTHREADS (NWARPS * 32)
#define CHUNKS (HEAD_DIM / 8)           // 16-byte chunks per row
#define TILE_Q (BLOCK_M / GROUP)        // tokens per CTA
#define NEG_INF (__int_as_float(0xff800000))  // no <math.h> under NVRTC: spell -inf by its bits

#ifndef ZFUSE
#define ZFUSE 0
#endif
#define ZTOK 64                         // tokens per zero CTA (ZFUSE); solforge/kernels/attention_prefill.py
// RAGGED=1 (solforge/kernels/attention_ragged.py, FlashInfer-Bench 016/017): k/v are [total_kv, H_kv, D]
// with request b's kv in rows [kv_indptr[b], kv_indptr[b+1]); kv_indices is not read (the family
// passes kv_indptr in its place). RAGGED=0 compiles to the same cubin as before the macro.
#ifndef RAGGED
#define RAGGED 0
#endif

static_assert(HEAD_DIM == 128, "the swizzle and fragment loops assume head_dim 128");
static_assert(BLOCK_M % 16 == 0 && BLOCK_M % GROUP == 0, "BLOCK_M: 16 rows per warp, whole tokens");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N: multiple of 16");
static_assert(STAGES >= 2, "STAGES >= 2");

// swz, smem_u32, cp_async16/commit/wait, ldsm_x4(_t), mma16816, ex2, pack_bf16: common/attention_mma.cuh
// (prepended by solforge/kernels/attention_prefill.py)

#if ZFUSE
// Zero rows of tokens [zx*ZTOK, (zx+1)*ZTOK) for the GROUP heads of kv head kvh (ZFUSE): the same
// rows as gqa_prefill_zero_rows below (tokens before a request's last min(q_len, kv_len)).
__device__ __noinline__ void zero_rows_part(int zx, int kvh, int warp, int lane, const int* __restrict__ qo_indptr,
                                               const int* __restrict__ kv_indptr, __nv_bfloat16* __restrict__ out,
                                               float* __restrict__ lse, int batch, int total_q) {
    const int t_begin = zx * ZTOK + warp, t_end = min(total_q, (zx + 1) * ZTOK);
    if (batch <= 0 || t_begin >= t_end) return;
    int lo = 0, hi = batch - 1;   // request of t_begin: largest b with qo_indptr[b] <= t_begin
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (qo_indptr[mid] <= t_begin) lo = mid; else hi = mid - 1;
    }
    int b = lo, q_end = qo_indptr[b + 1], zero_end = 0;
    {
        const int q_len = q_end - qo_indptr[b], kv_len = kv_indptr[b + 1] - kv_indptr[b];
        zero_end = q_end - max(0, min(q_len, kv_len));
    }
    for (int tok = t_begin; tok < t_end; tok += NWARPS) {
        while (tok >= q_end) {    // next request (empty ones are skipped: their q_end repeats)
            ++b;
            const int q_start = q_end;
            q_end = qo_indptr[b + 1];
            const int kv_len = kv_indptr[b + 1] - kv_indptr[b];
            zero_end = q_end - max(0, min(q_end - q_start, kv_len));
        }
        if (tok >= zero_end) continue;
        const long long row = (long long)tok * NUM_QO_HEADS + kvh * GROUP;
        uint4* dst = reinterpret_cast<uint4*>(out + row * HEAD_DIM);
        for (int c = lane; c < GROUP * CHUNKS; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
        if (lane < GROUP) lse[row + lane] = NEG_INF;
    }
}
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS)
gqa_paged_prefill_causal(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
                         const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ qo_indptr,
                         const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
                         __nv_bfloat16* __restrict__ out, float* __restrict__ lse, int batch, float sm_scale
#if ZFUSE
                         , int total_q, int n_attn
#endif
                         ) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* sK = sQ + BLOCK_M * HEAD_DIM;
    __nv_bfloat16* sV = sK + STAGES * BLOCK_N * HEAD_DIM;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int kvh = blockIdx.y;
#if ZFUSE
    if ((int)blockIdx.x >= n_attn) {
        zero_rows_part((int)blockIdx.x - n_attn, kvh, warp, lane, qo_indptr, kv_indptr, out, lse, batch, total_q);
        return;
    }
#endif

    // ---- tile scheduler: largest b with off(b) <= blockIdx.x (off is strictly increasing) ----
    const int t = blockIdx.x;
    if (batch <= 0) return;
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        int off = (int)(((long long)min(qo_indptr[mid], kv_indptr[mid]) * GROUP) / BLOCK_M) + mid;
        if (off <= t) lo = mid; else hi = mid - 1;
    }
    const int b = lo;
    const int q_start = qo_indptr[b], q_len = qo_indptr[b + 1] - q_start;
    const int kv_start = kv_indptr[b], kv_len = kv_indptr[b + 1] - kv_start;
    const int valid = max(0, min(q_len, kv_len));
    const int n_tiles = (valid * GROUP + BLOCK_M - 1) / BLOCK_M;
    const int j = t - ((int)(((long long)min(q_start, kv_start) * GROUP) / BLOCK_M) + b);
    if (j < 0 || j >= n_tiles) return;
    const int tile = n_tiles - 1 - j;   // launch the request's last (longest) tiles first
    const int delta = kv_len - q_len;
    const int tok0 = (q_len - valid) + tile * TILE_Q;  // request-relative token of row 0
    const int tok_last = min(tok0 + TILE_Q, q_len) - 1;
    const int kv_end = min(kv_len, tok_last + delta + 1);   // kv tokens any row of the tile sees
    const int rows_valid = (tok_last - tok0 + 1) * GROUP;

    // q/out row r of this tile: ((q_start + tok0 + r/GROUP) * NUM_QO_HEADS + kvh*GROUP + r%GROUP)
    const long long row0 = ((long long)(q_start + tok0) * NUM_QO_HEADS + kvh * GROUP);
    auto grow = [&](int r) -> long long { return row0 + (long long)(r / GROUP) * NUM_QO_HEADS + (r % GROUP); };

    if (kv_end <= 0) {  // no row sees any kv token: zeros and -inf, with 16-byte stores
        for (int i = tid; i < rows_valid * CHUNKS; i += NTHREADS) {
            int r = i / CHUNKS, c = i % CHUNKS;
            *reinterpret_cast<uint4*>(out + grow(r) * HEAD_DIM + c * 8) = make_uint4(0, 0, 0, 0);
        }
        for (int r = tid; r < rows_valid; r += NTHREADS) lse[grow(r)] = NEG_INF;
        return;
    }

    // ---- loads ----
    for (int i = tid; i < BLOCK_M * CHUNKS; i += NTHREADS) {
        int r = i / CHUNKS, c = i % CHUNKS;
        bool ok = r < rows_valid;
        const __nv_bfloat16* src = q + (ok ? grow(r) : row0) * HEAD_DIM + c * 8;
        cp_async16(smem_u32(sQ + swz(r, c)), src, ok);
    }
    const int n_blocks = (kv_end + BLOCK_N - 1) / BLOCK_N;
    auto load_kv = [&](int blk) {
        const int slot = blk % STAGES;
        __nv_bfloat16* dk = sK + slot * BLOCK_N * HEAD_DIM;
        __nv_bfloat16* dv = sV + slot * BLOCK_N * HEAD_DIM;
        for (int i = tid; i < BLOCK_N * CHUNKS; i += NTHREADS) {
            int r = i / CHUNKS, c = i % CHUNKS;
            int n = blk * BLOCK_N + r;
            bool ok = n < kv_end;
            long long page = ok ? (RAGGED ? (long long)(kv_start + n) : (long long)kv_indices[kv_start + n]) : 0;
            long long off = (page * NUM_KV_HEADS + kvh) * HEAD_DIM + c * 8;  // page_size 1 (RAGGED: row)
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

    // per-thread rows: r_a = warp*16 + lane/4, r_b = r_a + 8; their causal limits (in kv tokens)
    const int r_a = warp * 16 + (lane >> 2);
    const int lim_a = min(kv_len, tok0 + r_a / GROUP + delta + 1);
    const int lim_b = min(kv_len, tok0 + (r_a + 8) / GROUP + delta + 1);
    const int warp_min_lim = min(kv_len, tok0 + (warp * 16) / GROUP + delta + 1);
    const float scale2 = sm_scale * 1.4426950408889634f;

    uint32_t qf[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int d = 0; d < HEAD_DIM / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;

    for (int blk = 0; blk < n_blocks; ++blk) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();   // block blk visible to all; everyone is done with block blk-1's slot
        if (blk + STAGES - 1 < n_blocks) load_kv(blk + STAGES - 1);
        cp_async_commit();
        if (blk == 0) {
#pragma unroll
            for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
                int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4(smem_u32(sQ + swz(r, kk * 2 + (lane >> 4))), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
            }
        }
        const int slot = blk % STAGES;
        const __nv_bfloat16* bk = sK + slot * BLOCK_N * HEAD_DIM;
        const __nv_bfloat16* bv = sV + slot * BLOCK_N * HEAD_DIM;

        // ---- S = Q K^T (16 x BLOCK_N per warp) ----
        float s[BLOCK_N / 8][4];
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < BLOCK_N / 16; ++n) {
                uint32_t b0, b1, b2, b3;
                int r = n * 16 + (lane & 7) + (lane >> 4) * 8;
                ldsm_x4(smem_u32(bk + swz(r, kk * 2 + ((lane >> 3) & 1))), b0, b1, b2, b3);
                mma16816(s[2 * n], qf[kk], b0, b1);
                mma16816(s[2 * n + 1], qf[kk], b2, b3);
            }
        }
        // ---- mask (only blocks that reach past the warp's smallest limit) + online softmax ----
        const int n0 = blk * BLOCK_N;
        float mx_a = m_a, mx_b = m_b;
        if (n0 + BLOCK_N > warp_min_lim) {
#pragma unroll
            for (int n = 0; n < BLOCK_N / 8; ++n) {
                int c = n0 + n * 8 + (lane & 3) * 2;
                s[n][0] = c < lim_a ? s[n][0] * scale2 : NEG_INF;
                s[n][1] = c + 1 < lim_a ? s[n][1] * scale2 : NEG_INF;
                s[n][2] = c < lim_b ? s[n][2] * scale2 : NEG_INF;
                s[n][3] = c + 1 < lim_b ? s[n][3] * scale2 : NEG_INF;
            }
        } else {
#pragma unroll
            for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] *= scale2;
        }
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
        // a row with no visible kv yet keeps max -inf: use 0 as the base so exp2 gives 0, not NaN
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
        for (int d = 0; d < HEAD_DIM / 8; ++d) {
            o[d][0] *= alpha_a; o[d][1] *= alpha_a;
            o[d][2] *= alpha_b; o[d][3] *= alpha_b;
        }
        // ---- O += P V (P from the S registers, rounded to bf16) ----
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
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

    // ---- epilogue: O / l, lse = m + log2(l) (base 2, as the reference) ----
#pragma unroll
    for (int w = 1; w <= 2; w <<= 1) {
        l_a += __shfl_xor_sync(0xffffffff, l_a, w);
        l_b += __shfl_xor_sync(0xffffffff, l_b, w);
    }
    const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
    const int r_b = r_a + 8;
    const bool ok_a = r_a < rows_valid, ok_b = r_b < rows_valid;
    __nv_bfloat16* oa = out + grow(r_a) * HEAD_DIM;
    __nv_bfloat16* ob = out + grow(r_b) * HEAD_DIM;
#pragma unroll
    for (int d = 0; d < HEAD_DIM / 8; ++d) {
        int c = d * 8 + (lane & 3) * 2;
        if (ok_a) *reinterpret_cast<uint32_t*>(oa + c) = pack_bf16(o[d][0] * inv_a, o[d][1] * inv_a);
        if (ok_b) *reinterpret_cast<uint32_t*>(ob + c) = pack_bf16(o[d][2] * inv_b, o[d][3] * inv_b);
    }
    if ((lane & 3) == 0) {
        if (ok_a) lse[grow(r_a)] = l_a > 0.f ? m_a + __log2f(l_a) : NEG_INF;
        if (ok_b) lse[grow(r_b)] = l_b > 0.f ? m_b + __log2f(l_b) : NEG_INF;
    }
}

// Rows of tokens that see no kv token (the first q_len - min(q_len, kv_len) of each request, all of
// a request with kv_len 0): output 0, lse -inf. One warp per token: 32 heads x 128 bf16 = 8 KB of
// 16-byte stores plus 32 lse values. Tokens that see kv are left to the attention kernel.
#define ZERO_WARPS 8
extern "C" __global__ void __launch_bounds__(ZERO_WARPS * 32)
gqa_prefill_zero_rows(const int* __restrict__ qo_indptr, const int* __restrict__ kv_indptr,
                      __nv_bfloat16* __restrict__ out, float* __restrict__ lse, int batch, int total_q) {
    const int tok = blockIdx.x * ZERO_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (tok >= total_q || batch <= 0) return;
    int lo = 0, hi = batch - 1;   // request of tok: largest b with qo_indptr[b] <= tok
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (qo_indptr[mid] <= tok) lo = mid; else hi = mid - 1;
    }
    const int q_start = qo_indptr[lo], q_len = qo_indptr[lo + 1] - q_start;
    const int kv_len = kv_indptr[lo + 1] - kv_indptr[lo];
    const int valid = max(0, min(q_len, kv_len));
    if (tok - q_start >= q_len - valid) return;
    uint4* row = reinterpret_cast<uint4*>(out + (long long)tok * NUM_QO_HEADS * HEAD_DIM);
    for (int c = lane; c < NUM_QO_HEADS * HEAD_DIM / 8; c += 32) row[c] = make_uint4(0, 0, 0, 0);
    for (int h = lane; h < NUM_QO_HEADS; h += 32) lse[(long long)tok * NUM_QO_HEADS + h] = NEG_INF;
}
