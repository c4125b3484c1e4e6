"""Kernel templates: each writes one CUDA kernel (a `Kernel`) and says how to launch it.

- pointwise: a grid-stride loop over the elements of one or more outputs of the same size;
- reduction: one group of RW threads per output element (RW = 32: a warp; 256: a block), any
  reduced dims, sum/prod/max/min/argmax/argmin/any/all, fp32 (or wider) accumulation;
- matmul: a 64x64x16 shared-memory tiled SIMT kernel with fp32 FMA accumulation over operand
  loaders (any strides, batch, fused prologue ops, implicit-GEMM convolution operands) and an
  epilogue that writes through an index function (bias, layout of a conv output);
- scan: one thread per row, sequential (cumsum / cumprod);
- sort: per row, every element's stable rank by counting (sort, argsort, topk);
- scatter: copy then scatter (store or atomic add) over the source's elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
from torch.utils._sympy.functions import ModularIndexing

from . import symexpr
from .kernel import Buffer, Kernel, STORAGE, compute_type, convert, round_to
from .loops import Loader, contiguous_strides, prod, unravel

BLOCK = 256


@dataclass
class LaunchSpec:
    kernel: Kernel
    grid: list
    block: list
    smem: str = "0"
    launch_bounds: int = 0
    notes: str = ""
    extra_src: str = ""
    kind: str = ""


def _unravel(k: Kernel, lin: sympy.Symbol, shape) -> list:
    st = contiguous_strides(shape)
    return [sympy.Integer(0) if s == 1 else (ModularIndexing(lin, stv, s) if len(shape) > 1 or True
                                             else lin) for stv, s in zip(st, shape)]


def pointwise(name: str, items: list[tuple[Loader, Buffer]]) -> LaunchSpec:
    """Write each loader's values into its buffer (all with the same number of elements)."""
    k = Kernel(name)
    n = items[0][1].numel()
    lin = k.local_sym("_x")
    k.emit(f"const long long n_ = {k.c(n)};")
    k.open(f"for (long long {lin} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {lin} < n_; "
           f"{lin} += (long long)gridDim.x * blockDim.x)")
    for loader, buf in items:
        shape = buf.shape
        idx = unravel(lin, shape)
        v = loader(k, idx)
        k.store(buf, lin, convert(v, loader.dtype, buf.dtype))
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(n)}, {BLOCK}), 131072))"
    return LaunchSpec(k, [grid], [str(BLOCK)], kind="pointwise")


_INIT = {"sum": "0", "prod": "1", "max": "-SF_INF", "min": "SF_INF", "any": "false", "all": "true"}


LONG_SUM = 4096  # fp32 sums over more terms than this accumulate in double


def _acc_type(op: str, dtype: str) -> str:
    if op in ("any", "all"):
        return "bool"
    ct = compute_type(dtype)
    return ct


