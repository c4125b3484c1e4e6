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
//   NPAIR        1, or 2: two independent norms of the same shape (Q and K) in one launch, the
//                second one's (x, w, out) after the first's and blockIdx.y choosing the pair (one
//                kernel instead of two: no launch gap between them, no second ramp-up)
// Tunables:
//   VEC          elements per load (VEC * sizeof(elem) <= 16 bytes)
//   TPR          threads per row (power of two if < 32, else a multiple of 32)
//   ROWS         rows per block (block = TPR * ROWS threads)
//   LDH          1: x and residual read with ld.global.nc.L1::no_allocate.L2::256B (streamed once:
//                no L1 line kept, the L2 fetches 256-byte runs ahead); 0: __ldg
//   WPRE         1: load the weight (and a post-norm residual) up front together with x: one DRAM
//                round trip for a small row; 0: load them in the output loop (large rows: fewer
//                registers, more warps resident); 2: decided per call, preloaded when the grid fits
//                in one wave (WPRE_AUTO_BLOCKS: small batches are latency-bound, where the second
//                round trip for the weight costs most)
//   LPOL         load path of x / residual (0 = LDH's choice): 1 ld.global.nc.L1::no_allocate;
//                2 the same with an L2 evict_first cache policy (read once: the lines the L2 should
//                give up first); 3 ld.global.cs (streaming). Overrides LDH when set.
//   SPOL         store of the output: 0 plain st.global; 1 st.global.cs (streaming); 2 with an L2
//                evict_first policy; 3 with an L2 evict_last policy (kept dirty in the L2 so that
//                the write-back can come after the kernel)
//   PERSIST      1: rmsnorm_persist instead of rmsnorm_kernel: a grid of at most BPS blocks per SM
//                (grid min(row blocks, NSM * BPS), NSM = 132), every block walking the rows grid-stride with PF rows
//                (a row = ROWS rows of the block) in flight per thread in a register ring: the next
//                row's loads are issued before this row's stores, the weight is loaded once per
//                thread, and no block retires/launches mid-call (medium calls, 25-35 MB, lost
//                ~2 us each to the wave ramp: 71-78% of copy bandwidth on 021/022)
// Why: every row is read once into registers (HIDDEN / (TPR*VEC) vectors per thread), reduced
// with warp shuffles (plus one shared-memory step when TPR > 32), and written once: the kernel
// moves the minimum bytes. All of a thread's loads are issued before any of their values is used
// (raw 16-byte vectors kept in registers, converted to float only when needed): loads that each
// feed an FMA before the next one starts cost one DRAM latency per vector (measured: 2.5-3.5 us
// for a 1-row call that one round trip does in ~1.5 us, and 65-75% of copy bandwidth on large
// calls). Index math is 32-bit except the row base (one 64-bit multiply).

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

#ifndef NPAIR
#define NPAIR 1
#endif
#ifndef WPRE
#define WPRE 1
#endif
#ifndef WPRE_AUTO_BLOCKS
#define WPRE_AUTO_BLOCKS (132 * 2048 / (TPR * ROWS))  // blocks resident at once on an H200
#endif

#ifndef LDH
#define LDH 0
#endif

#define HAS_RES (RESID_MODE != 0 || POST_RESID != 0)

// One vector of the streamed operands (x, residual).
template <int N>
__device__ __forceinline__ vec_t<N> load_stream(const elem_t* p) {
#if LDH && defined(__CUDA_ARCH__)
    constexpr int B = N * sizeof(elem_t);
    vec_u<N> u;
    if constexpr (B == 16) {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(u.raw.x), "=r"(u.raw.y), "=r"(u.raw.z), "=r"(u.raw.w) : "l"(p));
        return u.v;
    } else if constexpr (B == 8) {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];"
            : "=r"(u.raw.x), "=r"(u.raw.y) : "l"(p));
        return u.v;
    }
#endif
    return load_vec<N>(p);
}

#ifndef LPOL
#define LPOL 0
#endif
#ifndef SPOL
#define SPOL 0
#endif

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ unsigned long long make_policy_evict_first() {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
__device__ __forceinline__ unsigned long long make_policy_evict_last() {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
#endif

// x / residual vector with the LPOL path (LPOL 0: load_stream, i.e. LDH's choice). `pol`: the L2
// policy of LPOL 2 (made once per thread).
template <int N>
__device__ __forceinline__ vec_t<N> load_x(const elem_t* p, unsigned long long pol) {
#if defined(__CUDA_ARCH__) && LPOL != 0
    constexpr int B = N * sizeof(elem_t);
    vec_u<N> u;
    if constexpr (B == 16) {
#if LPOL == 1
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(u.raw.x), "=r"(u.raw.y), "=r"(u.raw.z), "=r"(u.raw.w) : "l"(p));
#elif LPOL == 2
        asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
            : "=r"(u.raw.x), "=r"(u.raw.y), "=r"(u.raw.z), "=r"(u.raw.w) : "l"(p), "l"(pol));
#else
        asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(u.raw.x), "=r"(u.raw.y), "=r"(u.raw.z), "=r"(u.raw.w) : "l"(p));
#endif
        return u.v;
    }
