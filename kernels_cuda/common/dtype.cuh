// Element type selected by the DTYPE param (0 float32, 1 float16, 2 bfloat16), with float
// conversions and a 16/8/4/2-byte vector of VEC elements. Included by every family's kernel.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef DTYPE
#define DTYPE 2
#endif

#if DTYPE == 2
typedef __nv_bfloat16 elem_t;
__device__ __forceinline__ float to_f(elem_t v) { return __bfloat162float(v); }
__device__ __forceinline__ elem_t from_f(float v) { return __float2bfloat16_rn(v); }
#elif DTYPE == 1
typedef __half elem_t;
__device__ __forceinline__ float to_f(elem_t v) { return __half2float(v); }
__device__ __forceinline__ elem_t from_f(float v) { return __float2half_rn(v); }
#else
typedef float elem_t;
__device__ __forceinline__ float to_f(elem_t v) { return v; }
__device__ __forceinline__ elem_t from_f(float v) { return v; }
#endif

// Round a float to the element type and back: reproduces a reference that stores an
// intermediate in the input dtype.
__device__ __forceinline__ float round_elem(float v) { return to_f(from_f(v)); }

template <int N>
struct alignas(N * sizeof(elem_t)) vec_t {
    elem_t v[N];
};

// Raw integer type of a vector of N elements, for one wide load/store instruction.
template <int BYTES> struct raw_of;
template <> struct raw_of<16> { typedef uint4 type; };
template <> struct raw_of<8> { typedef uint2 type; };
template <> struct raw_of<4> { typedef unsigned int type; };
template <> struct raw_of<2> { typedef unsigned short type; };

template <int N>
union vec_u {
    typename raw_of<N * sizeof(elem_t)>::type raw;
    vec_t<N> v;
    __device__ __forceinline__ vec_u() {}
};

// Read-only global load of one vector through the non-coherent path (data not written here).
template <int N>
__device__ __forceinline__ vec_t<N> load_vec(const elem_t* p) {
    vec_u<N> u;
    u.raw = __ldg(reinterpret_cast<const typename raw_of<N * sizeof(elem_t)>::type*>(p));
    return u.v;
}

template <int N>
__device__ __forceinline__ void store_vec(elem_t* p, const vec_t<N>& v) {
    vec_u<N> u;
    u.v = v;
    *reinterpret_cast<typename raw_of<N * sizeof(elem_t)>::type*>(p) = u.raw;
}