def reduction(name: str, src: Loader, rdims: list[int], op: str, out: Buffer,
              keep_shape: list, scale=None, recip: bool = True) -> LaunchSpec:
    """out[kept] = op over rdims of src (argmax/argmin: the index along the single rdim).
    scale: a C-free sympy/float divisor applied at the end (mean)."""
    k = Kernel(name)
    nd = len(src.shape)
    kept = [d for d in range(nd) if d not in rdims]
    rshape = [src.shape[d] for d in rdims]
    kshape = [src.shape[d] for d in kept]
    R = prod(rshape)
    NO = prod(kshape)
    rc = symexpr.as_int(R)
    RW = 32 if (rc is not None and rc <= 256) else BLOCK
    ROWS = BLOCK // RW
    arg = op in ("argmax", "argmin")
    base_op = {"argmax": "max", "argmin": "min"}.get(op, op)
    acc_t = _acc_type(base_op, src.dtype) if not arg else compute_type(src.dtype)
    if op == "sum" and acc_t == "float" and (rc is None or rc > LONG_SUM):
        # a long fp32 sum: each thread adds R / 256 terms in turn, whose rounding error grows far past
        # torch's tree-shaped sum (a 2.4M-term channel sum of an instance-norm backward missed a
        # 6.5e-4 tolerance by 0.02); double accumulation costs nothing in a memory-bound reduction
        acc_t = "double"
    k.emit(f"const long long nout_ = {k.c(NO)};")
    k.emit(f"const long long R_ = {k.c(R)};")
    k.emit(f"__shared__ {acc_t if acc_t != 'bool' else 'int'} sv_[{BLOCK}];")
    if arg:
        k.emit(f"__shared__ long long si_[{BLOCK}];")
    k.emit(f"const int lane_ = threadIdx.x % {RW}; const int grp_ = threadIdx.x / {RW};")
    k.open(f"for (long long base_ = (long long)blockIdx.x * {ROWS}; base_ < nout_; "
           f"base_ += (long long)gridDim.x * {ROWS})")
    row = k.local_sym("_row")
    k.emit(f"const long long {row} = base_ + grp_;")
    init = _INIT[base_op]
    if acc_t == "long long" and base_op in ("max", "min"):
        init = "LLONG_MIN" if base_op == "max" else "LLONG_MAX"
        init = "(-9223372036854775807LL - 1)" if base_op == "max" else "9223372036854775807LL"
    if acc_t == "bool" and base_op in ("max", "min"):
        init = "false" if base_op == "max" else "true"
    if acc_t == "double" and base_op in ("max", "min"):
        init = "(-(double)SF_INF)" if base_op == "max" else "((double)SF_INF)"
    k.emit(f"{acc_t} acc_ = ({acc_t})({init});")
    if arg:
        k.emit("long long ai_ = 0;")
    k.open(f"if ({row} < nout_)")
    r = k.local_sym("_r")
    k.open(f"for (long long {r} = lane_; {r} < R_; {r} += {RW})")
    kidx = unravel(row, kshape)
    ridx = unravel(r, rshape)
    full = [None] * nd
    for d, e in zip(kept, kidx):
        full[d] = e
    for d, e in zip(rdims, ridx):
        full[d] = e
    v = src(k, full)
    v = convert(v, src.dtype, "bool") if acc_t == "bool" else v
    if acc_t != compute_type(src.dtype) and acc_t != "bool":
        v = f"(({acc_t})({v}))"
    if op == "sum":
        k.emit(f"acc_ = acc_ + {v};")
    elif op == "prod":
        k.emit(f"acc_ = acc_ * {v};")
    elif op in ("max", "min"):
        k.emit(f"acc_ = sf_{op}(acc_, {v});")
    elif op == "any":
        k.emit(f"acc_ = acc_ || {v};")
    elif op == "all":
        k.emit(f"acc_ = acc_ && {v};")
    else:
        cmp = ">" if op == "argmax" else "<"
        isnan = f"({v} != {v})" if acc_t in ("float", "double") else "false"
        k.emit(f"if (({v} {cmp} acc_) || ({isnan} && !(acc_ != acc_))) {{ acc_ = {v}; ai_ = {r}; }}")
    k.close()
    k.close()
    # combine within the group of RW threads: warp shuffles, then shared memory across warps
    comb = {"sum": "a + b", "prod": "a * b", "max": "sf_max(a, b)", "min": "sf_min(a, b)",
            "any": "a || b", "all": "a && b"}.get(op)
    if arg:
        cmp = ">" if op == "argmax" else "<"
        nan = "(ov != ov)" if acc_t in ("float", "double") else "false"
        nan_self = "(acc_ != acc_)" if acc_t in ("float", "double") else "false"
        step = (f"{{ if (!{nan_self} && ({nan} || ov {cmp} acc_ || (ov == acc_ && oi < ai_))) "
                f"{{ acc_ = ov; ai_ = oi; }} }}")
        for off in (16, 8, 4, 2, 1):
            k.emit(f"{{ {acc_t} ov = __shfl_xor_sync(0xffffffffu, acc_, {off}); long long oi = "
                   f"__shfl_xor_sync(0xffffffffu, ai_, {off}); {step} }}")
        if RW > 32:
            k.emit("__syncthreads();")
            k.emit("if ((threadIdx.x % 32) == 0) { sv_[threadIdx.x / 32] = acc_; si_[threadIdx.x / 32] = ai_; }")
            k.emit("__syncthreads();")
            k.open("if (threadIdx.x == 0)")
            k.open(f"for (int w_ = 1; w_ < {RW // 32}; ++w_)")
            k.emit(f"{acc_t} ov = sv_[w_]; long long oi = si_[w_]; {step}")
            k.close()
            k.close()
    else:
        shfl_t = "int" if acc_t == "bool" else acc_t
        for off in (16, 8, 4, 2, 1):
            k.emit(f"{{ {acc_t} a = acc_; {acc_t} b = ({acc_t})__shfl_xor_sync(0xffffffffu, "
                   f"({shfl_t})acc_, {off}); acc_ = {comb}; }}")
        if RW > 32:
            k.emit("__syncthreads();")
            k.emit("if ((threadIdx.x % 32) == 0) sv_[threadIdx.x / 32] = acc_;")
            k.emit("__syncthreads();")
            k.open("if (threadIdx.x == 0)")
            k.open(f"for (int w_ = 1; w_ < {RW // 32}; ++w_)")
            k.emit(f"{acc_t} a = acc_; {acc_t} b = ({acc_t})sv_[w_]; acc_ = {comb};")
            k.close()
            k.close()
    k.open(f"if (lane_ == 0 && {row} < nout_)")
    if arg:
        k.store(out, row, "ai_")
    else:
        res = "acc_"
        if scale is not None:
            # mean: PyTorch multiplies the sum by 1/N (MeanOps); var divides by N - correction
            res = (f"(acc_ * (({acc_t})1 / ({acc_t})({k.c(scale)})))" if recip
                   else f"(acc_ / ({acc_t})({k.c(scale)}))")
        acc_dt = {"float": "float32", "double": "float64", "long long": "int64", "bool": "bool"}[acc_t]
        k.store(out, row, convert(res, acc_dt, out.dtype))
    k.close()
    if RW > 32:
        k.emit("__syncthreads();")
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(NO)}, {ROWS}), 131072))"
    return LaunchSpec(k, [grid], [str(BLOCK)], launch_bounds=BLOCK, kind="reduction")


