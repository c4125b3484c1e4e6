// Multi-axis RoPE frequency tables (Flux / FluxPosEmbed style), cos and sin, float32:
//   for each axis a of size AXIS_a (concatenated along the last dimension, TOTAL = sum):
//     k        = (j - offset_a) / 2                 (each frequency twice: repeat_interleave)
//     freq     = 1 / theta ** (k / (AXIS_a / 2))    (k / half as k * (1 / half): PyTorch's
//                                                    CUDA division by a Python scalar)
//     cos[s,j] = cos(ids[s, a] * freq), sin[s,j] = sin(ids[s, a] * freq)
// each step in float32 in the reference's order (powf, the reciprocal, one product), so the
// tables match PyTorch's to the last bit except where libm's cosf/sinf differ.
//
// Problem params: N_AXES (1..4), AXIS0..AXIS3 (sizes, even), TOTAL.
// Tunables: VEC (outputs per thread, 1/2/4, dividing every axis), BLOCK (threads).
// Why: the reference launches ~10 small kernels per axis (arange, pow, reciprocal, outer
// product, cos, sin, repeat_interleave, cat); this is one pass that writes each output once.

#ifndef AXIS1
#define AXIS1 0
#endif
#ifndef AXIS2
#define AXIS2 0
#endif
#ifndef AXIS3
#define AXIS3 0
#endif
static_assert(AXIS0 + AXIS1 + AXIS2 + AXIS3 == TOTAL, "axes must add up to TOTAL");
static_assert(AXIS0 % VEC == 0 && AXIS1 % VEC == 0 && AXIS2 % VEC == 0 && AXIS3 % VEC == 0,
              "VEC must divide every axis");

extern "C" __global__ void __launch_bounds__(BLOCK)
rope_freqs_kernel(const float* __restrict__ ids, float* __restrict__ out_cos,
                  float* __restrict__ out_sin, long seq, float theta) {
    const long t = (long)blockIdx.x * BLOCK + threadIdx.x;
    const long e = t * VEC;
    if (e >= seq * TOTAL) return;
    const long s = e / TOTAL;
    const int j0 = (int)(e - s * TOTAL);
    int a = 0, off = 0, dim = AXIS0;
    if (N_AXES > 1 && j0 >= AXIS0) { a = 1; off = AXIS0; dim = AXIS1; }
    if (N_AXES > 2 && j0 >= AXIS0 + AXIS1) { a = 2; off = AXIS0 + AXIS1; dim = AXIS2; }
    if (N_AXES > 3 && j0 >= AXIS0 + AXIS1 + AXIS2) { a = 3; off = AXIS0 + AXIS1 + AXIS2; dim = AXIS3; }
    const float pos = __ldg(ids + s * N_AXES + a);
    const float inv_half = 1.0f / (float)(dim / 2);
    float c[VEC], sn[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
        const int k = (j0 + v - off) / 2;
        const float freq = 1.0f / powf(theta, (float)k * inv_half);
        const float ang = pos * freq;
        c[v] = cosf(ang);
        sn[v] = sinf(ang);
    }
    if constexpr (VEC == 4) {
        *reinterpret_cast<float4*>(out_cos + e) = make_float4(c[0], c[1], c[2], c[3]);
        *reinterpret_cast<float4*>(out_sin + e) = make_float4(sn[0], sn[1], sn[2], sn[3]);
    } else if constexpr (VEC == 2) {
        *reinterpret_cast<float2*>(out_cos + e) = make_float2(c[0], c[1]);
        *reinterpret_cast<float2*>(out_sin + e) = make_float2(sn[0], sn[1]);
    } else {
        out_cos[e] = c[0];
        out_sin[e] = sn[0];
    }
}
