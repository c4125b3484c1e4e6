"""Run a family's CUDA kernel source on the CPU: g++ with a shim where every CUDA thread of a block
is a std::thread (blocks one after another), __syncthreads and warp shuffles are block barriers,
__shared__ is a static (one block at a time), atomics take a mutex, and bf16/fp16 are host types
with round-to-nearest-even conversions.

For the tests of kernels whose index math, load/store paths, reductions and launch grids change
(rmsnorm, pointwise): the kernel text is the one NVRTC compiles, minus its #include lines. A
barrier that only some threads of a block reach would hang: the shim is for kernels whose
__syncthreads / __shfl_xor_sync are reached by every thread (both families are written so).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

HAVE_GXX = shutil.which("g++") is not None

SHIM = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct emu_dim { unsigned x = 0, y = 0, z = 0; };
thread_local emu_dim threadIdx, blockIdx;
emu_dim gridDim, blockDim;
static std::barrier<>* emu_bar = nullptr;
static std::mutex emu_mu;
static float emu_xch[1024];
inline void __syncthreads() { emu_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    emu_xch[threadIdx.x] = v; emu_bar->arrive_and_wait();
    float r = emu_xch[threadIdx.x ^ o]; emu_bar->arrive_and_wait(); return r;
}
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> g(emu_mu); float o = *p; *p = o + v; return o; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { std::lock_guard<std::mutex> g(emu_mu); unsigned o = *p; *p = o + v; return o; }
template <typename T> inline T atomicExch(T* p, T v) { std::lock_guard<std::mutex> g(emu_mu); T o = *p; *p = v; return o; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __trap() { std::fprintf(stderr, "__trap\n"); std::abort(); }
template <typename T> inline T __ldg(const T* p) { return *p; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct __nv_bfloat16 { uint16_t x; };
struct __half { uint16_t x; };
inline float __bfloat162float(__nv_bfloat16 v) { uint32_t u = (uint32_t)v.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
    u = u + 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)};
}
inline float __half2float(__half v) { _Float16 h; std::memcpy(&h, &v.x, 2); return (float)h; }
inline __half __float2half_rn(float f) { _Float16 h = (_Float16)f; __half r; std::memcpy(&r.x, &h, 2); return r; }
"""

LAUNCH = r"""
template <typename F>
void emu_launch(unsigned grid, unsigned block, F body, unsigned grid_y = 1) {
    gridDim.x = grid; gridDim.y = grid_y; blockDim.x = block;
    for (unsigned by = 0; by < grid_y; ++by)
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(block);
        emu_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t)
            ts.emplace_back([=] { blockIdx.x = b; blockIdx.y = by; threadIdx.x = t; body(); });
        for (auto& th : ts) th.join();
    }
}
template <typename T> std::vector<T> emu_read(FILE* f, size_t n) {
    std::vector<T> v(n); if (n && std::fread(v.data(), sizeof(T), n, f) != n) std::abort(); return v;
}
"""


def kernel_text(source: str) -> str:
    """The kernel source without #include / #pragma once lines (the shim provides the CUDA parts)."""
    return "\n".join(l for l in source.splitlines()
                     if not re.match(r"\s*#\s*(include|pragma\s+once)", l))


def defines(params: dict) -> str:
    return "".join(f"#define {k} {int(v) if isinstance(v, bool) else v}\n" for k, v in sorted(params.items()))


def build_and_run(tmp: Path, source: str, main: str, inputs: list[np.ndarray],
                  out_bytes: int) -> bytes:
    """Compile SHIM + source + LAUNCH + main; main reads the concatenated raw `inputs` from in.bin
    and writes its outputs (out_bytes) to out.bin."""
    (tmp / "emu.cpp").write_text(SHIM + source + "\n" + LAUNCH + main)
    r = subprocess.run(["g++", "-O0", "-std=c++20", "-ffp-contract=off", "-w", "-pthread", "emu.cpp",
                        "-o", "emu"], cwd=tmp, capture_output=True, text=True)
    if r.returncode:
        raise AssertionError("g++ failed:\n" + r.stderr[-4000:])
    with open(tmp / "in.bin", "wb") as f:
        for a in inputs:
            f.write(np.ascontiguousarray(a).tobytes())
    subprocess.run(["./emu"], cwd=tmp, check=True, timeout=120)
    data = (tmp / "out.bin").read_bytes()
    assert len(data) == out_bytes, (len(data), out_bytes)
    return data


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)