def mm_result(k: Kernel, val: str, out_dtype: str, out: Buffer, flat, bidx, om, on, epilogue) -> None:
    """Store a matmul's fp32 result `val` (bias added) at flat: rounded once to out_dtype; with an
    epilogue (epilogue.py: an elementwise expression of the result, fused by the lowering) the
    rounded value is what the unfused plan would have stored and read back, and the expression
    over it is stored instead. Shared by the generic kernels and the GEMM template's adapter."""
    rounded = round_to(val, out_dtype) if out_dtype != "float32" else val
    if epilogue is None:
        k.store(out, flat, convert(rounded, out_dtype, out.dtype))
        return
    ct = compute_type(out_dtype)
    v = k.let(ct, rounded if ct == "float" else f"(({ct})({rounded}))")
    k.store(out, flat, convert(epilogue(k, v, bidx, om, on), epilogue.dtype, out.dtype))


def _mm_epilogue(k: Kernel, acc: str, bidx, bz, M, N, out, out_dtype, out_index, bias,
                 epilogue=None) -> None:
    """Store one accumulator at (om_, on_) (C locals): bias in fp32, one rounding to out_dtype."""
    om, on = symexpr.sym("om_"), symexpr.sym("on_")
    k.locals.update({"om_", "on_"})
    k.open("if (om_ < M_ && on_ < N_)")
    val = acc
    if bias is not None:
        bv = bias(k, bidx + [om, on])
        val = f"({acc} + (float)({bv}))"
    flat = bz * M * N + om * N + on if out_index is None else out_index(bidx, om, on)
    mm_result(k, val, out_dtype, out, flat, bidx, om, on, epilogue)
    k.close()


def _is_one(x) -> bool:
    return sympy.sympify(x) == 1


