// Softmax backward over the last dimension with an attention mask and an optional dropout mask:
//   gs  = p_drop > 0 ? (g * float(keep)) * (1 / (1 - p_drop)) : g
//   out = mask ? p * (gs - sum_row(p * gs)) : 0
// float32 throughout, each tensor op rounded as the reference does it (no FMA: -fmad=false);
// the row sum is a float32 tree (PyTorch's reduction order differs only in the last bits).
//
// Layout: g, p, keep, out [B, H, S, n]; mask [B, 1, S, n] (shared by the heads) when
// MASK_PER_HEAD = 0, [B, H, S, n] when 1. n (row length) is a run-time argument.
// Tunables: TPR (threads per row: 32 = one warp, or a multiple of 32 up to 1024), ROWS (rows per
// block). Rows whose length is a multiple of 4 use 16-byte loads (4-byte loads of the masks).
// Why: eager runs 5-7 kernels (scale, product, sum, subtract, product, masked_fill); this reads
// each input once for the sum and once more (from L2) for the output.

#ifndef MASK_PER_HEAD
#define MASK_PER_HEAD 0
#endif
static_assert(TPR % 32 == 0 && TPR * ROWS <= 1024, "TPR: multiple of 32, TPR * ROWS <= 1024");
constexpr int WARPS_PER_ROW = TPR / 32;

template <int V> struct fvec;
template <> struct fvec<1> { typedef float T; typedef unsigned char M; };
template <> struct fvec<4> { typedef float4 T; typedef uchar4 M; };

template <int V>
__device__ __forceinline__ void ld(const float* p, float* f) {
    if constexpr (V == 4) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p));
        f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
    } else {
        f[0] = __ldg(p);
    }
}

template <int V>
__device__ __forceinline__ void ldm(const bool* p, bool* m) {
    if constexpr (V == 4) {
        const uchar4 v = __ldg(reinterpret_cast<const uchar4*>(p));
        m[0] = v.x; m[1] = v.y; m[2] = v.z; m[3] = v.w;
    } else {
        m[0] = __ldg(reinterpret_cast<const unsigned char*>(p));
    }
}

template <int V>
__device__ __forceinline__ void st(float* p, const float* f) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
    } else {
        p[0] = f[0];
    }
}

template <int V>
__device__ __forceinline__ void grad_row(const float* __restrict__ g, const float* __restrict__ p,
                                         const bool* __restrict__ keep, const bool* __restrict__ mask,
                                         float* __restrict__ out, int n, int t, bool live,
                                         bool drop, float inv_keep, float* red) {
    const int nchunks = n / V;
    float acc = 0.0f;
    for (int c = t; live && c < nchunks; c += TPR) {
        float gv[V], pv[V];
        bool kv[V];
        ld<V>(g + (long)c * V, gv);
        ld<V>(p + (long)c * V, pv);
        if (drop) ldm<V>(keep + (long)c * V, kv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float gs = drop ? (gv[j] * (kv[j] ? 1.0f : 0.0f)) * inv_keep : gv[j];
            acc += pv[j] * gs;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if constexpr (WARPS_PER_ROW > 1) {
        __syncthreads();
        if ((t & 31) == 0) red[t / 32] = acc;
        __syncthreads();
        acc = 0.0f;
#pragma unroll
        for (int i = 0; i < WARPS_PER_ROW; ++i) acc += red[i];
    }
    for (int c = t; live && c < nchunks; c += TPR) {
        float gv[V], pv[V], ov[V];
        bool kv[V], mv[V];
        ld<V>(g + (long)c * V, gv);
        ld<V>(p + (long)c * V, pv);
        if (drop) ldm<V>(keep + (long)c * V, kv);
        ldm<V>(mask + (long)c * V, mv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float gs = drop ? (gv[j] * (kv[j] ? 1.0f : 0.0f)) * inv_keep : gv[j];
            ov[j] = mv[j] ? pv[j] * (gs - acc) : 0.0f;
        }
        st<V>(out + (long)c * V, ov);
    }
}

extern "C" __global__ void __launch_bounds__(TPR * ROWS)
softmax_backward_kernel(const float* __restrict__ g, const float* __restrict__ p,
                        const bool* __restrict__ mask, const bool* __restrict__ keep,
                        float* __restrict__ out, long rows, int n, int seq, int heads,
                        float p_drop, float keep_frac) {
    __shared__ float red[ROWS][WARPS_PER_ROW];
    const int t = threadIdx.x % TPR;
    const int rl = threadIdx.x / TPR;
    const long row = (long)blockIdx.x * ROWS + rl;
    const bool live = row < rows;   // no early return: TPR > 32 syncs the block
    const long r = live ? row : 0;
    const long base = r * (long)n;
#if MASK_PER_HEAD
    const long mbase = base;
#else
    const long mbase = ((r / ((long)heads * seq)) * seq + r % seq) * (long)n;
#endif
    const bool drop = p_drop > 0.0f;
    const float inv_keep = 1.0f / keep_frac;  // PyTorch: x / s as x * (1 / s) for a scalar s
    if (n % 4 == 0) {
        grad_row<4>(g + base, p + base, keep + base, mask + mbase, out + base, n, t, live, drop,
                    inv_keep, red[rl]);
    } else {
        grad_row<1>(g + base, p + base, keep + base, mask + mbase, out + base, n, t, live, drop,
                    inv_keep, red[rl]);
    }
}
