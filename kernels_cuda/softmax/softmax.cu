// Row softmax over the last dimension (length n, known at run time), with an optional Gemma-style
// soft-cap before it: y = softmax(tanh(x / SOFTCAP) * SOFTCAP), max and sum in float32, the
// output rounded once to the element type (F.softmax(..., dtype=torch.float32).to(dtype)).
//
// Problem params (fixed per problem):
//   DTYPE          0 float32, 1 float16, 2 bfloat16 (common/dtype.cuh)
//   SOFTCAP        soft-cap value as a float literal; 0.0 = none
//   SOFTCAP_ROUND  1: the reference does the cap's three steps on the dtype tensor, so each step
//                  is rounded to the dtype (x * (1/c) as PyTorch's CUDA true-divide by a scalar
//                  does, tanh, * c); 0: the cap is computed in float32
// Tunables:
//   TPR            threads per row: < 32 (power of two) small rows, 32 one row per warp,
//                  64..1024 (multiple of 32) one row per block part
//   ROWS           rows per block (block = TPR * ROWS <= 1024 threads)
//   VEC            elements per 16-byte (or smaller) load; rows whose n is not a multiple of VEC
//                  take the scalar path (same code, one element per load)
//   NPT            vectors per thread kept in registers: rows of n <= TPR * VEC * NPT are read once
//                  (single pass: max, sum of exp, write); longer rows take two passes (online
//                  max/sum while streaming, then re-read and write)
// Why: softmax moves 2 * n elements per row; reading the row once into registers keeps it at
// copy bandwidth, and the shuffle reductions stay inside the warp for TPR <= 32.

#ifndef SOFTCAP
#define SOFTCAP 0.0
#endif
#ifndef SOFTCAP_ROUND
#define SOFTCAP_ROUND 0
#endif

static_assert(VEC * sizeof(elem_t) <= 16, "at most 16 bytes per load");
static_assert(TPR >= 32 ? TPR % 32 == 0 : (TPR & (TPR - 1)) == 0, "TPR: power of 2 or multiple of 32");
static_assert(TPR * ROWS <= 1024, "at most 1024 threads per block");
static_assert(!(SOFTCAP_ROUND) || (SOFTCAP) != 0.0, "SOFTCAP_ROUND needs a soft-cap value");

#define NEG_INF __uint_as_float(0xff800000u)  // -inf (NVRTC has no math.h INFINITY)
constexpr int CACHE = NPT * VEC;                  // elements per thread held in registers
constexpr int WARPS_PER_ROW = TPR > 32 ? TPR / 32 : 1;

__device__ __forceinline__ float cap(float f) {
#if SOFTCAP_ROUND
    const float c = (float)(SOFTCAP);
    f = round_elem(f * (1.0f / c));
    f = round_elem(tanhf(f));
    return round_elem(f * c);
#else
    if ((float)(SOFTCAP) != 0.0f) {
        const float c = (float)(SOFTCAP);
        return tanhf(f / c) * c;
    }
    return f;
#endif
}

// Reduce v over the TPR threads of one row (all threads of the block must call it together).
template <bool IS_MAX>
__device__ __forceinline__ float row_reduce(float v, float (*red)[2]) {
#pragma unroll
    for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, w) : v + w;
    }
    if constexpr (TPR > 32) {
        const int wr = (threadIdx.x % TPR) / 32;
        __syncthreads();                       // red may still be read by the previous reduction
        if ((threadIdx.x & 31) == 0) red[wr][0] = v;
        __syncthreads();
        v = red[0][0];
#pragma unroll
        for (int i = 1; i < WARPS_PER_ROW; ++i) v = IS_MAX ? fmaxf(v, red[i][0]) : v + red[i][0];
    }
    return v;
}

// Combine two (max, sum of exp(x - max)) pairs; an empty side (max -inf) adds nothing.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    const float a = m == NEG_INF ? 0.0f : s * expf(m - mm);
    const float b = m2 == NEG_INF ? 0.0f : s2 * expf(m2 - mm);
    m = mm;
    s = a + b;
}

