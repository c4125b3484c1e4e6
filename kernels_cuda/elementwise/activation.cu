// Elementwise activations, optionally gated over the two halves of the last dimension.
//
// Problem params: DTYPE (common/dtype.cuh); OP 0 gelu_tanh(x), 1 geglu: gelu_tanh(x[..., :INNER])
//   * x[..., INNER:], 2 swiglu: silu(x[..., :INNER]) * x[..., INNER:]; INNER (gated ops: half of the
//   input's last dimension).
// Tunables: VEC (elements per load), BLOCK (threads), UNROLL (vectors per thread).
// Why: pure streaming, so 16-byte loads and stores, several independent loads in flight per
// thread, and the math (tanh, exp) done in float32 in the reference's order of operations.

#ifndef OP
#define OP 0
#endif
#ifndef INNER
#define INNER 1
#endif

__device__ __forceinline__ float gelu_tanh(float x) {
    // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), as written in the references
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    const float x3 = x * x * x;
    const float inner = k0 * (x + k1 * x3);
    return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

extern "C" __global__ void __launch_bounds__(BLOCK)
activation_kernel(const elem_t* __restrict__ x, elem_t* __restrict__ y, long n_out) {
    const long nvec = n_out / VEC;
    const long first = ((long)blockIdx.x * BLOCK * UNROLL) + threadIdx.x;
#if OP == 0
    vec_t<VEC> a[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long v = first + (long)u * BLOCK;
        if (v < nvec) a[u] = load_vec<VEC>(x + v * VEC);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long v = first + (long)u * BLOCK;
        if (v < nvec) {
            vec_t<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o.v[j] = from_f(gelu_tanh(to_f(a[u].v[j])));
            store_vec<VEC>(y + v * VEC, o);
        }
    }
#else
    static_assert(INNER % VEC == 0, "VEC must divide INNER");
    vec_t<VEC> g[UNROLL], l[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long v = first + (long)u * BLOCK;
        if (v < nvec) {
            const long o = v * VEC;
            const long row = o / INNER, col = o - row * INNER;
            const elem_t* src = x + row * (2L * INNER) + col;
            g[u] = load_vec<VEC>(src);
            l[u] = load_vec<VEC>(src + INNER);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long v = first + (long)u * BLOCK;
        if (v < nvec) {
            vec_t<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
#if OP == 1
                const float act = gelu_tanh(to_f(g[u].v[j]));
#else
                const float act = silu(to_f(g[u].v[j]));
#endif
#if DTYPE != 0
                // torch returns the activation in the dtype before the product: round it the same way
                o.v[j] = from_f(round_elem(act) * to_f(l[u].v[j]));
#else
                o.v[j] = from_f(act * to_f(l[u].v[j]));
#endif
            }
            store_vec<VEC>(y + v * VEC, o);
        }
    }
#endif
}