def _mm_tile_loads(k: Kernel, a: Loader, b: Loader, bidx, BM, BN, BK, conv_a: str, conv_b: str,
                   a_store: str, b_store: str) -> None:
    """Load the A (BM x BK) and B (BK x BN) tiles at (m0_, n0_, k0_) through the loaders; an
    element outside M/N/K is 0. a_store/b_store: C statements with {m} {k} {n} {v}."""
    # consecutive threads walk the operand's contiguous dim (coalesced loads): k for a row-major
    # A and for B = W^T (a linear layer's weight), m or n otherwise
    a_m_fast = a.is_view and len(a.strides) >= 2 and _is_one(a.strides[-2]) and not _is_one(a.strides[-1])
    b_k_fast = b.is_view and len(b.strides) >= 2 and _is_one(b.strides[-2]) and not _is_one(b.strides[-1])
    k.open(f"for (int e_ = threadIdx.x; e_ < {BM * BK}; e_ += {BLOCK})")
    if a_m_fast:
        k.emit(f"const int tm_ = e_ % {BM}, tk_ = e_ / {BM};")
    else:
        k.emit(f"const int tm_ = e_ / {BK}, tk_ = e_ % {BK};")
    k.emit("const long long gm_ = m0_ + tm_, gk_ = k0_ + tk_;")
    k.locals.update({"gm_", "gk_"})
    k.push_mask("gm_ < M_ && gk_ < K_")
    va = a(k, bidx + [symexpr.sym("gm_"), symexpr.sym("gk_")])
    k.pop_mask()
    k.emit(a_store.format(m="tm_", k="tk_", v=f"(gm_ < M_ && gk_ < K_) ? {conv_a.format(va)} : {conv_a.format('0.0f')}"))
    k.close()
    k.open(f"for (int e_ = threadIdx.x; e_ < {BN * BK}; e_ += {BLOCK})")
    if b_k_fast:
        k.emit(f"const int tk_ = e_ % {BK}, tn_ = e_ / {BK};")
    else:
        k.emit(f"const int tk_ = e_ / {BN}, tn_ = e_ % {BN};")
    k.emit("const long long gk_ = k0_ + tk_, gn_ = n0_ + tn_;")
    k.locals.update({"gn_"})
    k.push_mask("gn_ < N_ && gk_ < K_")
    vb = b(k, bidx + [symexpr.sym("gk_"), symexpr.sym("gn_")])
    k.pop_mask()
    k.emit(b_store.format(n="tn_", k="tk_", v=f"(gn_ < N_ && gk_ < K_) ? {conv_b.format(vb)} : {conv_b.format('0.0f')}"))
    k.close()