#endif
    (void)pol;
    return load_stream<N>(p);
}

template <int N>
__device__ __forceinline__ void store_out(elem_t* p, const vec_t<N>& v, unsigned long long pol) {
#if defined(__CUDA_ARCH__) && SPOL != 0
    constexpr int B = N * sizeof(elem_t);
    if constexpr (B == 16) {
        vec_u<N> u;
        u.v = v;
#if SPOL == 1
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                     :: "l"(p), "r"(u.raw.x), "r"(u.raw.y), "r"(u.raw.z), "r"(u.raw.w));
#else
        asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                     :: "l"(p), "r"(u.raw.x), "r"(u.raw.y), "r"(u.raw.z), "r"(u.raw.w), "l"(pol));
#endif
        return;
    }
#endif
    (void)pol;
    store_vec<N>(p, v);
}

__device__ __forceinline__ unsigned long long load_policy() {
#if defined(__CUDA_ARCH__) && LPOL == 2
    return make_policy_evict_first();
#else
    return 0ull;
#endif
}

__device__ __forceinline__ unsigned long long store_policy() {
#if defined(__CUDA_ARCH__) && SPOL == 2
    return make_policy_evict_first();
#elif defined(__CUDA_ARCH__) && SPOL == 3
    return make_policy_evict_last();
#else
    return 0ull;
#endif
}

static_assert(HIDDEN % VEC == 0, "HIDDEN must be a multiple of VEC");
static_assert(VEC * sizeof(elem_t) <= 16, "at most 16 bytes per load");
static_assert(TPR >= 32 ? TPR % 32 == 0 : (TPR & (TPR - 1)) == 0, "TPR: power of 2 or multiple of 32");

constexpr int NV = HIDDEN / VEC;                 // vectors per row
constexpr int NPT = (NV + TPR - 1) / TPR;        // vectors per thread
constexpr bool EVEN = NV % TPR == 0;             // every thread has NPT full vectors

// The value that is normalized, element j of vector i: the input, or input + residual in the
// reference's rounding (RESID_MODE 2 is rounded once, when the vectors arrive).
#if RESID_MODE == 1
#define XVAL(i, j) (to_f(xa[i].v[j]) + to_f(rb[i].v[j]))
#else
#define XVAL(i, j) to_f(xa[i].v[j])
#endif

#ifndef PERSIST
#define PERSIST 0
#endif

#if !PERSIST
extern "C" __global__ void __launch_bounds__(TPR * ROWS)
rmsnorm_kernel(const elem_t* __restrict__ x,
#if HAS_RES
               const elem_t* __restrict__ res,
#endif
               const elem_t* __restrict__ w, elem_t* __restrict__ out,
#if NPAIR == 2
               const elem_t* __restrict__ x_b, const elem_t* __restrict__ w_b,
               elem_t* __restrict__ out_b,
#endif
               int rows, float eps) {
#if NPAIR == 2
    static_assert(!HAS_RES, "two pairs: independent norms only");
    if (blockIdx.y) {
        x = x_b;
        w = w_b;
        out = out_b;
    }
#endif
    const int t = threadIdx.x % TPR;
    const int rl = threadIdx.x / TPR;
    const int row = blockIdx.x * ROWS + rl;
    const unsigned long long lpol = load_policy(), spol = store_policy();
    // No early return: with TPR > 32 every thread of the block takes part in __syncthreads.
    const bool live = row < rows;
    const size_t base = live ? (size_t)row * HIDDEN : 0;
    const elem_t* __restrict__ xr = x + base;
#if HAS_RES
    const elem_t* __restrict__ rr = res + base;
#endif
    const elem_t* __restrict__ wr = w + (WEIGHT_ROWS > 1 ? (row % WEIGHT_ROWS) * HIDDEN : 0);

    // 1. Issue every load of this thread (x, residual, weight when preloaded); nothing waits yet.
    const bool pre = WPRE == 1 || (WPRE == 2 && gridDim.x <= WPRE_AUTO_BLOCKS);
    vec_t<VEC> xa[NPT];
#if RESID_MODE != 0 || (POST_RESID && WPRE)
    vec_t<VEC> rb[NPT];
#endif
#if WPRE
    vec_t<VEC> wv[NPT];
#endif
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int off = (t + i * TPR) * VEC;
        if (live && (EVEN || off < HIDDEN)) {
            xa[i] = load_x<VEC>(xr + off, lpol);
#if RESID_MODE != 0
            rb[i] = load_x<VEC>(rr + off, lpol);
#elif POST_RESID && WPRE
            if (pre) rb[i] = load_x<VEC>(rr + off, lpol);
#endif
#if WPRE
            if (pre) wv[i] = load_vec<VEC>(wr + off);
#endif
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) xa[i].v[j] = from_f(0.f);
#if RESID_MODE != 0 || (POST_RESID && WPRE)
#pragma unroll
            for (int j = 0; j < VEC; ++j) rb[i].v[j] = from_f(0.f);
#endif
        }
    }

    // 2. Sum of squares of this thread's values, then over the row's TPR threads.
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
#if RESID_MODE == 2
#pragma unroll
        for (int j = 0; j < VEC; ++j) xa[i].v[j] = from_f(to_f(xa[i].v[j]) + to_f(rb[i].v[j]));
