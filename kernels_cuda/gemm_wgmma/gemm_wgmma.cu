// C[M,N] = A[M,K] @ B[N,K]^T (torch.matmul(A, B.T)), fp16 or bf16 in and out, fp32 accumulation,
// for sm_90a: wgmma.mma_async from shared memory, fed by a cp.async producer warpgroup through an
// mbarrier ring (warp specialization). TMA=1: one producer thread loads the stages with
// cp.async.bulk.tensor instead, from two host-encoded CUtensorMaps passed as __grid_constant__
// parameters after the plain ones (launch args "tmap:A:64,64:sw128", "tmap:B:64,64:sw128", see
// docs/candidate_format.md); the shared-memory layout the consumers read is the same.
//
// Block: warpgroup 0 = producer (128 threads: cp.async 16-byte copies into 128B-swizzled shared
// memory, completion signalled with cp.async.mbarrier.arrive.noinc); warpgroups 1..NWG = consumers
// (NWG = BM / 64, at most 2; each owns BM / NWG rows of the BM x BN tile, as one or two 64-row atoms,
// and issues m64nBNk16 wgmmas).
//
// Three tiers picked at run time by M (the launch grid/block/smem expressions use the same rule),
// so one candidate serves M = 1 .. 16k:  tier 0 (M <= T0_MAXM), tier 1 (M <= T1_MAXM), tier 2.
// Tier params Tt_{BM (64|128|256: tiers 0, 1 with BN <= 128), BN (64|128|256), ST (stages), SPLIT
// (split-K; tier 2: 1)}.
// Split-K: each CTA writes an fp32 partial tile to the workspace; the last CTA of the tile (atomic
// ticket, TICKETS ints at the start of the workspace) sums the partials in split order and writes C.
//
// Problem params: DTYPE (1 fp16, 2 bf16), NN, KK (constant N, K), TICKETS, WATCHDOG (1: an mbarrier
// wait longer than 2 s traps instead of hanging the GPU).
//
// ------------------------------------------------------------------------------------------------
// Shared-memory layout and the wgmma matrix descriptor (why each field has its value)
// ------------------------------------------------------------------------------------------------
// A k-tile is BK = 64 elements = 128 bytes of one row: exactly one row of the 128-byte swizzle
// atom. A tile of R rows (R = BM for A, BN for B; both operands are K-major, i.e. "row-major
// [rows][K]") is stored as R rows of 128 bytes, row r at byte r*128, and the 16-byte chunk c of
// that row (elements 8c .. 8c+7) at chunk position (c XOR (r & 7)):
//        byte(r, c) = r*128 + ((c ^ (r & 7)) << 4)
// This is the hardware's 128B swizzle ("Swizzle<3,4,3>"): address bits [4:6] XOR address bits
// [7:9], applied to the address *inside an aligned 1024-byte block* (8 rows x 128 bytes). It only
// matches our store pattern if every tile starts at a 1024-byte aligned shared address: the
// dynamic shared base is rounded up to 1024 at run time, and each stage / tile size is a multiple
// of 1024 (R*128 with R a multiple of 64).
//
// Descriptor (64 bits, PTX ISA "matrix descriptor" for wgmma):
//   bits  0-13  start address >> 4  (shared address of the first element the wgmma reads; 18 bits
//               of address, 16-byte units)
//   bits 16-29  leading-dimension byte offset >> 4: the distance between core matrices along K.
//               For K-major operands in a swizzled mode the whole K extent of one wgmma (16
//               elements = 32 bytes) lies inside one 128-byte swizzle row, so it is not used;
//               set to 1 (16 bytes) as CUTLASS does.
//   bits 32-45  stride-dimension byte offset >> 4: the distance between consecutive groups of 8
//               rows (core matrices along M or N) = 8 rows * 128 bytes = 1024 -> 64.
//   bits 49-51  base offset = 0: the swizzle pattern starts at a 1024-aligned address (above).
//   bits 62-63  layout: 1 = 128-byte swizzle (0 none, 2 = 64B, 3 = 32B).
// K steps inside the 64-wide k-tile (kk = 0..3, 16 elements each) advance the start address by
// kk*32 bytes. Why that is right: the hardware forms the address of logical (row r, chunk c') as
// start + r*128 + c'*16 = tile + r*128 + (2kk + c')*16 (no carry out of bits 4-6 since
// 2kk + c' <= 7), then XORs bits [4:6] with bits [7:9] = r & 7, giving chunk (2kk + c') ^ (r & 7):
// exactly where the producer stored chunk c = 2kk + c' of row r.
// Consumer warpgroup w reads A rows 64w .. 64w+63: start = A tile + w*64*128 (1024-aligned).
// The B operand is the whole BN x 64 tile: N = BN rows, same descriptor form (trans-b = 0 means
// K-major, which is how B [N, K] is stored). trans-a = 0 likewise for A [M, K].
//
// Accumulator layout of m64nNk16 (f32): thread t of the warpgroup (warp w = t/32, lane l) holds
// d[i], i < N/2, for row 16w + l/4 + 8*((i/2)&1) and column 8*(i/4) + 2*(l%4) + (i&1).
//
// Pipeline (ST stages, k-tile kt uses stage s = kt % ST in round r = kt / ST):
//   full[s]  (count 128): each producer thread's cp.async.mbarrier.arrive.noinc fires when its own
//            copies of that stage have landed (noinc: the arrive counts toward the 128).
//   empty[s] (count 128*NWG): every consumer thread arrives once its wgmmas reading s completed.
//   Producer, round r: wait empty[s] parity (r&1)^1 (r = 0 passes at once: a fresh barrier counts
//   its "preceding phase" as complete), copy, arrive full[s].  Consumer: wait full[s] parity r&1,
//   fence.proxy.async (cp.async wrote through the generic proxy, wgmma reads through the async
//   proxy), wgmma x4, commit, wait until only this group is in flight, release stage of kt-1.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define BK 64          // k elements per stage: one 128-byte swizzle row of fp16/bf16
#define ROW_BYTES 128  // BK * 2
#define MAX_ST 8
#define MAX_THREADS 384