def matmul(name: str, a: Loader, b: Loader, out_dtype: str, out: Buffer, out_index=None,
           bias=None, batch_shape=None, epilogue=None) -> LaunchSpec:
    """out[batch, m, n] = sum_k a[batch, m, k] * b[batch, k, n] (+ bias[batch, m, n]), fp32
    accumulation: mma.sync (m16n8k16) when both operands are bf16 or both fp16, SIMT FMA else.
    a, b: loaders with shapes (*batch, M, K) and (*batch, K, N); batch dims already broadcast.
    out_index(batch_idx, m, n) -> flat index into out (default: contiguous (*batch, M, N)).
    epilogue(k, v, batch_idx, m, n) -> C value of dtype epilogue.dtype: what is stored instead of
    the result v (already rounded to out_dtype), see mm_result."""
    if a.dtype == b.dtype and a.dtype in ("bfloat16", "float16"):
        return _matmul_mma(name, a, b, out_dtype, out, out_index, bias, batch_shape, epilogue)
    BM, BN, BK, TM, TN = 64, 64, 16, 4, 4
    k = Kernel(name)
    bshape = list(batch_shape if batch_shape is not None else a.shape[:-2])
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    NB = prod(bshape)
    k.emit(f"__shared__ float As_[{BK}][{BM} + 4];")
    k.emit(f"__shared__ float Bs_[{BK}][{BN} + 4];")
    k.emit(f"const long long M_ = {k.c(M)}, N_ = {k.c(N)}, K_ = {k.c(K)}, NB_ = {k.c(NB)};")
    k.emit("const int tx_ = threadIdx.x % 16, ty_ = threadIdx.x / 16;")
    # M tiles on grid.x (up to 2^31 - 1: conv rows = batch x pixels), N tiles on grid.y
    k.emit(f"const long long m0_ = (long long)blockIdx.x * {BM}, n0_ = (long long)blockIdx.y * {BN};")
    # M read from the device (a data-dependent row count): the grid covers its upper bound
    k.emit("if (m0_ >= M_) return;")
    k.open("for (long long bz_ = blockIdx.z; bz_ < NB_; bz_ += gridDim.z)")
    bz = symexpr.sym("bz_")
    k.locals.add("bz_")
    bidx = unravel(bz, bshape)
    k.emit(f"float acc_[{TM}][{TN}];")
    k.emit(f"for (int i = 0; i < {TM}; ++i) for (int j = 0; j < {TN}; ++j) acc_[i][j] = 0.0f;")
    k.open(f"for (long long k0_ = 0; k0_ < K_; k0_ += {BK})")
    _mm_tile_loads(k, a, b, bidx, BM, BN, BK, "(float)({})", "(float)({})",
                   "As_[{k}][{m}] = {v};", "Bs_[{k}][{n}] = {v};")
    k.emit("__syncthreads();")
    k.open(f"for (int kk_ = 0; kk_ < {BK}; ++kk_)")
    k.emit(f"float ra_[{TM}], rb_[{TN}];")
    k.emit(f"for (int i = 0; i < {TM}; ++i) ra_[i] = As_[kk_][ty_ + 16 * i];")
    k.emit(f"for (int j = 0; j < {TN}; ++j) rb_[j] = Bs_[kk_][tx_ + 16 * j];")
    k.emit(f"for (int i = 0; i < {TM}; ++i) for (int j = 0; j < {TN}; ++j) "
           "acc_[i][j] = fmaf(ra_[i], rb_[j], acc_[i][j]);")
    k.close()
    k.emit("__syncthreads();")
    k.close()
    k.open(f"for (int i = 0; i < {TM}; ++i)")
    k.open(f"for (int j = 0; j < {TN}; ++j)")
    k.emit("const long long om_ = m0_ + ty_ + 16 * i, on_ = n0_ + tx_ + 16 * j;")
    _mm_epilogue(k, "acc_[i][j]", bidx, bz, M, N, out, out_dtype, out_index, bias, epilogue)
    k.close()
    k.close()
    k.close()
    grid = [f"max(1, ceil_div({symexpr.to_axis(M)}, {BM}))", f"max(1, min(ceil_div({symexpr.to_axis(N)}, {BN}), 65535))",
            f"max(1, min({symexpr.to_axis(NB)}, 65535))"]
    return LaunchSpec(k, grid, [str(BLOCK)], launch_bounds=BLOCK, kind="matmul")


