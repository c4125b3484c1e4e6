"""Sample candidates used by the tests, the compile benchmark and the GPU check. Small and honest:
each one exercises a path of compile or launch (headers, inline PTX, cluster launch, big smem).
"""

from __future__ import annotations

SCALE_CU = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}
"""

# fp8 (e4m3) in, bf16 out, with a per-tensor scale: pulls in cuda_fp8.h and cuda_bf16.h
DEQUANT_CU = r"""
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda/std/cstdint>

extern "C" __global__ void dequant_fp8_bf16(const __nv_fp8_e4m3* __restrict__ q, const float* __restrict__ scale,
                                            __nv_bfloat16* __restrict__ out, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
        if (i + v < n) out[i + v] = __float2bfloat16(float(q[i + v]) * scale[0]);
}
"""

# a thread-block cluster launch (cluster dims come from the launch spec) plus > 48 KB of dynamic
# shared memory: each block stages its slice through smem, and reads its cluster rank through PTX
CLUSTER_SMEM_CU = r"""
#include <cuda/std/cstdint>
extern "C" __global__ void cluster_copy(const float* __restrict__ x, float* __restrict__ y,
                                        int* __restrict__ rank_out, int n) {
    extern __shared__ float buf[];
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    int base = blockIdx.x * TILE;
    for (int j = threadIdx.x; j < TILE; j += blockDim.x)
        buf[j] = (base + j < n) ? x[base + j] : 0.f;
    __syncthreads();
    for (int j = threadIdx.x; j < TILE; j += blockDim.x)
        if (base + j < n) y[base + j] = buf[TILE - 1 - j] + 1.0f;
    if (threadIdx.x == 0) rank_out[blockIdx.x] = (int)rank;
}
"""

# Hopper: TMA (cp.async.bulk.tensor + mbarrier transaction counts) feeding wgmma.mma_async.
# Compiled in CI for sm_90a and checked for HGMMA / UTMALDG / SYNCS in the SASS.
WGMMA_TMA_CU = r"""
#include <cuda/std/cstdint>
struct alignas(64) TmaDesc { unsigned long long raw[16]; };  // CUtensorMap, encoded by the host into global memory

__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ inline uint64_t make_desc(const void* smem) {
    uint64_t addr = (smem_u32(smem) & 0x3FFFF) >> 4;
    return addr | (uint64_t(1) << 16) | (uint64_t(64) << 32) | (uint64_t(1) << 62);  // 128B swizzle
}

extern "C" __global__ void __launch_bounds__(128) wgmma_tma_tile(const TmaDesc* __restrict__ tma_a,
                                                                 const TmaDesc* __restrict__ tma_b,
                                                                 float* __restrict__ out) {
    __shared__ alignas(1024) uint16_t sA[64 * 16];
    __shared__ alignas(1024) uint16_t sB[8 * 16];
    __shared__ alignas(8) uint64_t bar;
    uint32_t bar_addr = smem_u32(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
        asm volatile("fence.proxy.async.shared::cta;");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_addr), "r"((int)(sizeof(sA) + sizeof(sB))) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem_u32(sA)), "l"(tma_a), "r"(0), "r"((int)blockIdx.x * 64), "r"(bar_addr)
                     : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem_u32(sB)), "l"(tma_b), "r"(0), "r"(0), "r"(bar_addr) : "memory");
    }
    __syncthreads();
    asm volatile("{\n .reg .pred done;\n WAIT:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 " @!done bra WAIT;\n}" :: "r"(bar_addr) : "memory");
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    uint64_t da = make_desc(sA), db = make_desc(sB);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float* o = out + (blockIdx.x * 128 + threadIdx.x) * 4;
    o[0] = d0; o[1] = d1; o[2] = d2; o[3] = d3;
}
"""

# Blackwell: tcgen05 tensor-memory alloc, MMA from smem descriptors into TMEM, commit to an mbarrier,
# load back to registers. Compiled in CI for sm_100a and checked for UTC* instructions in the SASS.
TCGEN05_CU = r"""
#include <cuda/std/cstdint>
__device__ inline uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