#ifndef DTYPE
#define DTYPE 1
#endif
#ifndef WATCHDOG
#define WATCHDOG 1
#endif
#ifndef CSPLIT     // 1: split-K CTAs of a tile form a cluster and sum through DSMEM (no workspace)
#define CSPLIT 0
#endif
#ifndef EVF        // 1: B loaded with L2 evict-first where one CTA (row) reads each B element
#define EVF 0
#endif
#ifndef MSKIP      // 1: consumer warpgroups whose rows all lie past M skip their wgmmas (0 until an
#define MSKIP 0    // H200 run has checked it: the measured best/ params do not set it)
#endif
#ifndef T2_GROUP   // tier 2 raster: groups of T2_GROUP M-tiles sweep all N-tiles (0: M-tiles fastest)
#define T2_GROUP 16
#endif
#ifndef T2_ORDER   // persistent tier 2: tile of a CTA in round j: 0 blockIdx.x + j*gridDim.x; 1 serpentine
#define T2_ORDER 0 // (odd rounds reversed: a CTA that got an early tile gets a late one; the cheap tiles
#endif             //  of a ragged last M-tile, see MSKIP, come last in the raster and are spread out)
#ifndef T2_EPI     // tier 2 epilogue: 0 direct 4-byte stores, 1 through shared memory, 16-byte stores
#define T2_EPI 0
#endif
#ifndef TMA        // 1: the wgmma tiers' producer is one thread issuing TMA tile loads (two host-encoded
#define TMA 0      // CUtensorMaps of A and B, 64 x 64 boxes, 128B swizzle: extra kernel parameters)
#endif
#ifndef T2_SWZ     // tier 2 raster (non-persistent, T2_GROUP > 0): 0 as T2_GROUP says; 1 the same groups,
#define T2_SWZ 0   // the N-tile order within a group alternating per group (serpentine over N)
#endif
#ifndef TS0_MAXM   // skinny tiers off unless the candidate sets them
#define TS0_MAXM 0
#define TS0_MT 1
#define TS0_RT 1
#define TS0_WR 1
#define TS0_WK 8
#define TS0_KJ 4
#define TS0_CL 1
#endif
#ifndef TS1_MAXM
#define TS1_MAXM TS0_MAXM
#define TS1_MT TS0_MT
#define TS1_RT TS0_RT
#define TS1_WR TS0_WR
#define TS1_WK TS0_WK
#define TS1_KJ TS0_KJ
#define TS1_CL TS0_CL
#endif
#if DTYPE == 2
typedef __nv_bfloat16 half_t;
typedef __nv_bfloat162 half2_t;
#define WG_TYPE "bf16"
__device__ __forceinline__ half2_t pack2(float a, float b) { return __floats2bfloat162_rn(a, b); }
#else
typedef __half half_t;
typedef __half2 half2_t;
#define WG_TYPE "f16"
__device__ __forceinline__ half2_t pack2(float a, float b) { return __floats2half2_rn(a, b); }
#endif

namespace {

// consumer warpgroups of a BM-row tile: one per 64 rows, at most 2 (MAX_THREADS); BM = 256 gives
// each of the two warpgroups two 64-row atoms. The launch's block (128 + 2 * min(BM, 128)) and the
// empty barriers' count (128 per consumer warpgroup) follow this.
__host__ __device__ constexpr int consumer_wgs(int bm) { return bm > 128 ? 2 : bm / 64; }

// tier 2's tile of this CTA in round j (T2_ORDER), or >= tiles when it has none left
__device__ __forceinline__ int t2_tile(int j) {
    const int g = gridDim.x;
    return (T2_ORDER && (j & 1)) ? (j + 1) * g - 1 - (int)blockIdx.x : j * g + (int)blockIdx.x;
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ bool mbar_try(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n.reg .pred P;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2;\n"
        "selp.u32 %0, 1, 0, P;\n}\n"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    if (mbar_try(bar, parity)) return;
#if WATCHDOG
    // Every legitimate wait here lasts about one k-tile (microseconds); one that lasts 2 s is a
    // lost phase: trap, so the launch fails with an error instead of hanging the GPU.
    const unsigned long long t0 = global_ns();
    while (!mbar_try(bar, parity))
        if (global_ns() - t0 > 2000000000ull) __trap();
#else
    while (!mbar_try(bar, parity)) {
    }
#endif
}

// ---- cp.async ------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // 0 source bytes: the 16 destination bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// L2 evict-first: weights streamed once (a B tile read by one CTA) replace each other in the L2
// instead of evicting lines other kernels left there (dirty lines would cost a write-back).
__device__ __forceinline__ unsigned long long evict_first_policy() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ void cp_async16_hint(unsigned dst, const void* src, unsigned long long pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, 16, %2;"
                 ::"r"(dst), "l"(src), "l"(pol) : "memory");
}

// ---- TMA (cp.async.bulk.tensor): one thread loads a 64-row x 64-k box (8 KB) per instruction ------
// The tensor map (host: cuTensorMapEncodeTiled, launcher arg "tmap:A:64,64:sw128") describes a
// row-major [rows, K] tensor with 64 x 64 boxes and the 128-byte swizzle: box row r lands at byte
// r*128 of the (1024-aligned) destination, its 16-byte chunk c at chunk c ^ (r & 7), exactly the
// layout the cp.async producer writes and the wgmma descriptor reads. Rows past the tensor's end are
// zero-filled; the full 8 KB still count toward the mbarrier's transaction bytes.
struct __align__(64) TmaDesc {
    unsigned long long v[16];
};
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, int k, int row, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k), "r"(row), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// ---- thread-block clusters (split-K partial sums reduced through distributed shared memory) ----
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_size() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// every thread of every CTA of the cluster: release our shared-memory writes, acquire the peers'
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned dsmem_addr(unsigned local, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
    return r;
}
__device__ __forceinline__ float ld_dsmem(unsigned addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float4 ld_dsmem4(unsigned addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}

// ---- wgmma ---------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4)   // start address, 16-byte units
           | (1ull << 16)                                 // LBO (unused for swizzled K-major)
           | (64ull << 32)                                // SBO: 1024 bytes between 8-row groups
           | (1ull << 62);                                // 128-byte swizzle
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads/writes of the accumulators across a wgmma wait.
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db);