def _matmul_mma(name, a, b, out_dtype, out, out_index, bias, batch_shape, epilogue=None) -> LaunchSpec:
    """128x128x32 block tiles, 8 warps of 64x32, mma.sync m16n8k16 from padded shared memory."""
    BM, BN, BK = 128, 128, 32
    T = STORAGE[a.dtype]
    to_t = "__float2bfloat16_rn({})" if a.dtype == "bfloat16" else "__float2half_rn({})"
    mma = "sf_mma_bf16" if a.dtype == "bfloat16" else "sf_mma_f16"
    k = Kernel(name)
    bshape = list(batch_shape if batch_shape is not None else a.shape[:-2])
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    NB = prod(bshape)
    k.emit(f"__shared__ __align__(16) {T} As_[{BM}][{BK} + 8];")
    k.emit(f"__shared__ __align__(16) {T} Bs_[{BN}][{BK} + 8];")
    k.emit(f"const long long M_ = {k.c(M)}, N_ = {k.c(N)}, K_ = {k.c(K)}, NB_ = {k.c(NB)};")
    k.emit("const int warp_ = threadIdx.x / 32, lane_ = threadIdx.x % 32;")
    k.emit("const int wm_ = warp_ / 4, wn_ = warp_ % 4, g_ = lane_ / 4, q_ = lane_ % 4;")
    k.emit(f"const long long m0_ = (long long)blockIdx.x * {BM}, n0_ = (long long)blockIdx.y * {BN};")
    # M read from the device (a data-dependent row count): the grid covers its upper bound
    k.emit("if (m0_ >= M_) return;")
    k.open("for (long long bz_ = blockIdx.z; bz_ < NB_; bz_ += gridDim.z)")
    bz = symexpr.sym("bz_")
    k.locals.add("bz_")
    bidx = unravel(bz, bshape)
    k.emit("float acc_[4][4][4];")
    k.emit("for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) for (int r = 0; r < 4; ++r) "
           "acc_[i][j][r] = 0.0f;")
    k.open(f"for (long long k0_ = 0; k0_ < K_; k0_ += {BK})")
    _mm_tile_loads(k, a, b, bidx, BM, BN, BK, to_t, to_t, "As_[{m}][{k}] = {v};", "Bs_[{n}][{k}] = {v};")
    k.emit("__syncthreads();")
    k.open("for (int ks_ = 0; ks_ < 32; ks_ += 16)")
    k.emit("unsigned af_[4][4], bf_[4][2];")
    k.open("for (int i = 0; i < 4; ++i)")
    k.emit("const int r_ = wm_ * 64 + i * 16 + g_, c_ = ks_ + q_ * 2;")
    k.emit("af_[i][0] = *(const unsigned*)&As_[r_][c_]; af_[i][1] = *(const unsigned*)&As_[r_ + 8][c_];")
    k.emit("af_[i][2] = *(const unsigned*)&As_[r_][c_ + 8]; af_[i][3] = *(const unsigned*)&As_[r_ + 8][c_ + 8];")
    k.close()
    k.open("for (int j = 0; j < 4; ++j)")
    k.emit("const int n_ = wn_ * 32 + j * 8 + g_, c_ = ks_ + q_ * 2;")
    k.emit("bf_[j][0] = *(const unsigned*)&Bs_[n_][c_]; bf_[j][1] = *(const unsigned*)&Bs_[n_][c_ + 8];")
    k.close()
    k.emit(f"for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) {mma}(acc_[i][j], af_[i], bf_[j]);")
    k.close()
    k.emit("__syncthreads();")
    k.close()
    k.open("for (int i = 0; i < 4; ++i)")
    k.open("for (int j = 0; j < 4; ++j)")
    k.open("for (int r = 0; r < 4; ++r)")
    k.emit("const long long om_ = m0_ + wm_ * 64 + i * 16 + g_ + (r >= 2 ? 8 : 0), "
           "on_ = n0_ + wn_ * 32 + j * 8 + q_ * 2 + (r & 1);")
    _mm_epilogue(k, "acc_[i][j][r]", bidx, bz, M, N, out, out_dtype, out_index, bias, epilogue)
    k.close()
    k.close()
    k.close()
    k.close()
    grid = [f"max(1, ceil_div({symexpr.to_axis(M)}, {BM}))", f"max(1, min(ceil_div({symexpr.to_axis(N)}, {BN}), 65535))",
            f"max(1, min({symexpr.to_axis(NB)}, 65535))"]
    return LaunchSpec(k, grid, [str(BLOCK)], launch_bounds=BLOCK, kind="matmul")


def scan(name: str, src: Loader, dim: int, op: str, out: Buffer) -> LaunchSpec:
    """out = cumulative op of src along dim (one thread per row, in order)."""
    k = Kernel(name)
    nd = len(src.shape)
    dim %= nd
    other = [d for d in range(nd) if d != dim]
    oshape = [src.shape[d] for d in other]
    L = src.shape[dim]
    NR = prod(oshape)
    acc_t = compute_type(out.dtype)
    row = k.local_sym("_row")
    k.emit(f"const long long nr_ = {k.c(NR)}, L_ = {k.c(L)};")
    k.open(f"for (long long {row} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {row} < nr_; "
           f"{row} += (long long)gridDim.x * blockDim.x)")
    k.emit(f"{acc_t} acc_ = ({acc_t})({'0' if op == 'sum' else '1'});")
    j = k.local_sym("_j")
    k.open(f"for (long long {j} = 0; {j} < L_; ++{j})")
    oidx = unravel(row, oshape)
    full = list(oidx)
    full.insert(dim, j)
    v = convert(src(k, full), src.dtype, out.dtype)
    # the running value stays in the accumulation type (float for 16-bit dtypes, as PyTorch's
    # scan); each stored prefix is rounded once
    k.emit(f"acc_ = acc_ {'+' if op == 'sum' else '*'} {v};")
    ost = contiguous_strides(src.shape)
    k.store(out, sum((i * s for i, s in zip(full, ost)), sympy.Integer(0)), round_to("acc_", out.dtype))
    k.close()
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(NR)}, {BLOCK}), 131072))"
    return LaunchSpec(k, [grid], [str(BLOCK)], kind="scan")