#endif
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float v = XVAL(i, j);
            ss = fmaf(v, v, ss);
        }
    }
    constexpr int LANES = TPR < 32 ? TPR : 32;
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
#if TPR > 32
    constexpr int WPR = TPR / 32;  // warps per row
    __shared__ float red[ROWS][WPR];
    if ((t & 31) == 0) red[rl][t / 32] = ss;
    __syncthreads();
    ss = 0.f;
#pragma unroll
    for (int k = 0; k < WPR; ++k) ss += red[rl][k];
#endif
    const float inv = rsqrtf(ss * (1.0f / HIDDEN) + eps);
    if (!live) return;

    // 3. Scale, weight, (post residual), store.
    elem_t* __restrict__ orow = out + base;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int off = (t + i * TPR) * VEC;
        if (EVEN || off < HIDDEN) {
#if WPRE
            vec_t<VEC> wi;
            if (pre) wi = wv[i];
            else wi = load_vec<VEC>(wr + off);
#else
            const vec_t<VEC> wi = load_vec<VEC>(wr + off);
#endif
#if POST_RESID && WPRE
            vec_t<VEC> rv;
            if (pre) rv = rb[i];
            else rv = load_x<VEC>(rr + off, lpol);
#elif POST_RESID
            const vec_t<VEC> rv = load_x<VEC>(rr + off, lpol);
#endif
            vec_t<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
#if WEIGHT_MODE == 1
                float y = to_f(wi.v[j]) * round_elem(XVAL(i, j) * inv);
#else
                float y = XVAL(i, j) * inv * to_f(wi.v[j]);
#endif
#if POST_RESID
                y = to_f(rv.v[j]) + round_elem(y);
#endif
                o.v[j] = from_f(y);
            }
            store_out<VEC>(orow + off, o, spol);
        }
    }
}
#endif  // !PERSIST

#if PERSIST
// Persistent variant (PERSIST=1): see the header. A "block-row" bk is the ROWS rows
// [bk * ROWS, bk * ROWS + ROWS) one block handles at a time; block b takes bk = b, b + G, b + 2G, ...
// (G = gridDim.x), so whether a block-row exists is the same for all threads of the block
// (__syncthreads stays uniform) and the rows of one step are adjacent in memory across the grid.
#ifndef PF
#define PF 2
#endif
#ifndef BPS
#define BPS 4
#endif
static_assert(NPAIR == 1, "rmsnorm_persist: one norm per launch");
static_assert(WEIGHT_ROWS == 1, "rmsnorm_persist: one weight row (kept in registers)");
static_assert(PF >= 1 && PF <= 8, "PF: 1..8 block-rows in flight");
static_assert(TPR * ROWS * BPS <= 2048, "BPS blocks must fit on one SM");

#if RESID_MODE == 1
#define PXVAL(p, i, j) (to_f(xa[p][i].v[j]) + to_f(rb[p][i].v[j]))
#else
#define PXVAL(p, i, j) to_f(xa[p][i].v[j])
#endif