// BEGIN GENERATED wgmma wrappers (gen_wgmma_ops.py; do not edit by hand)
template <> __device__ __forceinline__ void wgmma_ss<64>(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "n"(1)
        : "memory");
}

template <> __device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "n"(1)
        : "memory");
}

template <> __device__ __forceinline__ void wgmma_ss<256>(float (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." WG_TYPE "." WG_TYPE " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "n"(1)
        : "memory");
}
// END GENERATED wgmma wrappers

// ---- tile coordinates ----------------------------------------------------------------------------
struct TileCoord {
    int m_tile, n_tile, split, m_tiles;
};

template <int BM, int BN, int SPLIT, int GROUP>
__device__ __forceinline__ TileCoord tile_coord(int M, int bid) {
    constexpr int N_TILES = NN / BN;
    TileCoord t;
    t.m_tiles = (M + BM - 1) / BM;
    if (CSPLIT && SPLIT > 1) {  // a cluster = the SPLIT CTAs of one tile, consecutive in x
        t.split = bid % SPLIT;
        bid /= SPLIT;
    } else {
        t.split = bid / (t.m_tiles * N_TILES);
        bid -= t.split * t.m_tiles * N_TILES;
    }
    if (GROUP > 0) {  // groups of GROUP M-tiles sweep all N-tiles: A and B tiles are reused from L2
        const int g = bid / (GROUP * N_TILES);
        const int first = g * GROUP;
        const int gsize = min(t.m_tiles - first, GROUP);
        const int in = bid - g * GROUP * N_TILES;
        t.m_tile = first + in % gsize;
        t.n_tile = in / gsize;
        if (T2_SWZ && (g & 1)) t.n_tile = N_TILES - 1 - t.n_tile;  // serpentine: the next group starts
                                                                   // on the B tiles the last one ended on
    } else {          // M-tiles fastest: the CTAs that share a B tile run together
        t.m_tile = bid % t.m_tiles;
        t.n_tile = bid / t.m_tiles;
    }
    return t;
}

// ---- producer warpgroup --------------------------------------------------------------------------
// Ring position: stage s of the next k-tile and the parity of its current round. A persistent
// CTA carries it from one tile to the next (producer and consumers count the same k-tiles).
struct Ring {
    int s;
    unsigned ph;
};
template <int ST>
__device__ __forceinline__ void ring_next(Ring& r) {
    if (++r.s == ST) {
        r.s = 0;
        r.ph ^= 1u;
    }
}

template <int BM, int BN, int ST, int SPLIT, int GROUP>
__device__ __forceinline__ void producer_tile(const half_t* __restrict__ A, const half_t* __restrict__ B,
                                              int M, int bid, unsigned base, unsigned full0,
                                              unsigned empty0, Ring& ring, const TmaDesc* tmA,
                                              const TmaDesc* tmB) {
    constexpr int KT = KK / SPLIT / BK;
    constexpr int STAGE_BYTES = (BM + BN) * ROW_BYTES;
    const TileCoord tc = tile_coord<BM, BN, SPLIT, GROUP>(M, bid);
    const int m0 = tc.m_tile * BM, n0 = tc.n_tile * BN;
    const int kbeg = tc.split * (KK / SPLIT);
#if TMA
    // one thread: per stage expect the bytes of its box loads, then the A boxes (up to BM/64) and
    // BN/64 B boxes; the full barriers count 1 arrival (this expect_tx) plus the transaction bytes
    if (threadIdx.x != 0) return;
    // A boxes wholly past M are not loaded (nor expected): their rows keep stale shared memory, which
    // only reaches accumulator rows >= M, never stored (each C row depends on its own A row only).
    // A box partly past M is zero-filled past M and counts its full 8 KB.
    const int a_boxes = min(BM / 64, (M - m0 + 63) / 64);
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        const int s = ring.s;
        mbar_wait(empty0 + 8 * s, ring.ph ^ 1u);
        const unsigned bar = full0 + 8 * s;
        mbar_expect_tx(bar, (a_boxes * 64 + BN) * ROW_BYTES);
        const unsigned sa = base + s * STAGE_BYTES;
        const unsigned sb = sa + BM * ROW_BYTES;
        const int k = kbeg + kt * BK;
#pragma unroll
        for (int j = 0; j < BM / 64; ++j)
            if (j < a_boxes) tma_load_2d(sa + j * 64 * ROW_BYTES, tmA, k, m0 + 64 * j, bar);
#pragma unroll
        for (int j = 0; j < BN / 64; ++j) tma_load_2d(sb + j * 64 * ROW_BYTES, tmB, k, n0 + 64 * j, bar);
        ring_next<ST>(ring);
    }
    return;
