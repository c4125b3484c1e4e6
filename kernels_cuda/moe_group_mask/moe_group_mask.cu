// MoE group score aggregation and masking (SOL-ExecBench L1/059), float32:
//   scores [T, NUM_EXPERTS] viewed as [T, N_GROUP, 32];
//   group score g   = top1 + top2 of the group's 32 values (torch.topk(k=2) values, summed in fp32)
//   selected groups = the TOPK_GROUP largest group scores (torch.topk(k=TOPK_GROUP))
//   group_mask[t, g]    = 1.0 if g is selected else 0.0
//   masked_scores[t, e] = scores[t, e] if e's group is selected else -inf
//
// Layout: a warp per token row (ROWS_PER_WARP consecutive rows per warp, all loaded up front for
// memory-level parallelism). The row is 256 floats = 1 KiB: lane l loads experts [8l, 8l + 8) with
// two 16-byte loads, so the 4 lanes 4g..4g+3 hold group g (32 experts). Per lane: top-2 values of
// its 8; then two xor-shuffle merges (offsets 1, 2) give each lane its group's top-2 values; the
// group score is top1 + top2 in fp32 (the reference sums the two sorted topk values: one fp32 add).
// Every lane then reads the 8 group scores (shuffles from lanes 4j) and ranks its own group: the
// number of groups that rank above it, where j ranks above g if s_j > s_g, or s_j == s_g and j < g
// (ties go to the lower group index). Selected <=> rank < TOPK_GROUP. A ballot collects the 8 bits;
// lanes 0 and 1 store the 8 mask floats as two float4; every lane stores its 8 masked scores as
// two float4 (-inf where its group is not selected).
//
// NaN: torch.topk orders NaN above every number. The comparisons below (`above`) do the same, so
// a group holding a NaN has a NaN score that ranks above every non-NaN group, and NaN inputs pass
// through masked_scores where selected (masked_fill replaces them with -inf elsewhere), as in the
// reference. Two NaN group scores count as a tie (lower index first); torch's order among NaN
// groups is unspecified, so that case may differ (and an exact tie at the TOPK_GROUP-th place).
//
// Problem params: NUM_EXPERTS (256), N_GROUP (8), TOPK_GROUP (1..8).
// Tunables: ROWS_PER_WARP (1/2/4), WARPS_PER_CTA (4/8), STREAM (1: loads with
// ld.global.nc.L1::no_allocate and streaming stores st.global.cs; 0: __ldg and plain stores).

#define NEG_INF __int_as_float(0xff800000)   // -inf (NVRTC has no INFINITY macro)

static_assert(NUM_EXPERTS == 256 && N_GROUP == 8, "the lane layout wants 256 experts in 8 groups of 32");
static_assert(TOPK_GROUP >= 1 && TOPK_GROUP <= N_GROUP, "TOPK_GROUP in 1..N_GROUP");
static_assert(ROWS_PER_WARP >= 1 && ROWS_PER_WARP <= 8, "ROWS_PER_WARP in 1..8");

// a ranks above b in torch.topk's order (NaN above every number)
__device__ __forceinline__ bool above(float a, float b) {
    return a > b || (a != a && b == b);
}

// equal in that order (two NaNs are equal)
__device__ __forceinline__ bool same(float a, float b) {
    return a == b || (a != a && b != b);
}

__device__ __forceinline__ float4 load4(const float* p) {
#if STREAM
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#else
    return __ldg(reinterpret_cast<const float4*>(p));
#endif
}

__device__ __forceinline__ void store4(float* p, float4 v) {
#if STREAM
    __stcs(reinterpret_cast<float4*>(p), v);
#else
    *reinterpret_cast<float4*>(p) = v;
#endif
}

// insert v into the sorted pair (t1 >= t2)
__device__ __forceinline__ void push2(float& t1, float& t2, float v) {
    if (above(v, t1)) { t2 = t1; t1 = v; }
    else if (above(v, t2)) { t2 = v; }
}

extern "C" __global__ void __launch_bounds__(WARPS_PER_CTA * 32)
moe_group_mask_kernel(const float* __restrict__ scores, float* __restrict__ masked_scores,
                      float* __restrict__ group_mask, long num_tokens) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const long row0 = ((long)blockIdx.x * WARPS_PER_CTA + warp) * ROWS_PER_WARP;
    if (row0 >= num_tokens) return;

    float4 v[ROWS_PER_WARP][2];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        if (row0 + r < num_tokens) {
            const float* p = scores + (row0 + r) * NUM_EXPERTS + lane * 8;
            v[r][0] = load4(p);
            v[r][1] = load4(p + 4);
        }
    }

    const int g = lane >> 2;   // this lane's group
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        if (row0 + r >= num_tokens) break;   // warp-uniform
        const float x[8] = {v[r][0].x, v[r][0].y, v[r][0].z, v[r][0].w,
                            v[r][1].x, v[r][1].y, v[r][1].z, v[r][1].w};
        // top-2 values of the lane's 8
        float t1, t2;
        if (above(x[1], x[0])) { t1 = x[1]; t2 = x[0]; } else { t1 = x[0]; t2 = x[1]; }
#pragma unroll
        for (int i = 2; i < 8; ++i) push2(t1, t2, x[i]);
        // merge with the other 3 lanes of the group: xor 1, then xor 2
#pragma unroll
        for (int off = 1; off <= 2; off <<= 1) {
            const float b1 = __shfl_xor_sync(0xffffffffu, t1, off);
            const float b2 = __shfl_xor_sync(0xffffffffu, t2, off);
            if (above(b1, t1)) {            // b1 first; second is the better of t1, b2
                t2 = above(b2, t1) ? b2 : t1;
                t1 = b1;
            } else {                         // t1 first; second is the better of t2, b1
                t2 = above(b1, t2) ? b1 : t2;
            }
        }
        const float mine = t1 + t2;          // this lane's group score
        int rank = 0;
#pragma unroll
        for (int j = 0; j < N_GROUP; ++j) {
            const float sj = __shfl_sync(0xffffffffu, mine, 4 * j);
            rank += (above(sj, mine) || (same(sj, mine) && j < g)) ? 1 : 0;
        }
        const bool sel = rank < TOPK_GROUP;
        const unsigned bits = __ballot_sync(0xffffffffu, sel);   // bit 4j: group j selected
        const long row = row0 + r;
        if (lane < 2) {
            const int j0 = lane * 4;
            float4 m;
            m.x = (bits >> (4 * (j0 + 0))) & 1u ? 1.0f : 0.0f;
            m.y = (bits >> (4 * (j0 + 1))) & 1u ? 1.0f : 0.0f;
            m.z = (bits >> (4 * (j0 + 2))) & 1u ? 1.0f : 0.0f;
            m.w = (bits >> (4 * (j0 + 3))) & 1u ? 1.0f : 0.0f;
            store4(group_mask + row * N_GROUP + j0, m);
        }
        float4 o0 = v[r][0], o1 = v[r][1];
        if (!sel) {
            o0 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            o1 = o0;
        }
        float* q = masked_scores + row * NUM_EXPERTS + lane * 8;
        store4(q, o0);
        store4(q + 4, o1);
    }
}