// Issue the loads of row r (x, and the residual when there is one) into one ring slot; nothing
// waits on them here. Rows past the end and the vector tail of an uneven row read as zeros.
__device__ __forceinline__ void persist_issue(vec_t<VEC> (&xs)[NPT],
#if HAS_RES
                                              vec_t<VEC> (&rs)[NPT], const elem_t* __restrict__ res,
#endif
                                              const elem_t* __restrict__ x, int r, int rows, int t,
                                              unsigned long long lpol) {
    const bool l = r < rows;
    const size_t b = l ? (size_t)r * HIDDEN : 0;
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int off = (t + i * TPR) * VEC;
        if (l && (EVEN || off < HIDDEN)) {
            xs[i] = load_x<VEC>(x + b + off, lpol);
#if HAS_RES
            rs[i] = load_x<VEC>(res + b + off, lpol);
#endif
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) xs[i].v[j] = from_f(0.f);
#if HAS_RES
#pragma unroll
            for (int j = 0; j < VEC; ++j) rs[i].v[j] = from_f(0.f);
#endif
        }
    }
}
#if HAS_RES
#define PISSUE(P, BK) persist_issue(xa[P], rb[P], res, x, (BK) * ROWS + rl, rows, t, lpol)
#else
#define PISSUE(P, BK) persist_issue(xa[P], x, (BK) * ROWS + rl, rows, t, lpol)
#endif

extern "C" __global__ void __launch_bounds__(TPR * ROWS, BPS)
rmsnorm_persist(const elem_t* __restrict__ x,
#if HAS_RES
                const elem_t* __restrict__ res,
#endif
                const elem_t* __restrict__ w, elem_t* __restrict__ out, int rows, float eps) {
    const int t = threadIdx.x % TPR;
    const int rl = threadIdx.x / TPR;
    const int G = gridDim.x;
    const unsigned long long lpol = load_policy(), spol = store_policy();

    // The ring first (x / residual of the first PF block-rows), then the weight: once per thread.
    vec_t<VEC> xa[PF][NPT];
#if HAS_RES
    vec_t<VEC> rb[PF][NPT];
#endif
#pragma unroll
    for (int p = 0; p < PF; ++p) PISSUE(p, (int)blockIdx.x + p * G);
    vec_t<VEC> wv[NPT];
#pragma unroll
    for (int i = 0; i < NPT; ++i) {
        const int off = (t + i * TPR) * VEC;
        if (EVEN || off < HIDDEN) wv[i] = load_vec<VEC>(w + off);
    }
#if TPR > 32
    constexpr int WPR = TPR / 32;
    __shared__ float red[2][ROWS][WPR];  // two buffers: a step's writes never meet the last one's reads
    int it = 0;
#endif

    for (int k0 = blockIdx.x; k0 * ROWS < rows; k0 += PF * G) {
#pragma unroll
        for (int p = 0; p < PF; ++p) {
            const int bk = k0 + p * G;
            if (bk * ROWS >= rows) break;  // the same for the whole block
            const int r = bk * ROWS + rl;
            const bool live = r < rows;

            float ss = 0.f;
#pragma unroll
            for (int i = 0; i < NPT; ++i) {
#if RESID_MODE == 2
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    xa[p][i].v[j] = from_f(to_f(xa[p][i].v[j]) + to_f(rb[p][i].v[j]));
#endif
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const float v = PXVAL(p, i, j);
                    ss = fmaf(v, v, ss);
                }
            }
            constexpr int LANES = TPR < 32 ? TPR : 32;
#pragma unroll
            for (int o = LANES / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
#if TPR > 32
            if ((t & 31) == 0) red[it & 1][rl][t / 32] = ss;
            __syncthreads();
            ss = 0.f;
#pragma unroll
            for (int k = 0; k < WPR; ++k) ss += red[it & 1][rl][k];
            ++it;
#endif
            const float inv = rsqrtf(ss * (1.0f / HIDDEN) + eps);

            vec_t<VEC> ov[NPT];
#pragma unroll
            for (int i = 0; i < NPT; ++i) {
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
#if WEIGHT_MODE == 1
                    float y = to_f(wv[i].v[j]) * round_elem(PXVAL(p, i, j) * inv);
#else
                    float y = PXVAL(p, i, j) * inv * to_f(wv[i].v[j]);
#endif
#if POST_RESID
                    y = to_f(rb[p][i].v[j]) + round_elem(y);
#endif
                    ov[i].v[j] = from_f(y);
                }
            }
            // this slot's next block-row goes out before this one's stores
            PISSUE(p, bk + PF * G);
            if (live) {
                elem_t* __restrict__ orow = out + (size_t)r * HIDDEN;
#pragma unroll
                for (int i = 0; i < NPT; ++i) {
                    const int off = (t + i * TPR) * VEC;
                    if (EVEN || off < HIDDEN) store_out<VEC>(orow + off, ov[i], spol);
                }
            }
        }
    }
}
#endif  // PERSIST