#endif
    const int p = threadIdx.x;        // 0..127
    const int c = p & 7;              // this thread's 16-byte chunk of each 128-byte row
    const int r0 = p >> 3;            // its rows: r0, r0 + 16, r0 + 32, ...
    // r & 7 == r0 & 7 for all of its rows, so the swizzled chunk offset is one constant
    const unsigned dst0 = r0 * ROW_BYTES + ((c ^ (r0 & 7)) << 4);
    const half_t* a_src = A + (size_t)min(m0 + r0, M - 1) * KK + kbeg + c * 8;
    const half_t* b_src = B + (size_t)(n0 + r0) * KK + kbeg + c * 8;
    const bool b_once = EVF && tc.m_tiles == 1;   // no other CTA reads this B tile
    const unsigned long long pol = b_once ? evict_first_policy() : 0ull;
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        const int s = ring.s;
        mbar_wait(empty0 + 8 * s, ring.ph ^ 1u);
        const unsigned sa = base + s * STAGE_BYTES + dst0;
        const unsigned sb = sa + BM * ROW_BYTES;
        const int k = kt * BK;
#pragma unroll
        for (int j = 0; j < BM / 16; ++j) {
            const bool ok = m0 + r0 + 16 * j < M;   // rows past M are zero-filled
            cp_async16(sa + j * 16 * ROW_BYTES, a_src + (ok ? (size_t)16 * j * KK : 0) + k, ok);
        }
        if (b_once) {
#pragma unroll
            for (int j = 0; j < BN / 16; ++j)
                cp_async16_hint(sb + j * 16 * ROW_BYTES, b_src + (size_t)16 * j * KK + k, pol);
        } else {
#pragma unroll
            for (int j = 0; j < BN / 16; ++j)
                cp_async16(sb + j * 16 * ROW_BYTES, b_src + (size_t)16 * j * KK + k, true);
        }
        cp_async_arrive_noinc(full0 + 8 * s);
        ring_next<ST>(ring);
    }
}

template <int BM, int BN, int ST, int SPLIT, int GROUP>
__device__ __forceinline__ void producer(const half_t* __restrict__ A, const half_t* __restrict__ B,
                                         int M, unsigned base, unsigned full0, unsigned empty0,
                                         const TmaDesc* tmA, const TmaDesc* tmB) {
    Ring ring{0, 0u};
    producer_tile<BM, BN, ST, SPLIT, GROUP>(A, B, M, blockIdx.x, base, full0, empty0, ring, tmA, tmB);
    if (!TMA) asm volatile("cp.async.wait_all;" ::: "memory");
    if (CSPLIT && SPLIT > 1) {  // the consumers' two cluster barriers need every thread
        cluster_sync();
        cluster_sync();
    }
}

