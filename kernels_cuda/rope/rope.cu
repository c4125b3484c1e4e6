// Rotary position embedding (rotate-half form) on rows of HEAD_DIM elements, optionally appended
// to a cache along the sequence: out = cat(cache, x * cos + rotate_half(x) * sin, dim=seq).
//
//   rotate_half(x) = cat(-x[HALF:], x[:HALF])     (HALF = HEAD_DIM / 2)
//   out[j]        = r(r(x[j] * cos[j])        + r(-x[j+HALF] * sin[j]))       j < HALF
//   out[j+HALF]   = r(r(x[j+HALF] * cos[j+HALF]) + r(x[j] * sin[j+HALF]))
// where r() rounds to the element type: the reference's three tensor ops each store their result
// in the dtype (no FMA: the family compiles with -fmad=false).
//
// Problem params: DTYPE (common/dtype.cuh), HEAD_DIM, COS_PER_BATCH (1: cos/sin are
//   [batch, 1, seq, D], 0: [seq, D] shared by all batches).
// Tunables: VEC (elements per load in each half), BLOCK (threads).
// Two outputs (K rotated + V appended, or Q and K rotated): with KIND0/KIND1 defined (0 rope, 1 cat)
//   rope2_kernel does both in one launch, blocks [0, blocks0) the first output and the rest the
//   second (two kernels chained in a CUDA graph wait for each other: ~1 us of a 3-5 us call).
// Layout: x [B, H, S_new, D]; cache [B, H, S_cur, D]; out [B, H, S_cur + S_new, D]. Each thread
// owns VEC elements of the first half of one row and the matching VEC of the second half, so every
// element of x, cos and sin is read once.

#ifndef COS_PER_BATCH
#define COS_PER_BATCH 0
#endif
constexpr int HALF = HEAD_DIM / 2;
constexpr int TPR = HALF / VEC;  // threads per row
static_assert(HALF % VEC == 0, "VEC must divide HEAD_DIM / 2");
static_assert(BLOCK % TPR == 0, "BLOCK must be a multiple of the threads per row");

// One thread's share of one output: KIND 0 rotates (and copies cached rows), 1 appends unchanged.
template <int KIND>
__device__ __forceinline__ void rope_part(long t, const elem_t* __restrict__ x,
                                          const elem_t* __restrict__ cosv,
                                          const elem_t* __restrict__ sinv,
                                          const elem_t* __restrict__ cache, elem_t* __restrict__ out,
                                          long rows, int s_tot, int s_cur, int heads) {
    const long row = t / TPR;
    if (row >= rows) return;
    const int j = (int)(t % TPR) * VEC;
    const long bh = row / s_tot;
    const int s = (int)(row - bh * s_tot);
    elem_t* o = out + row * HEAD_DIM;
    if (s < s_cur) {  // a cached row: copied as it is
        const elem_t* c = cache + (bh * s_cur + s) * HEAD_DIM;
        store_vec<VEC>(o + j, load_vec<VEC>(c + j));
        store_vec<VEC>(o + j + HALF, load_vec<VEC>(c + j + HALF));
        return;
    }
    const int s_new = s_tot - s_cur;
    const int sn = s - s_cur;
    const elem_t* xr = x + (bh * s_new + sn) * HEAD_DIM;
    if constexpr (KIND == 1) {  // cat(cache, x, dim=seq): the new rows as they are
        store_vec<VEC>(o + j, load_vec<VEC>(xr + j));
        store_vec<VEC>(o + j + HALF, load_vec<VEC>(xr + j + HALF));
        return;
    } else {
#if COS_PER_BATCH
        const long crow = (bh / heads) * s_new + sn;
#else
        const long crow = sn;
#endif
        const vec_t<VEC> x1 = load_vec<VEC>(xr + j), x2 = load_vec<VEC>(xr + j + HALF);
        const vec_t<VEC> c1 = load_vec<VEC>(cosv + crow * HEAD_DIM + j);
        const vec_t<VEC> c2 = load_vec<VEC>(cosv + crow * HEAD_DIM + j + HALF);
        const vec_t<VEC> s1 = load_vec<VEC>(sinv + crow * HEAD_DIM + j);
        const vec_t<VEC> s2 = load_vec<VEC>(sinv + crow * HEAD_DIM + j + HALF);
        vec_t<VEC> o1, o2;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float a = to_f(x1.v[k]), b = to_f(x2.v[k]);
            o1.v[k] = from_f(round_elem(a * to_f(c1.v[k])) + round_elem(-b * to_f(s1.v[k])));
            o2.v[k] = from_f(round_elem(b * to_f(c2.v[k])) + round_elem(a * to_f(s2.v[k])));
        }
        store_vec<VEC>(o + j, o1);
        store_vec<VEC>(o + j + HALF, o2);
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rope_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ cosv,
            const elem_t* __restrict__ sinv, const elem_t* __restrict__ cache,
            elem_t* __restrict__ out, long rows, int s_tot, int s_cur, int heads) {
    rope_part<0>((long)blockIdx.x * BLOCK + threadIdx.x, x, cosv, sinv, cache, out, rows, s_tot,
                 s_cur, heads);
}

// cat(cache, x, dim=seq) for a tensor appended unchanged (the value cache next to the key cache).
extern "C" __global__ void __launch_bounds__(BLOCK)
cat_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ cache,
           elem_t* __restrict__ out, long rows, int s_tot, int s_cur) {
    rope_part<1>((long)blockIdx.x * BLOCK + threadIdx.x, x, nullptr, nullptr, cache, out, rows,
                 s_tot, s_cur, 1);
}

#ifdef KIND1
// Both outputs in one launch: blocks [0, blocks0) the first, the rest the second.
extern "C" __global__ void __launch_bounds__(BLOCK)
rope2_kernel(const elem_t* __restrict__ cosv, const elem_t* __restrict__ sinv,
             const elem_t* __restrict__ x0, const elem_t* __restrict__ c0, elem_t* __restrict__ o0,
             long rows0, int s_tot0, int s_cur0, int heads0,
             const elem_t* __restrict__ x1, const elem_t* __restrict__ c1, elem_t* __restrict__ o1,
             long rows1, int s_tot1, int s_cur1, int heads1, int blocks0) {
    const int b = (int)blockIdx.x;
    if (b < blocks0)
        rope_part<KIND0>((long)b * BLOCK + threadIdx.x, x0, cosv, sinv, c0, o0, rows0, s_tot0,
                         s_cur0, heads0);
    else
        rope_part<KIND1>((long)(b - blocks0) * BLOCK + threadIdx.x, x1, cosv, sinv, c1, o1, rows1,
                         s_tot1, s_cur1, heads1);
}
#endif