extern "C" __global__ void __launch_bounds__(128) tcgen05_tile(float* __restrict__ out, uint64_t desc_a,
                                                               uint64_t desc_b, uint32_t idesc) {
    __shared__ uint32_t tmem_base;
    __shared__ alignas(8) uint64_t bar;
    uint32_t warp = threadIdx.x / 32;
    if (warp == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;"
                     :: "r"(smem_u32(&tmem_base)));
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
    }
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&bar)));
    asm volatile("tcgen05.fence::before_thread_sync;");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;");
    uint32_t tmem = tmem_base;
    if (threadIdx.x == 0) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
                     " tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}"
                     :: "r"(tmem), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(0));
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_u32(&bar)) : "memory");
    }
    asm volatile("{\n .reg .pred done;\n WAIT:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 " @!done bra WAIT;\n}" :: "r"(smem_u32(&bar)) : "memory");
    uint32_t v;
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];"
                 : "=r"(v) : "r"(tmem + ((warp * 32) << 16)));
    asm volatile("tcgen05.wait::ld.sync.aligned;");
    out[blockIdx.x * 128 + threadIdx.x] = __uint_as_float(v);
    __syncthreads();
    if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(tmem));
}
"""


# launch args that match each sample kernel's parameter list
SAMPLE_ARGS = {
    "scale": ["x", "y", "float32:2.0", "int32:n"],
    "dequant_fp8_bf16": ["q", "scale", "out", "int32:n"],
    "cluster_copy": ["x", "y", "ranks", "int32:n"],
    "wgmma_tma_tile": ["a_desc", "b_desc", "out"],
    "tcgen05_tile": ["out", "uint64:0", "uint64:0", "uint32:0"],
}


def candidate(source: str, kernel: str, *, name: str = "kernel.cu", params: dict | None = None,
              args: list[str] | None = None, grid=("1",), block=("128",), smem: str = "0",
              cluster=None, options: list[str] | None = None) -> dict:
    """A one-launch Candidate dict around a source."""
    launch = {"kernel": kernel, "grid": list(grid), "block": list(block), "smem": smem,
              "args": SAMPLE_ARGS.get(kernel, []) if args is None else args}
    if cluster:
        launch["cluster"] = list(cluster)
    return {"problem": "sample", "language": "cuda", "sources": {name: source},
            "params": params or {}, "launches": [launch], "options": options or []}


# CuTe DSL: y = x * s over n elements; flat parameters (pointers + scalars) as cute_backend wants
SCALE_CUTE = r'''
import cutlass
import cutlass.cute as cute

DTYPES = {"x": cutlass.Float32, "y": cutlass.Float32}


@cute.kernel
def scale_cute(x: cute.Pointer, y: cute.Pointer, s: cutlass.Float32, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    mX = cute.make_tensor(x, cute.make_layout(n))
    mY = cute.make_tensor(y, cute.make_layout(n))
    i = bidx * BLOCK + tidx
    if i < n:
        mY[i] = mX[i] * s
'''


def cute_candidate(source: str = SCALE_CUTE, kernel: str = "scale_cute", block: int = 256) -> dict:
    return {"problem": "sample", "language": "cute", "sources": {"kernel.py": source},
            "params": {"BLOCK": block},
            "launches": [{"kernel": kernel, "grid": ["ceil_div(n, BLOCK)"], "block": ["BLOCK"],
                          "args": ["x", "y", "float32:2.0", "int32:n"]}]}


def gpu_check_cases() -> dict[str, dict]:
    """Candidates the GPU test launches (tests/gpu/test_compile_launch.py): one per launcher path."""
    scale_twice = candidate(SCALE_CU, "scale", args=["x", "workspace", "float32:2.0", "int32:n"],
                            grid=["ceil_div(n, BLOCK)"], block=["BLOCK"], params={"BLOCK": 256})
    scale_twice["launches"].append({"kernel": "scale", "grid": ["ceil_div(n, BLOCK)"], "block": ["BLOCK"],
                                    "args": ["workspace", "y", "float32:3.0", "int32:n"]})
    scale_twice["workspace"] = "n * 4"
    return {
        "scale": candidate(SCALE_CU, "scale", grid=["ceil_div(n, BLOCK)"], block=["BLOCK"],
                           params={"BLOCK": 128}),
        "scale_twice_workspace": scale_twice,
        "dequant": candidate(DEQUANT_CU, "dequant_fp8_bf16", params={"VEC": 4, "BLOCK": 128},
                             grid=["ceil_div(n, BLOCK * VEC)"], block=["BLOCK"]),
        "cluster_smem": candidate(CLUSTER_SMEM_CU, "cluster_copy", params={"TILE": 16384},
                                  grid=["ceil_div(n, TILE)"], block=["256"], smem="TILE * 4",
                                  cluster=["2", "1", "1"]),
        "cute_scale": cute_candidate(block=256),
    }