// ---- consumer warpgroups -------------------------------------------------------------------------
// EPI = 1 (tier 2): the bf16/fp16 tile leaves through a 4 KB shared buffer per consumer warp (16
// rows x 128 columns, 16-byte chunks XOR-swizzled by row: conflict-free both ways) as 16-byte
// row-contiguous stores instead of 4-byte stores that touch 8 rows each.
template <int BM, int BN, int ST, int SPLIT, int GROUP, int EPI>
__device__ __forceinline__ void consumer(half_t* __restrict__ C, float* __restrict__ ws, int M, int bid,
                                         unsigned base, unsigned char* sgen, unsigned full0,
                                         unsigned empty0, int* s_last, Ring& ring) {
    // BM = 256 ("tall" tile: all of M = 129..256 in one M-tile, so each B tile is read by one CTA
    // per split instead of two): still 2 consumer warpgroups, each owning AT = 2 row atoms of 64
    // (rows 128*wg + 64*a), i.e. two wgmmas per k-step against the same B descriptor.
    constexpr int NWG = consumer_wgs(BM);
    constexpr int AT = BM / 64 / NWG;   // 64-row atoms per consumer warpgroup
    constexpr int KT = KK / SPLIT / BK;
    constexpr int STAGE_BYTES = (BM + BN) * ROW_BYTES;
    constexpr int R = BN / 2;  // accumulators per thread and atom
    static_assert(BM == 64 || BM == 128 || BM == 256, "BM: 64, 128 or 256");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN: 64, 128 or 256");
    static_assert(AT * R <= 128, "accumulators: BM * BN <= 128 * 256 (BM = 256 needs BN <= 128)");
    static_assert(AT == 1 || EPI == 0, "BM = 256: no staged epilogue");
    static_assert(ST >= 2 && ST <= MAX_ST, "stages");
    static_assert(NN % BN == 0 && KK % (BK * SPLIT) == 0 && KT >= 1, "tiles must divide N and K");

    const TileCoord tc = tile_coord<BM, BN, SPLIT, GROUP>(M, bid);
    const int m0 = tc.m_tile * BM, n0 = tc.n_tile * BN;
    const int ct = threadIdx.x - 128;          // consumer thread 0 .. 128*NWG-1
    const int wg = ct >> 7;                    // consumer warpgroup: rows 64*AT*wg .. 64*AT*(wg+1)-1
    const int t = ct & 127, warp = t >> 5, lane = t & 31;

    float acc[AT][R];
#pragma unroll
    for (int a = 0; a < AT; ++a)
#pragma unroll
        for (int i = 0; i < R; ++i) acc[a][i] = 0.f;

    int prev = 0;
    // A warpgroup whose 64 rows all lie past M (the last M-tile of a ragged M, e.g. M = 136 on
    // 128-row tiles) has nothing to multiply: it only keeps the barrier protocol, releasing each
    // stage once it is full (not before: an early arrive would count toward the stage's previous
    // round). Its accumulators stay zero and its epilogue writes no row.
    const bool idle = MSKIP && m0 + wg * 64 * AT >= M;
    // (a tall tile's second atom is multiplied even when its rows all lie past M: a run-time test
    // around either atom's wgmma, even one choosing between two loops, made ptxas serialize them)
    if (idle) {
#pragma unroll 1
        for (int kt = 0; kt < KT; ++kt) {
            mbar_wait(full0 + 8 * ring.s, ring.ph);
            mbar_arrive(empty0 + 8 * ring.s);
            ring_next<ST>(ring);
        }
        // no return: the split-K epilogues below need every consumer thread at their barriers
    } else {
#pragma unroll 1
        for (int kt = 0; kt < KT; ++kt) {
            const int s = ring.s;
            mbar_wait(full0 + 8 * s, ring.ph);
            if (!TMA) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async: generic proxy
            const unsigned sa = base + s * STAGE_BYTES + wg * AT * 64 * ROW_BYTES;
            const unsigned sb = base + s * STAGE_BYTES + BM * ROW_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
                for (int a = 0; a < AT; ++a)
                    wgmma_ss<BN>(acc[a], smem_desc(sa + a * 64 * ROW_BYTES + kk * 32), smem_desc(sb + kk * 32));
            wgmma_commit();
            if (kt > 0) {            // the group of kt-1 is done: its stage can be refilled
                wgmma_wait<1>();
                mbar_arrive(empty0 + 8 * prev);
            }
            prev = s;
            ring_next<ST>(ring);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int a = 0; a < AT; ++a) fence_acc(acc[a]);
        // the last stage too: a persistent CTA's producer refills it for the next tile while this
        // epilogue runs (for a one-tile CTA the producer has finished: nobody waits on it)
        mbar_arrive(empty0 + 8 * prev);
    }

    // row of this thread's first accumulator (atom 0; atom a adds 64*a)
    const int row = m0 + wg * 64 * AT + warp * 16 + (lane >> 2);
    const int col0 = n0 + (lane & 3) * 2;
    if (SPLIT == 1 && EPI) {
        constexpr int PW = BN < 128 ? BN : 128;    // columns per pass
        constexpr int CPR = PW / 8;                 // 16-byte chunks per row
        static_assert(PW >= 64, "the row swizzle needs 8 chunks a row");
        // laundered through asm volatile: otherwise the compiler hoists every swizzled address out
        // of the persistent tile loop and they spill (live across the main loop at 168 registers)
        int lw;
        asm volatile("mov.b32 %0, %1;" : "=r"(lw) : "r"(lane));
        unsigned char* buf = sgen + ST * STAGE_BYTES + (wg * 4 + warp) * 4096;
        const int r0 = lw >> 2;
#pragma unroll
        for (int pass = 0; pass < BN / PW; ++pass) {
#pragma unroll
            for (int jl = 0; jl < CPR; ++jl) {
                const int j = pass * CPR + jl;
                const int sw = (jl ^ (r0 & 7)) << 4;   // (r0 + 8) & 7 == r0 & 7
                *reinterpret_cast<half2_t*>(buf + r0 * (PW * 2) + sw + (lw & 3) * 4) =
                    pack2(acc[0][4 * j], acc[0][4 * j + 1]);
                *reinterpret_cast<half2_t*>(buf + (r0 + 8) * (PW * 2) + sw + (lw & 3) * 4) =
                    pack2(acc[0][4 * j + 2], acc[0][4 * j + 3]);
            }
            __syncwarp();
#pragma unroll 1
            for (int it = 0; it < 16 * CPR / 32; ++it) {
                const int idx = it * 32 + lw;
                const int r = idx / CPR, c = idx % CPR;
                const uint4 v = *reinterpret_cast<const uint4*>(buf + r * (PW * 2) + ((c ^ (r & 7)) << 4));
                const int grow = m0 + wg * 64 + warp * 16 + r;
                if (grow < M)
                    *reinterpret_cast<uint4*>(C + (size_t)grow * NN + n0 + pass * PW + c * 8) = v;
            }
            __syncwarp();
        }
        return;
    }
    if (SPLIT == 1) {
#pragma unroll
        for (int a = 0; a < AT; ++a) {
            const int r = row + 64 * a;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + 8 * j;
                if (r < M)
                    *reinterpret_cast<half2_t*>(C + (size_t)r * NN + col) = pack2(acc[a][4 * j], acc[a][4 * j + 1]);
                if (r + 8 < M)
                    *reinterpret_cast<half2_t*>(C + (size_t)(r + 8) * NN + col) =
                        pack2(acc[a][4 * j + 2], acc[a][4 * j + 3]);
            }
        }
        return;
    }

    if (CSPLIT) {
        // Split-K in a cluster: every CTA stores its fp32 tile in its own (now idle) stage memory,
        // then CTA `split` sums rows [split*BM/SPLIT, ...) over all SPLIT CTAs through DSMEM.
        constexpr int LD = BN + 8;  // row pitch in floats: +32 bytes spreads 8 rows over the banks
        static_assert(!CSPLIT || SPLIT == 1 || BM * LD * 4 <= ST * STAGE_BYTES, "split tile must fit the stage memory");
        static_assert(!CSPLIT || SPLIT == 1 || (SPLIT <= 8 && BM % SPLIT == 0), "cluster split: at most 8 CTAs");
        // the other consumer warpgroup's wgmmas may still read the stages: wait for them
        asm volatile("bar.sync 1, %0;" ::"n"(NWG * 128) : "memory");
        float* part = reinterpret_cast<float*>(sgen);
#pragma unroll
        for (int a = 0; a < AT; ++a) {
            const int lrow = (wg * AT + a) * 64 + warp * 16 + (lane >> 2);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = (lane & 3) * 2 + 8 * j;
                *reinterpret_cast<float2*>(part + lrow * LD + col) = make_float2(acc[a][4 * j], acc[a][4 * j + 1]);
                *reinterpret_cast<float2*>(part + (lrow + 8) * LD + col) =
                    make_float2(acc[a][4 * j + 2], acc[a][4 * j + 3]);
            }
        }
        cluster_sync();
        constexpr int ROWS = BM / SPLIT, C4 = BN / 4;
        const unsigned pbase = smem_u32(part);
        for (int i = ct; i < ROWS * C4; i += NWG * 128) {
            const int r = tc.split * ROWS + i / C4, c = (i % C4) * 4;
            if (m0 + r >= M) continue;
            const unsigned off = pbase + (unsigned)(r * LD + c) * 4u;
            float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int sp = 0; sp < SPLIT; ++sp) {
                const float4 v = ld_dsmem4(dsmem_addr(off, sp));
                sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
            }
            half2_t h[2] = {pack2(sum.x, sum.y), pack2(sum.z, sum.w)};
            *reinterpret_cast<uint2*>(C + (size_t)(m0 + r) * NN + n0 + c) = *reinterpret_cast<uint2*>(h);
        }
        cluster_sync();  // peers may still be reading our tile
        return;
    }

    // Split-K: partial tile to the workspace, then the tile's last CTA reduces in split order.
    int* tickets = reinterpret_cast<int*>(ws);
    float* parts = ws + TICKETS;
    float* part = parts + (size_t)tc.split * M * NN;