def _row_ranks(name: str, src: Buffer, dim: int, k_top):
    """The frame sort_rank and topk_unsorted share: one thread per element of src (a grid-stride
    loop), i_ its position along dim in its row, base_ the row's start, outer_/inner_ the row's
    place in an output of KT_ entries along dim, v_ its value. Returns (kernel, src pointer,
    compute type, total elements); the element loop is left open."""
    k = Kernel(name)
    shape = src.shape
    dim %= len(shape)
    total = prod(shape)
    lin = k.local_sym("_x")
    k.emit(f"const long long n_ = {k.c(total)}, L_ = {k.c(shape[dim])}, "
           f"S_ = {k.c(contiguous_strides(shape)[dim])}, KT_ = {k.c(k_top)};")
    k.open(f"for (long long {lin} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {lin} < n_; "
           f"{lin} += (long long)gridDim.x * blockDim.x)")
    k.emit(f"const long long i_ = ({lin} / S_) % L_;")
    k.emit(f"const long long base_ = {lin} - i_ * S_;")
    k.emit("const long long outer_ = base_ / (S_ * L_), inner_ = base_ % S_;")
    p = k.ptr(src)
    ct = compute_type(src.dtype)
    k.emit(f"const {ct} v_ = cv({p}[{lin}]);")
    return k, p, ct, total


def _key_order(ct: str, largest: bool):
    """C expressions of the selection order with NaN the largest value: before(a, b), a strictly
    ahead of b (the larger first when `largest`), and equal(a, b)."""
    isf = ct in ("float", "double")

    def before(a: str, b: str) -> str:
        if isf:
            return (f"(!({b} != {b}) && (({a} != {a}) || {a} > {b}))" if largest else
                    f"(!({a} != {a}) && (({b} != {b}) || {a} < {b}))")
        return f"({a} > {b})" if largest else f"({a} < {b})"

    def equal(a: str, b: str) -> str:
        return f"(({a} == {b}) || (({a} != {a}) && ({b} != {b})))" if isf else f"({a} == {b})"

    return before, equal


def _store_at_rank(k: Kernel, src: Buffer, out_vals, out_idx, total) -> LaunchSpec:
    """Inside an open `if` on r_: v_ and i_ written at rank r_ of the element's output row (KT_
    entries along dim); closes the `if` and the element loop."""
    k.emit("const long long o_ = (outer_ * KT_ + r_) * S_ + inner_;")
    if out_vals is not None:
        k.emit(f"st(&{k.ptr(out_vals)}[o_], {convert('v_', src.dtype, out_vals.dtype)});")
        k.written.add(out_vals.name)
    if out_idx is not None:
        k.emit(f"st(&{k.ptr(out_idx)}[o_], {convert('i_', 'int64', out_idx.dtype)});")
        k.written.add(out_idx.name)
    k.close()
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(total)}, {BLOCK}), 131072))"
    return LaunchSpec(k, [grid], [str(BLOCK)], kind="sort")


