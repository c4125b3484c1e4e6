"""Run a compiler candidate on the CPU: its kernel.cu built with the host C++ compiler against a
small CUDA shim, so lowering bugs show without a GPU (a checking tool, not a runtime).

Blocks run one after another; a kernel that synchronises (__syncthreads, warp shuffles) runs its
block's threads as OS threads with a barrier, any other kernel runs them one after another in one
thread (a valid schedule when nothing synchronises). Shared memory is a static local (blocks never
overlap). bf16/fp16/fp8 are bit-exact round-to-nearest-even conversions; libm's expf etc. stand in
for CUDA's (a few ulp apart). Atomics take a lock.

    outs = emulate(candidate, inputs, axes, scalars)      # CPU tensors in, CPU tensors out
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <thread>
#include <barrier>
#include <vector>
#include <mutex>
#include <functional>
#include <type_traits>
#define SF_HOST 1
using std::isinf; using std::isfinite;
struct sf_dim3 { unsigned x, y, z; };
static thread_local sf_dim3 threadIdx, blockIdx;
static sf_dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define __align__(n)
static std::barrier<>* sf_bar = nullptr;
static std::mutex sf_atomic;
inline void __syncthreads() { if (sf_bar) sf_bar->arrive_and_wait(); }
// a failed device check: the thread stops, the launch is reported as trapped (emulate raises)
struct sf_trap_t {};
static std::atomic<bool> sf_trapped{false};
[[noreturn]] inline void __trap() { throw sf_trap_t(); }
extern "C" int sf_trap_flag() { return sf_trapped.exchange(false) ? 1 : 0; }
static unsigned long long sf_slot[1024];
inline unsigned sf_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
template <class T> T __shfl_xor_sync(unsigned, T v, int off) {
    unsigned t = sf_tid(); std::memcpy(&sf_slot[t], &v, sizeof(T)); __syncthreads();
    T r; std::memcpy(&r, &sf_slot[t ^ (unsigned)off], sizeof(T)); __syncthreads(); return r; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float erfinvf(float y) {  // Newton on erf: only for checking
    float x = 0.0f; for (int i = 0; i < 60; ++i) { float e = erff(x) - y; x -= e / (1.1283791670955126f * expf(-x * x)); } return x; }
struct __nv_bfloat16 { uint16_t x; };
struct __half { _Float16 x; };
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)}; }
inline float __half2float(__half h) { return (float)h.x; }
inline __half __float2half_rn(float f) { return {(_Float16)f}; }
struct sf_fp8 { uint8_t x; };
template <int E, int M, bool FN> struct sf_f8 {
    uint8_t x = 0;
    static float dec(uint8_t v) {
        int s = v >> 7, e = (v >> M) & ((1 << E) - 1), m = v & ((1 << M) - 1);
        const int bias = (1 << (E - 1)) - 1;
        if (FN) { if (e == (1 << E) - 1 && m == (1 << M) - 1) return NAN; }
        else if (e == (1 << E) - 1) return m ? NAN : (s ? -INFINITY : INFINITY);
        float r = e ? std::ldexp(1.0f + m / (float)(1 << M), e - bias) : std::ldexp(m / (float)(1 << M), 1 - bias);
        return s ? -r : r; }
    sf_f8() {}
    explicit sf_f8(float f) {
        if (f != f) { x = 0x7f; return; }
        int best = 0; float bd = INFINITY;
        for (int v = 0; v < 256; ++v) { float d = dec((uint8_t)v); if (d != d) continue;
            float dist = std::fabs(d - f);
            if (dist < bd || (dist == bd && (v & 1) == 0)) { bd = dist; best = v; } }
        x = (uint8_t)best; }
    explicit operator float() const { return dec(x); }
};
typedef sf_f8<4, 3, true> __nv_fp8_e4m3;
typedef sf_f8<5, 2, false> __nv_fp8_e5m2;
inline void atomicAdd(float* p, float v) { std::lock_guard<std::mutex> g(sf_atomic); *p += v; }
inline void atomicAdd(double* p, double v) { std::lock_guard<std::mutex> g(sf_atomic); *p += v; }
inline void atomicAdd(int* p, int v) { std::lock_guard<std::mutex> g(sf_atomic); *p += v; }
inline void atomicAdd(unsigned long long* p, unsigned long long v) { std::lock_guard<std::mutex> g(sf_atomic); *p += v; }
inline void atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { std::lock_guard<std::mutex> g(sf_atomic);
    *p = __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(v)); }
inline void atomicAdd(__half* p, __half v) { std::lock_guard<std::mutex> g(sf_atomic);
    *p = __float2half_rn(__half2float(*p) + __half2float(v)); }
// mma.sync m16n8k16 (row.col, fp32 accumulate) for one warp, from the PTX fragment layouts:
// every thread of the block calls it (uniform control flow), so block barriers order the exchange
static unsigned sf_mma_a[1024][4], sf_mma_b[1024][2];
template <class T> float sf_half_of(unsigned v, int hi) {
    uint16_t h = hi ? (uint16_t)(v >> 16) : (uint16_t)(v & 0xffffu);
    T t; std::memcpy(&t, &h, 2);
    if constexpr (sizeof(T) == 2 && std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(t);
    else return __half2float(t); }
template <class T> void sf_mma(float* c, const unsigned* a, const unsigned* b) {
    unsigned t = sf_tid(), lane = t % 32, w0 = t - lane;
    for (int i = 0; i < 4; ++i) sf_mma_a[t][i] = a[i];
    for (int i = 0; i < 2; ++i) sf_mma_b[t][i] = b[i];
    __syncthreads();
    unsigned g = lane / 4, q = lane % 4;
    for (int r = 0; r < 4; ++r) {
        unsigned row = g + (r >= 2 ? 8 : 0), col = q * 2 + (r & 1);
        float acc = c[r];
        for (int k = 0; k < 16; ++k) {
            unsigned la = w0 + (row % 8) * 4 + (k % 8) / 2, ra = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            unsigned lb = w0 + col * 4 + (k % 8) / 2, rb = k >= 8 ? 1 : 0;
            acc += sf_half_of<T>(sf_mma_a[la][ra], k % 2) * sf_half_of<T>(sf_mma_b[lb][rb], k % 2); }
        c[r] = acc; }
    __syncthreads(); }
inline void sf_mma_bf16(float* c, const unsigned* a, const unsigned* b) { sf_mma<__nv_bfloat16>(c, a, b); }
inline void sf_mma_f16(float* c, const unsigned* a, const unsigned* b) { sf_mma<__half>(c, a, b); }
static void sf_run(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   bool sync, const std::function<void()>& body) {
    gridDim = {gx, gy, gz}; blockDim = {bx, by, bz};
    unsigned nt = bx * by * bz;
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {
        if (!sync) {
            blockIdx = {x, y, z};
            for (unsigned t = 0; t < nt; ++t) { threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                try { body(); } catch (const sf_trap_t&) { sf_trapped = true; } }
            continue; }
        std::barrier<> bar(nt); sf_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < nt; ++t) ts.emplace_back([=, &body]() {
            blockIdx = {x, y, z}; threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
            try { body(); } catch (const sf_trap_t&) { sf_trapped = true; } });
        for (auto& th : ts) th.join();
        sf_bar = nullptr; }
}
"""

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*?)\) \{')


def _strip(src: str) -> str:
    return "\n".join(l for l in src.splitlines() if not l.startswith("#include <cuda"))


def build(source: str, cache_dir: Path | None = None) -> tuple[ctypes.CDLL, dict]:
    """(library, {kernel: [param types]}) for a candidate's kernel.cu."""
    kernels = {}
    wrappers = []
    body_of = {}
    for m in _KERNEL.finditer(source):
        name, params = m.group(1), m.group(2)
        decls = [p.strip() for p in params.split(",")] if params.strip() and params.strip() != "void" else []
        types = [re.sub(r"\s*\b\w+$", "", d).replace("__restrict__", "").strip() for d in decls]
        kernels[name] = types
        end = source.find('extern "C" __global__', m.end())
        body_of[name] = source[m.end(): end if end > 0 else len(source)]
    for name, types in kernels.items():
        sync = any(w in body_of[name] for w in ("__syncthreads", "__shfl", "sf_mma"))
        call = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        wrappers.append(f'extern "C" void run_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
                        f'unsigned by, unsigned bz, void** a) {{ sf_run(gx, gy, gz, bx, by, bz, '
                        f'{"true" if sync else "false"}, [&]() {{ {name}({call}); }}); }}')
    full = SHIM + _strip(source) + \
        "\n" + "\n".join(wrappers) + "\n"
    key = hashlib.sha256(full.encode()).hexdigest()[:20]
    d = Path(cache_dir or Path(tempfile.gettempdir()) / "solforge_emulate")
    d.mkdir(parents=True, exist_ok=True)
    so = d / f"{key}.so"
    if not so.exists():
        cpp = d / f"{key}.cpp"
        cpp.write_text(full)
        r = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
                            "-ffp-contract=off", "-o", str(so) + ".tmp", str(cpp)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode:
            raise RuntimeError("host compile failed: " + r.stderr[:3000])
        os.replace(str(so) + ".tmp", so)
    return ctypes.CDLL(str(so)), kernels


_CT = {"long long": ctypes.c_int64, "float": ctypes.c_float, "int": ctypes.c_int32,
       "double": ctypes.c_double}


def emulate(candidate, inputs: dict, axes: dict, scalars: dict | None = None) -> dict:
    """Run the candidate's launches on CPU tensors; returns the outputs (name -> tensor) it wrote
    into `inputs`' companions: pass output tensors in `inputs` too (preallocated)."""
    import torch

    from ..candidate import launch_env
    from ..problem import axis_expr

    cand = candidate if isinstance(candidate, dict) else candidate.model_dump()
    lib, kernels = build(cand["sources"]["kernel.cu"])
    env = launch_env(axes, scalars or {}, cand.get("params", {}))
    ws_bytes = int(axis_expr.evaluate(cand.get("workspace", "0"), env))
    ws = torch.zeros(max(ws_bytes, 8) + 8, dtype=torch.uint8)  # whole float64s: typed views below
    units = _attention_units(cand)
    keep = []
    for launch in cand["launches"]:
        if launch.get("when") and not axis_expr.evaluate(str(launch["when"]), env):
            continue  # another variant's launch (the launcher skips it the same way)
        name = launch["kernel"]
        if name in units:  # an attention template segment: its CPU model (templates/attention_emulate)
            _run_attention(units[name], launch, cand["launches"], inputs, ws, env)
            continue
        if name.endswith("_combine") and name[: -len("_combine")] + "_fwd" in units:
            continue  # run by _run_attention with its forward launch
        types = kernels[name]
        grid = [int(axis_expr.evaluate(e, env)) for e in launch["grid"]] + [1, 1]
        block = [int(axis_expr.evaluate(e, env)) for e in launch["block"]] + [1, 1]
        vals = []
        for a, t in zip(launch["args"], types):
            if a == "workspace":
                v = ctypes.c_void_p(ws.data_ptr())
            elif ":" in a:
                typ, expr = a.split(":", 1)
                x = axis_expr.evaluate(expr, env)
                if typ.startswith(("int", "uint")) and isinstance(x, float):
                    # a whole float (a size truncated from float arithmetic), as the launcher takes it
                    x = axis_expr.as_int(x, expr)
                v = _CT[t.replace("const ", "").strip()](x)
            else:
                v = ctypes.c_void_p(inputs[a].data_ptr())
            vals.append(v)
        keep.append(vals)
        arr = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
        getattr(lib, f"run_{name}")(*[ctypes.c_uint(x) for x in grid[:3] + block[:3]], arr)
        if lib.sf_trap_flag():
            raise RuntimeError(f"launch {name}: a device check trapped (__trap)")
    return inputs


# ---- attention template segments (their own source unit; attention_segment.py) -----------------
_DEFINE = re.compile(r"^#define (\w+) (-?\d+)$")


def _attention_units(cand: dict) -> dict:
    """{kernel name: the unit's #define configuration} for the attention template's units."""
    out = {}
    for unit, text in cand["sources"].items():
        if unit == "kernel.cu" or "// segment configuration" not in text:
            continue
        block = text.split("// segment configuration", 1)[1].splitlines()[1:]
        config = {}
        for line in block:
            m = _DEFINE.match(line.strip())
            if not m:
                break
            config[m.group(1)] = int(m.group(2))
        stem = unit[:-3] if unit.endswith(".cu") else unit
        out[f"{stem}_fwd"] = (stem, config)
    return out


def _attention_arg_dtypes(config: dict, combine: bool):
    """The torch dtype of each tensor argument of the template's kernels, in order (generate())."""
    import torch

    dt = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
    if combine:
        return [dt[config["O_DTYPE"]], torch.float32] + ([torch.float32] if config["HAS_LSE"] else [])
    out = [dt[config["IN_DTYPE"]]] * 3 + [dt[config["O_DTYPE"]]]
    if config["HAS_BIAS"]:
        out.append(dt[config["BIAS_DTYPE"]])
    if config["HAS_MASK"]:
        out.append(torch.bool)
    if config["HAS_LSE"]:
        out.append(torch.float32)
    if config["NSPLIT"] > 1:
        out.append(torch.float32)
    return out


def _run_attention(unit, fwd: dict, launches: list, inputs: dict, ws, env: dict) -> None:
    """The segment's launches (fwd, and its combine when split) through the CPU model, with each
    "workspace" argument given a typed view of the one workspace (offsets are in that type's
    elements, as the plan wrote them)."""
    from .templates.attention import AttentionLowering
    from .templates.attention_emulate import _SCALAR
    from .templates.attention_emulate import emulate as model

    stem, config = unit
    tensors = dict(inputs)

    def retyped(launch: dict, combine: bool) -> dict:
        dts = iter(_attention_arg_dtypes(config, combine))
        args = []
        for i, a in enumerate(launch["args"]):
            if _SCALAR.match(a):
                args.append(a)
                continue
            d = next(dts)
            if a == "workspace":
                a = f"__ws{'c' if combine else 'f'}{i}"
                tensors[a] = ws[: ws.numel() // d.itemsize * d.itemsize].view(d) if d != ws.dtype else ws
            args.append(a)
        return dict(launch, args=args)

    low_launches = [retyped(fwd, False)]
    comb = next((l for l in launches if l["kernel"] == f"{stem}_combine"), None)
    if comb is not None:
        low_launches.append(retyped(comb, True))
    model(AttentionLowering(sources={}, params={}, launches=low_launches, scratch_bytes="0", config=config),
          tensors, env)