#pragma unroll
    for (int a = 0; a < AT; ++a) {
        const int r = row + 64 * a;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j;
            if (r < M)
                __stcg(reinterpret_cast<float2*>(part + (size_t)r * NN + col), make_float2(acc[a][4 * j], acc[a][4 * j + 1]));
            if (r + 8 < M)
                __stcg(reinterpret_cast<float2*>(part + (size_t)(r + 8) * NN + col),
                       make_float2(acc[a][4 * j + 2], acc[a][4 * j + 3]));
        }
    }
    __threadfence();
    // named barrier 1 over the consumer threads only (the producer warpgroup is not waiting here)
    asm volatile("bar.sync 1, %0;" ::"n"(NWG * 128) : "memory");
    const int tile = tc.n_tile * tc.m_tiles + tc.m_tile;
    if (ct == 0) *s_last = atomicAdd(tickets + tile, 1) == SPLIT - 1;
    asm volatile("bar.sync 1, %0;" ::"n"(NWG * 128) : "memory");
    if (!*s_last) return;
    __threadfence();
    constexpr int C4 = BN / 4;
    for (int i = ct; i < BM * C4; i += NWG * 128) {
        const int r = i / C4, c = (i % C4) * 4;
        const int grow = m0 + r;
        if (grow >= M) continue;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
        for (int sp = 0; sp < SPLIT; ++sp) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(parts + ((size_t)sp * M + grow) * NN + n0 + c));
            sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
        }
        half2_t h[2] = {pack2(sum.x, sum.y), pack2(sum.z, sum.w)};
        *reinterpret_cast<uint2*>(C + (size_t)grow * NN + n0 + c) = *reinterpret_cast<uint2*>(h);
    }
    if (ct == 0) tickets[tile] = 0;  // ready for a next call on the same (unzeroed) workspace
}