def topk_unsorted(name: str, src: Buffer, ranked: Buffer, dim: int, largest: bool, k_top, out_vals,
                  out_idx) -> LaunchSpec:
    """topk(sorted=False) in the order CUDA's ATen returns it (gatherTopK, the path every CUDA topk
    takes): with t the k-th best value of the row, first the elements strictly better than t in
    index order, then those equal to t in index order until k are written. Indices are compared
    element by element, so this order is the answer, not a detail. `ranked`: the row's k best
    values in sorted order (sort_rank's output), read for t."""
    k, p, ct, total = _row_ranks(name, src, dim, k_top)
    better, equal = _key_order(ct, largest)
    k.emit(f"const {ct} t_ = cv({k.ptr(ranked)}[(outer_ * KT_ + (KT_ - 1)) * S_ + inner_]);")
    k.emit("long long g_ = 0, gb_ = 0, eb_ = 0;")  # better than t: all, before i; equal to t before i
    k.open("for (long long j_ = 0; j_ < L_; ++j_)")
    k.emit(f"const {ct} w_ = cv({p}[base_ + j_ * S_]);")
    k.emit(f"const bool b_ = {better('w_', 't_')};")
    k.emit("g_ += b_;")
    k.emit(f"if (j_ < i_) {{ gb_ += b_; eb_ += {equal('w_', 't_')}; }}")
    k.close()
    k.emit("long long r_ = -1;")
    k.emit(f"if ({better('v_', 't_')}) r_ = gb_;")
    k.emit(f"else if ({equal('v_', 't_')} && g_ + eb_ < KT_) r_ = g_ + eb_;")
    k.open("if (r_ >= 0)")
    return _store_at_rank(k, src, out_vals, out_idx, total)


def sort_rank(name: str, src: Buffer, dim: int, descending: bool, k_top, out_vals, out_idx,
              vals_dtype: str) -> LaunchSpec:
    """Per row along dim: each element's stable rank r (ties keep index order; NaN counts as the
    largest value); values/indices written at r when r < k_top."""
    k, p, ct, total = _row_ranks(name, src, dim, k_top)
    before, equal = _key_order(ct, descending)
    k.emit("long long r_ = 0;")
    k.open("for (long long j_ = 0; j_ < L_; ++j_)")
    k.emit(f"const {ct} w_ = cv({p}[base_ + j_ * S_]);")
    k.emit(f"if ({before('w_', 'v_')} || ({equal('w_', 'v_')} && j_ < i_)) ++r_;")
    k.close()
    k.open("if (r_ < KT_)")
    return _store_at_rank(k, src, out_vals, out_idx, total)


def scatter(name: str, out: Buffer, iter_shape, index_fn, value: Loader, accumulate: str) -> LaunchSpec:
    """For every element e of iter_shape: out[index_fn(k, e)] (op)= value(e). accumulate: '' (store),
    'add' (atomic add), 'mul'/'amax'/'amin' are refused by the caller."""
    k = Kernel(name)
    n = prod(iter_shape)
    lin = k.local_sym("_x")
    k.emit(f"const long long n_ = {k.c(n)};")
    k.open(f"for (long long {lin} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {lin} < n_; "
           f"{lin} += (long long)gridDim.x * blockDim.x)")
    idx = unravel(lin, iter_shape)
    flat = index_fn(k, idx)
    v = convert(value(k, idx), value.dtype, out.dtype)
    p = k.ptr(out)
    k.written.add(out.name)
    if accumulate == "add":
        if out.dtype in ("int64",):
            k.emit(f"atomicAdd((unsigned long long*)&{p}[{flat}], (unsigned long long)({v}));")
        elif out.dtype == "int32":
            k.emit(f"atomicAdd(&{p}[{flat}], (int)({v}));")
        elif out.dtype == "float32":
            k.emit(f"atomicAdd(&{p}[{flat}], {v});")
        elif out.dtype == "float64":
            k.emit(f"atomicAdd(&{p}[{flat}], {v});")
        elif out.dtype == "bfloat16":
            k.emit(f"atomicAdd(&{p}[{flat}], __float2bfloat16_rn({v}));")
        elif out.dtype == "float16":
            k.emit(f"atomicAdd(&{p}[{flat}], __float2half_rn({v}));")
        else:
            raise ValueError(f"scatter-add into {out.dtype}")
    else:
        k.emit(f"st(&{p}[{flat}], {v});")
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(n)}, {BLOCK}), 131072))"
    return LaunchSpec(k, [grid], [str(BLOCK)], kind="scatter")
