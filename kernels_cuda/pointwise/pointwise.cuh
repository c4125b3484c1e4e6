// Elementwise kernel skeleton for the pointwise family: float conversions, rounding to the
// 16-bit types, and vector loads/stores of V elements of any element type.
//
// The family generates, after this header: pw_eval (the reference's ops on one element, in
// float) and pointwise_kernel (which loads each input, calls pw_eval, stores each output).
// Tunables: VEC (elements per thread per step; inputs and outputs that have the output's shape
// are read/written with one VEC*sizeof(T)-byte access when that is 2..16 bytes), BLOCK (threads),
// UNROLL (steps per thread, loads of all steps issued before any math).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(bool v) { return v ? 1.0f : 0.0f; }

// One read-only element (__ldg has no bool overload: read the byte).
template <typename T> __device__ __forceinline__ T ldg1(const T* p) { return __ldg(p); }
template <> __device__ __forceinline__ bool ldg1<bool>(const bool* p) {
    return __ldg(reinterpret_cast<const unsigned char*>(p)) != 0;
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// A reference that keeps an intermediate in a 16-bit dtype rounds it there.
__device__ __forceinline__ float rnd_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float rnd_f16(float v) { return __half2float(__float2half_rn(v)); }

template <int BYTES> struct pw_raw { typedef void type; };
template <> struct pw_raw<16> { typedef uint4 type; };
template <> struct pw_raw<8> { typedef uint2 type; };
template <> struct pw_raw<4> { typedef unsigned int type; };
template <> struct pw_raw<2> { typedef unsigned short type; };

template <typename T, int V>
struct alignas(V * sizeof(T) <= 16 ? V * sizeof(T) : 16) pw_vec { T v[V]; };

// Raw bits and elements of one vector (the constructor: __half has a non-trivial one).
template <typename R, typename T, int V>
union pw_u {
    R raw;
    pw_vec<T, V> v;
    __device__ __forceinline__ pw_u() {}
};

// V consecutive elements from p (V * sizeof(T)-aligned) into f, one access when it fits.
template <typename T, int V>
__device__ __forceinline__ void load_f(const T* __restrict__ p, float* f) {
    constexpr int B = V * sizeof(T);
    if constexpr (B == 2 || B == 4 || B == 8 || B == 16) {
        typedef typename pw_raw<B>::type R;
        pw_u<R, T, V> u;
        u.raw = __ldg(reinterpret_cast<const R*>(p));
#pragma unroll
        for (int j = 0; j < V; ++j) f[j] = to_float(u.v.v[j]);
    } else if constexpr (B % 16 == 0) {
        // wider than one access (8 floats): 16-byte pieces, not V scalar loads
        constexpr int P = 16 / sizeof(T);
#pragma unroll
        for (int c = 0; c < V / P; ++c) load_f<T, P>(p + c * P, f + c * P);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) f[j] = to_float(p[j]);
    }
}

template <typename T, int V>
__device__ __forceinline__ void store_f(T* __restrict__ p, const float* f) {
    constexpr int B = V * sizeof(T);
    if constexpr (B == 2 || B == 4 || B == 8 || B == 16) {
        typedef typename pw_raw<B>::type R;
        pw_u<R, T, V> u;
#pragma unroll
        for (int j = 0; j < V; ++j) u.v.v[j] = from_float<T>(f[j]);
        *reinterpret_cast<R*>(p) = u.raw;
    } else if constexpr (B % 16 == 0) {
        constexpr int P = 16 / sizeof(T);
#pragma unroll
        for (int c = 0; c < V / P; ++c) store_f<T, P>(p + c * P, f + c * P);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) p[j] = from_float<T>(f[j]);
    }
}

// Elements e .. e+V-1 of a broadcast input read at in[(i / div) % mod]. One division per vector
// (32-bit whenever the numbers fit, which is every workload seen: a 64-bit division is ~70
// instructions), then the index steps along the vector; when the whole vector falls in one block
// of div elements it is one load for all V.
template <typename T, int V>
__device__ __forceinline__ void pw_bcast(const T* __restrict__ in, long e, long div, long mod, float* f) {
    long q, r;
    if (((unsigned long)e | (unsigned long)div | (unsigned long)mod) <= 0xffffffffUL) {
        const unsigned q32 = (unsigned)e / (unsigned)div;
        r = (long)((unsigned)e - q32 * (unsigned)div);
        q = (long)(q32 % (unsigned)mod);
    } else {
        const long q64 = e / div;
        r = e - q64 * div;
        q = q64 % mod;
    }
    if (r + V <= div) {
        const float v = to_float(ldg1(in + q));
#pragma unroll
        for (int j = 0; j < V; ++j) f[j] = v;
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
            f[j] = to_float(ldg1(in + q));
            if (++r == div) {
                r = 0;
                if (++q == mod) q = 0;
            }
        }
    }
}

// Ask L2 for the V elements at p (one prefetch per 128-byte line they touch; none is kept in a
// register).
template <typename T, int V>
__device__ __forceinline__ void pw_prefetch_l2(const T* p) {
    constexpr int B = V * sizeof(T);
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int c = 0; c < (B + 127) / 128; ++c)
        asm volatile("prefetch.global.L2 [%0];" :: "l"(reinterpret_cast<const char*>(p) + c * 128));
#endif
}