// ---- skinny tiers (small M): mma.sync straight from registers, B streamed once --------------------
// C^T[N, M] = B[N, K] @ A[M, K]^T with mma.m16n8k16: B rows are the mma's M side (16 per row tile),
// A rows its N side (8 per column tile, MT tiles: M <= 8*MT). No shared-memory staging: each lane
// loads 16 contiguous bytes (8 k) per row and the k order inside a 32-k block is permuted the same
// way for both operands (a dot product does not care): lane (g = lane/4, t = lane%4) holds k
// 8t..8t+7 of B rows g and g+8 and of A row g; k-step `sub` (0, 1) uses elements 8t+4sub..+3 as
// the fragment's logical k {2t, 2t+1, 2t+8, 2t+9}. Each warp streams chunks of 32*KJ k, the next
// chunk's loads in flight while the current one is multiplied. Warps: WR along N x WK along K;
// CL CTAs of a cluster split K further. Partial sums meet in shared memory (WK warps), then
// across the cluster through DSMEM; CTA rank r writes its share of the C tile.
__device__ __forceinline__ uint4 ldg_b(const half_t* p, unsigned long long pol) {
    uint4 v;
#if EVF
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
#else
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
    return v;
}
__device__ __forceinline__ uint4 ldg_a(const half_t* p) {
    uint4 v;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned u4(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." WG_TYPE "." WG_TYPE ".f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int MT, int RT, int KJ>
struct SkinnyFrag {
    uint4 b[RT][2][KJ];
    uint4 a[MT][KJ];
};

template <int MT, int RT, int WR, int WK, int KJ, int CL>
__device__ __forceinline__ void skinny(const half_t* __restrict__ A, const half_t* __restrict__ B,
                                       half_t* __restrict__ C, int M, unsigned char* smem) {
    constexpr int ROWS = 16 * RT * WR;   // B rows (C columns) of one CTA
    constexpr int MC = 8 * MT;           // A rows (C rows) covered
    constexpr int KC = 32 * KJ;          // k per chunk
    constexpr int KCTA = KK / CL;        // k range of one CTA
    constexpr int NCH = KCTA / KC;
    constexpr int NTHR = 32 * WR * WK;
    static_assert(NN % ROWS == 0 && KK % (CL * KC) == 0 && NCH >= 1, "skinny tiles must divide N and K");
    static_assert(NTHR <= MAX_THREADS && CL >= 1 && CL <= 8, "skinny block");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wr = warp % WR, wk = warp / WR;
    unsigned crank = 0;
    if (CL > 1) {
        crank = cluster_rank();
        if (cluster_size() != CL) __trap();  // launched without the cluster the reduction needs
    }
    const int n_cta = (blockIdx.x / CL) * ROWS;
    const int n0 = n_cta + wr * 16 * RT;
    const int kbeg = crank * KCTA + 8 * t;
    const unsigned long long pol = EVF ? evict_first_policy() : 0ull;

    const half_t* bp[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) bp[rt][h] = B + (size_t)(n0 + rt * 16 + h * 8 + g) * KK + kbeg;
    const half_t* ap[MT];
    bool aok[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        aok[mt] = mt * 8 + g < M;
        ap[mt] = A + (size_t)(aok[mt] ? mt * 8 + g : 0) * KK + kbeg;
    }

    auto load = [&](SkinnyFrag<MT, RT, KJ>& f, int ch) {
        const int k = ch * KC;
#pragma unroll
        for (int j = 0; j < KJ; ++j) {
#pragma unroll
            for (int rt = 0; rt < RT; ++rt)
#pragma unroll
                for (int h = 0; h < 2; ++h) f.b[rt][h][j] = ldg_b(bp[rt][h] + k + 32 * j, pol);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                f.a[mt][j] = aok[mt] ? ldg_a(ap[mt] + k + 32 * j) : make_uint4(0u, 0u, 0u, 0u);
        }
    };

    float acc[RT][MT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.f;

    SkinnyFrag<MT, RT, KJ> cur;
    int ch = wk;
    if (ch < NCH) load(cur, ch);
#pragma unroll 1
    for (; ch < NCH; ch += WK) {
        SkinnyFrag<MT, RT, KJ> nxt;
        const bool more = ch + WK < NCH;
        if (more) load(nxt, ch + WK);
#pragma unroll
        for (int j = 0; j < KJ; ++j)
#pragma unroll
            for (int sub = 0; sub < 2; ++sub)
#pragma unroll
                for (int rt = 0; rt < RT; ++rt)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        mma16816(acc[rt][mt], u4(cur.b[rt][0][j], 2 * sub), u4(cur.b[rt][1][j], 2 * sub),
                                 u4(cur.b[rt][0][j], 2 * sub + 1), u4(cur.b[rt][1][j], 2 * sub + 1),
                                 u4(cur.a[mt][j], 2 * sub), u4(cur.a[mt][j], 2 * sub + 1));
        if (more) cur = nxt;
    }

    // partial sums of the WK warps: red[wk][m][n] (m-major, so the C writes below are coalesced)
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int nl = wr * 16 * RT + rt * 16 + g + 8 * (i >> 1);
                const int ml = mt * 8 + 2 * t + (i & 1);
                red[(wk * MC + ml) * ROWS + nl] = acc[rt][mt][i];
            }
    __syncthreads();
    const int E = min(M, MC) * ROWS;
    for (int e = threadIdx.x; e < E; e += NTHR) {
        float sum = red[e];
#pragma unroll
        for (int w = 1; w < WK; ++w) sum += red[w * MC * ROWS + e];
        if (CL == 1) {
            half2_t h = pack2(sum, 0.f);
            C[(size_t)(e / ROWS) * NN + n_cta + e % ROWS] = *reinterpret_cast<half_t*>(&h);
        } else {
            red[e] = sum;
        }
    }
    if (CL > 1) {
        cluster_sync();
        const int per = (E + CL - 1) / CL;
        const int lo = crank * per, hi = min(E, lo + per);
        const unsigned rbase = smem_u32(red);
        for (int e = lo + threadIdx.x; e < hi; e += NTHR) {
            float sum = 0.f;
#pragma unroll
            for (int r = 0; r < CL; ++r) sum += ld_dsmem(dsmem_addr(rbase + 4u * e, r));
            half2_t h = pack2(sum, 0.f);
            C[(size_t)(e / ROWS) * NN + n_cta + e % ROWS] = *reinterpret_cast<half_t*>(&h);
        }
        cluster_sync();  // peers may still be reading our partial sums
    }
}

template <int BM, int BN, int ST, int EPI = 0>
__host__ __device__ constexpr bool fits() {  // static smem incl. 1 KB reserved
    return ST * (BM + BN) * ROW_BYTES + 1024 + EPI * (BM / 64) * 16384 <= 227 * 1024 - 2048;
}

}  // namespace

static_assert(T2_SPLIT == 1, "tier 2 has no split-K");
static_assert(fits<T0_BM, T0_BN, T0_ST>() && fits<T1_BM, T1_BN, T1_ST>() && fits<T2_BM, T2_BN, T2_ST, T2_EPI>(),
              "shared memory");

// __launch_bounds__(384, 1): the register cap at entry (168) that setmaxnreg needs; tiers with
// BM = 64 launch 256 threads.
extern "C" __global__ void __launch_bounds__(MAX_THREADS, 1)
gemm_wgmma_kernel(const half_t* __restrict__ A, const half_t* __restrict__ B, half_t* __restrict__ C,
                  float* __restrict__ ws, int M
#if TMA
                  , const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB
#endif
                  ) {
#if TMA
    const TmaDesc* pA = &tmA;
    const TmaDesc* pB = &tmB;
#else
    const TmaDesc* pA = nullptr;
    const TmaDesc* pB = nullptr;
#endif
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long bars[2 * MAX_ST];
    __shared__ int s_last;
    if (M <= TS0_MAXM) {
        skinny<TS0_MT, TS0_RT, TS0_WR, TS0_WK, TS0_KJ, TS0_CL>(A, B, C, M, smem_raw);
        return;
    }
    if (M <= TS1_MAXM) {
        skinny<TS1_MT, TS1_RT, TS1_WR, TS1_WK, TS1_KJ, TS1_CL>(A, B, C, M, smem_raw);
        return;
    }
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // 128B swizzle needs 1024 alignment
    unsigned char* sgen = smem_raw + (base - smem_u32(smem_raw));  // generic pointer to `base`
    const unsigned full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[MAX_ST]);
    const int tier = M <= T0_MAXM ? 0 : (M <= T1_MAXM ? 1 : 2);
    const int nwg = consumer_wgs(tier == 0 ? T0_BM : tier == 1 ? T1_BM : T2_BM);
    if (threadIdx.x == 0) {
        if (TMA) {
            tma_prefetch_desc(pA);
            tma_prefetch_desc(pB);
        }
        for (int s = 0; s < MAX_ST; ++s) {
            mbar_init(full0 + 8 * s, TMA ? 1 : 128);
            mbar_init(empty0 + 8 * s, 128 * nwg);
        }
        if (TMA)  // the barrier inits visible to the async proxy (the TMA unit's complete_tx) too
            asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tier == 0) {
            producer<T0_BM, T0_BN, T0_ST, T0_SPLIT, 0>(A, B, M, base, full0, empty0, pA, pB);
        } else if (tier == 1) {
            producer<T1_BM, T1_BN, T1_ST, T1_SPLIT, 0>(A, B, M, base, full0, empty0, pA, pB);
        } else {
            // tier 2: a CTA takes tiles blockIdx.x, + gridDim.x, ... (T2_ORDER; persistent when the
            // grid is smaller than the tile count, T2_CTAS); it runs ahead into the next tile's k-tiles
            // while the consumers write the previous tile
            Ring ring{0, 0u};
            const int tiles = (M + T2_BM - 1) / T2_BM * (NN / T2_BN);
#pragma unroll 1
            for (int j = 0, bid = t2_tile(0); bid < tiles; bid = t2_tile(++j))
                producer_tile<T2_BM, T2_BN, T2_ST, 1, T2_GROUP>(A, B, M, bid, base, full0, empty0, ring, pA, pB);
            if (!TMA) asm volatile("cp.async.wait_all;" ::: "memory");
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        Ring ring{0, 0u};
        if (tier == 0) {
            consumer<T0_BM, T0_BN, T0_ST, T0_SPLIT, 0, 0>(C, ws, M, blockIdx.x, base, sgen, full0, empty0,
                                                        &s_last, ring);
        } else if (tier == 1) {
            consumer<T1_BM, T1_BN, T1_ST, T1_SPLIT, 0, 0>(C, ws, M, blockIdx.x, base, sgen, full0, empty0,
                                                        &s_last, ring);
        } else {
            const int tiles = (M + T2_BM - 1) / T2_BM * (NN / T2_BN);
#pragma unroll 1
            for (int j = 0, bid = t2_tile(0); bid < tiles; bid = t2_tile(++j))
                consumer<T2_BM, T2_BN, T2_ST, 1, T2_GROUP, T2_EPI>(C, ws, M, bid, base, sgen, full0, empty0,
                                                                   &s_last, ring);
        }
    }
}
