// RMSNorm over the last dimension, with the optional residual add before (fused add + RMSNorm)
// or after (post-norm residual), in the rounding order of the problem's reference.
//
// Problem params (fixed per problem):
//   DTYPE        0 float32, 1 float16, 2 bfloat16 (common/dtype.cuh)
//   HIDDEN       length of the normalized (last) dimension, a compile-time constant
//   RESID_MODE   0 none; 1 x = h + r in float32; 2 x = round(h + r) (the add done in the dtype)
//   POST_RESID   1: out = round(r + round(norm(h)))  (output = residual + RMSNorm(h))
//   WEIGHT_MODE  0 y = x * inv_rms * w in float32, rounded once;
//                1 y = round(w * round(x * inv_rms))  (normalized cast to dtype before the weight)
//   WEIGHT_ROWS  weight is [WEIGHT_ROWS, HIDDEN] and row r uses weight row r % WEIGHT_ROWS
// Tunables:
//   VEC          elements per load (VEC * sizeof(elem) <= 16 bytes)
//   TPR          threads per row (power of two if < 32, else a multiple of 32)
//   ROWS         rows per block (block = TPR * ROWS threads)
//   WPRE         1: load the weight up front together with x (saves a DRAM round trip on small
//                rows); 0: load it in the output loop (large rows: keeps the registers and the
//                first wave of loads for x, which measured faster on 069, hidden 4096+)
// Why: every row is read once into registers (HIDDEN / (TPR*VEC) vectors per thread), reduced
// with warp shuffles (plus one shared-memory step when TPR > 32), and written once: the kernel
// moves the minimum bytes, so large workloads run at copy bandwidth.

#ifndef RESID_MODE
#define RESID_MODE 0
#endif
#ifndef POST_RESID
#define POST_RESID 0
#endif
#ifndef WEIGHT_MODE
#define WEIGHT_MODE 0
#endif
#ifndef WEIGHT_ROWS
#define WEIGHT_ROWS 1
#endif

#ifndef WPRE
#define WPRE 1
#endif

#define HAS_RES (RESID_MODE != 0 || POST_RESID != 0)

static_assert(HIDDEN % VEC == 0, "HIDDEN must be a multiple of VEC");
static_assert(VEC * sizeof(elem_t) <= 16, "at most 16 bytes per load");
static_assert(TPR >= 32 ? TPR % 32 == 0 : (TPR & (TPR - 1)) == 0, "TPR: power of 2 or multiple of 32");

constexpr int NV = HIDDEN / VEC;                 // vectors per row
constexpr int NPT = (NV + TPR - 1) / TPR;        // vectors per thread

extern "C" __global__ void __launch_bounds__(TPR * ROWS)
rmsnorm_kernel(const elem_t* __restrict__ x,
#if HAS_RES
               const elem_t* __restrict__ res,
#endif
               const elem_t* __restrict__ w, elem_t* __restrict__ out, int rows, float eps) {
    const int t = threadIdx.x % TPR;
    const int rl = threadIdx.x / TPR;
    const long row = (long)blockIdx.x * ROWS + rl;
    // No early return: with TPR > 32 every thread of the block takes part in __syncthreads.
    const bool live = row < rows;
    const long base = live ? row * HIDDEN : 0;

    const elem_t* wr = w + (WEIGHT_ROWS > 1 ? (row % WEIGHT_ROWS) * HIDDEN : 0);
    // WPRE: the weight is loaded up front, with x: after the reduction it would cost a second
    // DRAM round trip, which is most of the time of a small row. For large rows that preload
    // competes with x for registers and memory slots, so the search can turn it off.
    float xf[NPT][VEC];
    float ss = 0.f;
#if WPRE
    vec_t<VEC> wv[NPT];
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int vi = t + i * TPR;
        if (live && (NV % TPR == 0 || vi < NV)) wv[i] = load_vec<VEC>(wr + vi * VEC);
    }
#endif
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int vi = t + i * TPR;
        const bool ok = live && (NV % TPR == 0 || vi < NV);
        if (ok) {
            vec_t<VEC> a = load_vec<VEC>(x + base + vi * VEC);
#if RESID_MODE != 0
            vec_t<VEC> b = load_vec<VEC>(res + base + vi * VEC);
#endif
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                float v = to_f(a.v[j]);
#if RESID_MODE == 1
                v += to_f(b.v[j]);
#elif RESID_MODE == 2
                v = round_elem(v + to_f(b.v[j]));
#endif
                xf[i][j] = v;
                ss = fmaf(v, v, ss);
            }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) xf[i][j] = 0.f;
        }
    }

    // Sum of squares over the row's TPR threads.
    constexpr int LANES = TPR < 32 ? TPR : 32;
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
#if TPR > 32
    constexpr int WPR = TPR / 32;  // warps per row
    __shared__ float red[ROWS][WPR];
    const int warp_in_row = t / 32;
    if ((t & 31) == 0) red[rl][warp_in_row] = ss;
    __syncthreads();
    ss = 0.f;
#pragma unroll
    for (int k = 0; k < WPR; ++k) ss += red[rl][k];
#endif
    const float inv = rsqrtf(ss * (1.0f / HIDDEN) + eps);
    if (!live) return;

#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int vi = t + i * TPR;
        if (NV % TPR == 0 || vi < NV) {
#if POST_RESID
            vec_t<VEC> rv = load_vec<VEC>(res + base + vi * VEC);
#endif
#if WPRE
            const vec_t<VEC> wi = wv[i];
#else
            const vec_t<VEC> wi = load_vec<VEC>(wr + vi * VEC);
#endif
            vec_t<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
#if WEIGHT_MODE == 1
                float y = to_f(wi.v[j]) * round_elem(xf[i][j] * inv);
#else
                float y = xf[i][j] * inv * to_f(wi.v[j]);
#endif
#if POST_RESID
                y = to_f(rv.v[j]) + round_elem(y);
#endif
                o.v[j] = from_f(y);
            }
            store_vec<VEC>(out + base + vi * VEC, o);
        }
    }
}
