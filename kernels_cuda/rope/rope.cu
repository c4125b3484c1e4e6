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

extern "C" __global__ void __launch_bounds__(BLOCK)
rope_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ cosv,
            const elem_t* __restrict__ sinv, const elem_t* __restrict__ cache,
            elem_t* __restrict__ out, long rows, int s_tot, int s_cur, int heads) {
    const long t = (long)blockIdx.x * BLOCK + threadIdx.x;
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

// cat(cache, x, dim=seq) for a tensor appended unchanged (the value cache next to the key cache).
extern "C" __global__ void __launch_bounds__(BLOCK)
cat_kernel(const elem_t* __restrict__ x, const elem_t* __restrict__ cache,
           elem_t* __restrict__ out, long rows, int s_tot, int s_cur) {
    const long t = (long)blockIdx.x * BLOCK + threadIdx.x;
    const long row = t / TPR;
    if (row >= rows) return;
    const int j = (int)(t % TPR) * VEC;
    const long bh = row / s_tot;
    const int s = (int)(row - bh * s_tot);
    const elem_t* src = s < s_cur ? cache + (bh * s_cur + s) * HEAD_DIM
                                  : x + (bh * (s_tot - s_cur) + (s - s_cur)) * HEAD_DIM;
    elem_t* o = out + row * HEAD_DIM;
    store_vec<VEC>(o + j, load_vec<VEC>(src + j));
    store_vec<VEC>(o + j + HALF, load_vec<VEC>(src + j + HALF));
}
