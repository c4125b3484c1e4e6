"""One generated CUDA kernel being written: parameters, straight-line code with CSE, masks, loops.

Values are C expressions in a compute type: float for float32/float16/bfloat16/fp8 (PyTorch's
opmath), double for float64, long long for every integer dtype, bool for bool. A value of a 16-bit
dtype is always already rounded to that dtype (every op rounds its result), so it is exact.

Index arithmetic is sympy over loop symbols (local C variables), size symbols (the definition's var
axes and int scalar inputs, passed as int64 kernel parameters z_<name>) and indirect symbols (an
index read from a tensor). Loads inside a mask (cat, padding, tails) are guarded by a ternary so an
out-of-range address is never read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import sympy

from . import symexpr

STORAGE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double",
           "int64": "long long", "int32": "int", "int16": "short", "int8": "signed char",
           "uint8": "unsigned char", "bool": "bool", "float8_e4m3fn": "__nv_fp8_e4m3",
           "float8_e5m2": "__nv_fp8_e5m2",
           # two E2M1 values packed in a byte: held and moved as the raw byte (packed_dtypes.py)
           "float4_e2m1fn_x2": "unsigned char"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
            "float4_e2m1fn_x2": 1}
FLOATS = {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
INTS = {"int64", "int32", "int16", "int8", "uint8", "float4_e2m1fn_x2"}


def compute_type(dtype: str) -> str:
    if dtype in FLOATS:
        return "float"
    if dtype == "float64":
        return "double"
    if dtype in INTS:
        return "long long"
    if dtype == "bool":
        return "bool"
    raise ValueError(f"dtype {dtype} is not supported")


def is_float(dtype: str) -> bool:
    return dtype in FLOATS or dtype == "float64"


def round_to(expr: str, dtype: str) -> str:
    """A compute-type value rounded to dtype (still in the compute type)."""
    if dtype == "bfloat16":
        return f"rnd_bf16({expr})"
    if dtype == "float16":
        return f"rnd_f16({expr})"
    if dtype == "float8_e4m3fn":
        return f"rnd_e4m3({expr})"
    if dtype == "float8_e5m2":
        return f"rnd_e5m2({expr})"
    if dtype == "int32":
        return f"((long long)(int)({expr}))"
    if dtype == "int16":
        return f"((long long)(short)({expr}))"
    if dtype == "int8":
        return f"((long long)(signed char)({expr}))"
    if dtype in ("uint8", "float4_e2m1fn_x2"):
        return f"((long long)(unsigned char)({expr}))"
    return expr


def convert(expr: str, src: str, dst: str) -> str:
    """PyTorch's cast of a value of dtype src to dtype dst (both as compute-type values)."""
    if src == dst:
        return expr
    if dst == "bool":
        return f"(({expr}) != 0)"
    if src == "bool":
        one = {"float": "1.0f", "double": "1.0", "long long": "1LL"}[compute_type(dst)]
        zero = {"float": "0.0f", "double": "0.0", "long long": "0LL"}[compute_type(dst)]
        return f"(({expr}) ? {one} : {zero})"
    ct = compute_type(dst)
    if ct == "long long":
        if is_float(src):  # float -> int truncates toward zero
            return round_to(f"((long long)({expr}))", dst)
        return round_to(expr, dst)
    if ct == "double":
        return f"((double)({expr}))"
    # to a float dtype: from double, int or another float dtype
    if src == "float64" and dst != "float32":
        return round_to(f"((float)({expr}))", dst) if dst in ("bfloat16", "float16") else \
            round_to(f"((float)({expr}))", dst)
    return round_to(f"((float)({expr}))", dst)


PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#define SF_INF __int_as_float(0x7f800000)
#define SF_NAN __int_as_float(0x7fc00000)
__device__ __forceinline__ float rnd_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float rnd_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float rnd_e4m3(float x) { return (float)__nv_fp8_e4m3(x); }
__device__ __forceinline__ float rnd_e5m2(float x) { return (float)__nv_fp8_e5m2(x); }
__device__ __forceinline__ float cv(float x) { return x; }
__device__ __forceinline__ float cv(__half x) { return __half2float(x); }
__device__ __forceinline__ float cv(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float cv(__nv_fp8_e4m3 x) { return (float)x; }
__device__ __forceinline__ float cv(__nv_fp8_e5m2 x) { return (float)x; }
__device__ __forceinline__ double cv(double x) { return x; }
__device__ __forceinline__ long long cv(long long x) { return x; }
__device__ __forceinline__ long long cv(int x) { return x; }
__device__ __forceinline__ long long cv(short x) { return x; }
__device__ __forceinline__ long long cv(signed char x) { return x; }
__device__ __forceinline__ long long cv(unsigned char x) { return x; }
__device__ __forceinline__ bool cv(bool x) { return x; }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void st(__nv_fp8_e4m3* p, float v) { *p = __nv_fp8_e4m3(v); }
__device__ __forceinline__ void st(__nv_fp8_e5m2* p, float v) { *p = __nv_fp8_e5m2(v); }
__device__ __forceinline__ void st(double* p, double v) { *p = v; }
__device__ __forceinline__ void st(long long* p, long long v) { *p = v; }
__device__ __forceinline__ void st(int* p, long long v) { *p = (int)v; }
__device__ __forceinline__ void st(short* p, long long v) { *p = (short)v; }
__device__ __forceinline__ void st(signed char* p, long long v) { *p = (signed char)v; }
__device__ __forceinline__ void st(unsigned char* p, long long v) { *p = (unsigned char)v; }
__device__ __forceinline__ void st(bool* p, bool v) { *p = v; }
__device__ __forceinline__ long long sf_floordiv(long long a, long long b) {
    long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long sf_mod(long long a, long long b) {
    long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ float sf_fmod_py(float a, float b) {
    float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
__device__ __forceinline__ double sf_fmod_py(double a, double b) {
    double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
__device__ __forceinline__ float sf_max(float a, float b) { return (a != a || b != b) ? SF_NAN : fmaxf(a, b); }
__device__ __forceinline__ float sf_min(float a, float b) { return (a != a || b != b) ? SF_NAN : fminf(a, b); }
__device__ __forceinline__ double sf_max(double a, double b) { return (a != a || b != b) ? (double)SF_NAN : fmax(a, b); }
__device__ __forceinline__ double sf_min(double a, double b) { return (a != a || b != b) ? (double)SF_NAN : fmin(a, b); }
__device__ __forceinline__ long long sf_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long sf_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ bool sf_max(bool a, bool b) { return a || b; }
__device__ __forceinline__ bool sf_min(bool a, bool b) { return a && b; }
__device__ __forceinline__ float sf_sign(float a) { return (a > 0.0f) ? 1.0f : ((a < 0.0f) ? -1.0f : a); }
__device__ __forceinline__ float sf_round(float a) { return rintf(a); }
#ifndef SF_HOST
__device__ __forceinline__ void sf_mma_bf16(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }
__device__ __forceinline__ void sf_mma_f16(float* c, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])); }
#endif
"""


@dataclass
class Buffer:
    """A materialised tensor: a definition input/output or a slice of the workspace."""

    name: str
    dtype: str
    shape: list            # sympy sizes
    kind: str              # input | output | ws
    offset: Optional[sympy.Expr] = None   # ws: byte offset (set by the plan)
    nbytes: Optional[sympy.Expr] = None

    def numel(self):
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)


@dataclass
class Kernel:
    name: str
    params: list = field(default_factory=list)       # (C declaration, launch arg)
    lines: list = field(default_factory=list)
    head: list = field(default_factory=list)         # lines at the top of the body (pointers)
    locals: set = field(default_factory=set)         # symbol names that are C locals
    written: set = field(default_factory=set)        # buffers this kernel writes
    _keys: dict = field(default_factory=dict)
    _cache: list = field(default_factory=lambda: [{}])
    _masks: list = field(default_factory=list)
    _n: int = 0
    _indent: int = 1
    uses_ws: bool = False
    # buffer name -> C value: reads of that buffer take the value instead of loading it (a GEMM's
    # fused epilogue reads its own result, which never goes to memory; epilogue.py)
    replace: dict = field(default_factory=dict)

    # ---- parameters ------------------------------------------------------------------------
    def _param(self, key, decl, arg):
        if key not in self._keys:
            self._keys[key] = True
            self.params.append((decl, arg))

    def ptr(self, buf: Buffer) -> str:
        ct = STORAGE[buf.dtype]
        if buf.kind == "ws":
            if not self.uses_ws:
                self.uses_ws = True
                self._param("ws", "unsigned char* __restrict__ ws", "workspace")
            # the byte offset is known once the plan packs the workspace: resolved there
            self._param(("o", buf.name), f"long long o_{buf.name}", ("wsoff", buf))
            key = ("p", buf.name)
            if key not in self._keys:
                self._keys[key] = True
                self.head.append(f"    {ct}* p_{buf.name} = ({ct}*)(ws + o_{buf.name});")
            return f"p_{buf.name}"
        const = "const " if buf.kind == "input" else ""
        self._param(("t", buf.name), f"{const}{ct}* __restrict__ p_{buf.name}", buf.name)
        return f"p_{buf.name}"

    def size(self, name: str) -> str:
        from .dynamic import device_size

        dev = device_size(self, name)  # a data-dependent size: read from its count in the workspace
        if dev is not None:
            return dev
        self._param(("z", name), f"long long z_{name}", f"int64:{name}")
        return f"z_{name}"

    def scalar(self, name: str) -> str:
        self._param(("f", name), f"float f_{name}", f"float32:{name}")
        return f"f_{name}"

    # ---- code ------------------------------------------------------------------------------
    def c(self, e) -> str:
        """A sympy index expression as C (int64)."""
        e = symexpr.fold_divmod(sympy.sympify(e))

        def name(n):
            return n if n in self.locals else self.size(n)
        return symexpr.to_c(e, name)

    def emit(self, line: str) -> None:
        self.lines.append("    " * self._indent + line)

    def fresh(self, prefix="t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def local_sym(self, prefix="_i") -> sympy.Symbol:
        n = self.fresh(prefix)
        self.locals.add(n)
        return symexpr.sym(n)

    def mask(self) -> Optional[str]:
        return " && ".join(f"({m})" for m in self._masks) if self._masks else None

    def let(self, ctype: str, expr: str, key=None) -> str:
        """A named temporary (CSE by key, scoped to the current loop/mask)."""
        if key is not None:
            k = (key, self.mask())
            for scope in reversed(self._cache):
                if k in scope:
                    return scope[k]
        v = self.fresh()
        self.emit(f"const {ctype} {v} = {expr};")
        if key is not None:
            self._cache[-1][(key, self.mask())] = v
        return v

    def lookup(self, key):
        k = (key, self.mask())
        for scope in reversed(self._cache):
            if k in scope:
                return scope[k]
        return None

    def remember(self, key, value: str) -> None:
        self._cache[-1][(key, self.mask())] = value

    def load(self, buf: Buffer, index) -> str:
        if buf.name in self.replace:
            return self.replace[buf.name]
        p = self.ptr(buf)
        idx = self.c(index)
        ct = compute_type(buf.dtype)
        m = self.mask()
        expr = f"cv({p}[{idx}])" if m is None else f"(({m}) ? cv({p}[{idx}]) : ({ct})0)"
        return self.let(ct, expr, key=("load", buf.name, idx))

    def store(self, buf: Buffer, index, value: str) -> None:
        self.written.add(buf.name)
        self.emit(f"st(&{self.ptr(buf)}[{self.c(index)}], {value});")

    def push_mask(self, m: str) -> None:
        self._masks.append(m)

    def pop_mask(self) -> None:
        self._masks.pop()

    def open(self, header: str) -> None:
        self.emit(header + " {")
        self._indent += 1
        self._cache.append({})

    def close(self) -> None:
        self._cache.pop()
        self._indent -= 1
        self.emit("}")

    def source(self, launch_bounds: int = 0) -> str:
        lb = f"__launch_bounds__({launch_bounds}) " if launch_bounds else ""
        decl = ", ".join(d for d, _ in self.params) or "void"
        return (f'extern "C" __global__ void {lb}{self.name}({decl}) {{\n' + "\n".join(self.head)
                + ("\n" if self.head else "") + "\n".join(self.lines) + "\n}\n")

    def args(self) -> list[str]:
        return [f"int64:{symexpr.to_axis(a[1].offset)}" if isinstance(a, tuple) else a
                for _, a in self.params]