__device__ __forceinline__ void pair_reduce(float& m, float& s, float (*red)[2]) {
#pragma unroll
    for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        combine(m, s, m2, s2);
    }
    if constexpr (TPR > 32) {
        const int wr = (threadIdx.x % TPR) / 32;
        __syncthreads();
        if ((threadIdx.x & 31) == 0) { red[wr][0] = m; red[wr][1] = s; }
        __syncthreads();
        m = red[0][0];
        s = red[0][1];
#pragma unroll
        for (int i = 1; i < WARPS_PER_ROW; ++i) combine(m, s, red[i][0], red[i][1]);
    }
}

template <int V>
__device__ __forceinline__ void load_chunk(const elem_t* p, float* f) {
    if constexpr (V == 1) {
        f[0] = cap(to_f(__ldg(p)));
    } else {
        const vec_t<V> v = load_vec<V>(p);
#pragma unroll
        for (int j = 0; j < V; ++j) f[j] = cap(to_f(v.v[j]));
    }
}

template <int V>
__device__ __forceinline__ void store_chunk(elem_t* p, const float* f) {
    if constexpr (V == 1) {
        p[0] = from_f(f[0]);
    } else {
        vec_t<V> v;
#pragma unroll
        for (int j = 0; j < V; ++j) v.v[j] = from_f(f[j]);
        store_vec<V>(p, v);
    }
}

// One row with V elements per load (V = VEC, or 1 when n is not a multiple of VEC).
template <int V>
__device__ __forceinline__ void softmax_row(const elem_t* __restrict__ xr, elem_t* __restrict__ yr,
                                            int n, int t, bool live, float (*red)[2]) {
    constexpr int C = CACHE / V;                  // chunks of V elements per thread
    const int nchunks = n / V;
    if (n <= CACHE * TPR) {                       // uniform over the block: n is one value
        float f[C][V];
        float m = NEG_INF;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int idx = c * TPR + t;
            if (live && idx < nchunks) {
                load_chunk<V>(xr + (long)idx * V, f[c]);
#pragma unroll
                for (int j = 0; j < V; ++j) m = fmaxf(m, f[c][j]);
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) f[c][j] = NEG_INF;
            }
        }
        m = row_reduce<true>(m, red);
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
                f[c][j] = expf(f[c][j] - m);
                s += f[c][j];
            }
        }
        s = row_reduce<false>(s, red);
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const int idx = c * TPR + t;
            if (live && idx < nchunks) {
#pragma unroll
                for (int j = 0; j < V; ++j) f[c][j] = f[c][j] / s;
                store_chunk<V>(yr + (long)idx * V, f[c]);
            }
        }
    } else {                                      // two passes over a row too long for registers
        float m = NEG_INF, s = 0.0f;
        for (int idx = t; live && idx < nchunks; idx += TPR) {
            float f[V];
            load_chunk<V>(xr + (long)idx * V, f);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                if (f[j] > m) {
                    s = (m == NEG_INF ? 0.0f : s * expf(m - f[j])) + 1.0f;
                    m = f[j];
                } else {
                    s += expf(f[j] - m);
                }
            }
        }
        pair_reduce(m, s, red);
        for (int idx = t; live && idx < nchunks; idx += TPR) {
            float f[V];
            load_chunk<V>(xr + (long)idx * V, f);
#pragma unroll
            for (int j = 0; j < V; ++j) f[j] = expf(f[j] - m) / s;
            store_chunk<V>(yr + (long)idx * V, f);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TPR * ROWS)
softmax_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ out, int rows, int n) {
    __shared__ float red[ROWS][WARPS_PER_ROW][2];
    const int t = threadIdx.x % TPR;
    const int rl = threadIdx.x / TPR;
    const long row = (long)blockIdx.x * ROWS + rl;
    // No early return: with TPR > 32 every thread of the block takes part in __syncthreads.
    const bool live = row < rows;
    const long base = live ? row * (long)n : 0;
    if (VEC > 1 && n % VEC == 0) {                // 16-byte aligned rows (torch allocations are)
        softmax_row<VEC>(x + base, out + base, n, t, live, red[rl]);
    } else {
        softmax_row<1>(x + base, out + base, n, t, live, red[rl]);
    }
}
