"""The compiler's matmul lowering on the fast GEMM template (gemm.py): same call as the lowering's
generic `matmul(name, a, b, out_dtype, out, out_index=None, bias=None, batch_shape=None)`, whose
operands are loaders of shapes (*batch, M, K) and (*batch, K, N) (views, fused elementwise chains,
implicit-GEMM convolution gathers) and whose epilogue adds `bias` (a loader over (*batch, M, N)),
rounds to out_dtype and stores at `out_index(batch index, m, n)` (default contiguous).

What it does with them:
- an operand that is a strided view of a buffer in the multiply's own 16-bit type becomes a strided
  operand (base pointer + stride expressions), so the mainloop can take it with 16-byte cp.async
  when the run-time alignment check passes; any other operand (a cast or scale chain, an im2col
  gather with padding masks, fp32 operands) becomes load code: the loader's C statements in a
  member function over (b, r, k), fetched through registers;
- the epilogue is the loader code of the bias and the store, as the generic kernel wrote it (same
  rounding: the result is rounded to out_dtype once after the bias is added);
- the kernel parameters are those the loaders registered in the lowering's Kernel (buffers, sizes,
  workspace offsets) plus M, N, K and the batch count, so the plan packs the workspace and fills the
  launch args exactly as for its own kernels.

Split-K needs a second launch and scratch space, which a single LaunchSpec cannot carry: the
adapter uses SPLIT = 1 (params may still choose tiles, stages and the tier).
"""

from __future__ import annotations

import re
from typing import Optional

import sympy

from ..generic import LaunchSpec
from . import gemm as G

# names of the index variables inside the generated member functions: unusual on purpose, so that a
# problem's own size symbols (often named m, n, k, b) are never mistaken for them
_B, _R, _K, _ROW, _COL = "sfg_b", "sfg_r", "sfg_k", "sfg_row", "sfg_col"


# the lowering's own launch record: the plan treats a template's kernel like a generic one
GemmLaunchSpec = LaunchSpec


def _kernel_class():
    from ..kernel import Kernel

    class GemmKernel(Kernel):
        """The lowering's Kernel (its params and workspace keys drive the plan) whose source is the
        generated GEMM text instead of its emitted lines."""
        text: str = ""

        def source(self, launch_bounds: int = 0) -> str:  # the text carries its own bounds
            return self.text

    return GemmKernel


def _capture(k, fn):
    """Run fn() with k's emitted lines redirected; (the lines, fn's result)."""
    saved = (k.lines, k._indent, k._cache)
    k.lines, k._indent, k._cache = [], 2, [{}]
    try:
        v = fn()
        return k.lines, v
    finally:
        k.lines, k._indent, k._cache = saved


def _batch_index(bshape):
    from torch.utils._sympy.functions import ModularIndexing

    from .. import symexpr
    from ..loops import contiguous_strides, same

    b = symexpr.sym(_B)
    out = []
    for st, s in zip(contiguous_strides(bshape), bshape):
        if same(s, 1):
            out.append(sympy.Integer(0))
        elif len(bshape) == 1:
            out.append(b)
        else:
            out.append(ModularIndexing(b, st, s))
    return out


def _strided_operand(k, x, bidx, rdim: int, kdim: int, compute: str) -> Optional[G.Operand]:
    """A strided operand for a plain view in the multiply's 16-bit type, else None."""
    from ..loops import same

    if not x.is_view or x.dtype != compute or x.dtype not in G.SIXTEEN_BIT:
        return None
    nb = len(bidx)
    strides = list(x.strides)
    if len(strides) != nb + 2:
        return None
    ptr = k.ptr(x.buf)
    boff = x.offset + sum((i * s for i, s in zip(bidx, strides[:nb])), sympy.Integer(0))
    rs, ks = strides[nb + rdim], strides[nb + kdim]
    k_stride = "1" if same(ks, 1) else k.c(ks)
    r_stride = "1" if same(rs, 1) and not same(ks, 1) else k.c(rs)
    # the struct's offset functions name the batch index `b`
    b_offset = re.sub(rf"\b{_B}\b", "b", k.c(boff))
    return G.Operand(None, x.dtype, k_stride=k_stride, r_stride=r_stride, b_offset=b_offset, ptr=ptr)


def _load_operand(k, x, bidx, which: str) -> G.Operand:
    """Load code: the loader's statements for element (b, r, k) (A: [.., r, k]; B: [.., k, r])."""
    from .. import symexpr

    r, kk = symexpr.sym(_R), symexpr.sym(_K)
    idx = bidx + ([r, kk] if which == "a" else [kk, r])
    lines, v = _capture(k, lambda: x(k, idx))
    head = f"const long long {_B} = b; const long long {_R} = r; const long long {_K} = k; "
    head += f"(void){_B}; (void){_R}; (void){_K};\n"
    body = head + "\n".join(lines) + f"\n        return (float)({v});"
    # which index is unit-stride decides how threads walk the tile (coalescing); a view tells
    contig = None
    if x.is_view and len(x.strides) >= 2:
        from ..loops import same
        kd, rd = (-1, -2) if which == "a" else (-2, -1)
        contig = "k" if same(x.strides[kd], 1) else ("r" if same(x.strides[rd], 1) else None)
    return G.Operand(None, x.dtype, load=body, contig=contig)


_TAKES = {"float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2"}


def _generic_matmul():
    """The lowering's generic matmul kernel (solforge.compiler.generic.matmul, which lower.py
    imports as `templates`), or None where it is this adapter (a test swapped them)."""
    from .. import generic

    fn = getattr(generic, "matmul", None)
    return None if fn is matmul else fn


def _dynamic_in(dims) -> bool:
    from ..dynamic import is_dynamic

    return any(is_dynamic(str(s)) for d in dims for s in getattr(d, "free_symbols", ()))


def _counted_on_device(a, b, batch_shape) -> bool:
    """A size only the device knows (a count read back: dyn<i>)? The template's M/N/K/batch are
    launch arguments evaluated on the host from the axes, where such a size has no value; only M may
    be one (_device_m): the template is launched for its upper bound and reads the count at entry.
    Any other such size goes to the generic kernel, which reads it from the workspace."""
    return _dynamic_in(list(a.shape) + list(b.shape) + list(batch_shape or []))


def _device_m(a, b, batch_shape) -> bool:
    """Only M is a count read on the device (the rows gathered for one expert of an MoE loop): the
    grid covers M's upper bound and the kernel takes the count from the workspace."""
    return (_dynamic_in([a.shape[-2]]) and not _dynamic_in(list(a.shape[:-2]) + [a.shape[-1]])
            and not _dynamic_in(list(b.shape) + list(batch_shape or [])))


def device_m_init(count: str) -> list[str]:
    """The template's entry lines for a device-counted M (launched for its upper bound): M becomes
    the count C expression `count` reads, and with no rows the block returns."""
    return [f"{{ const long long sfg_rows = {count}; if (sfg_rows < (long long)p.M) p.M = (int)sfg_rows; }}",
            "if (p.M <= 0) return;"]


class _GenericInstead(Exception):
    """The template cannot take this matmul after all (a counted size reaches its loaders)."""


def matmul(name: str, a, b, out_dtype: str, out, out_index=None, bias=None, batch_shape=None,
           params: Optional[dict] = None, fp32: str = "simt", epilogue=None):
    """Drop-in for the lowering's generic matmul template (same arguments, one LaunchSpec). Operands
    or outputs it does not take (float64, integers) go to the generic template. fp32: how a multiply
    of fp32 operands runs without params, "simt" (fp32 FMA, PyTorch's fp32 matmul) or "3xtf32"
    (tensor cores, each operand split into two TF32 parts: fp32-level error). epilogue: an
    elementwise expression of the rounded result stored instead of it (generic.mm_result)."""
    from ..rolling import GUARDED_BODY

    takes = ({a.dtype, b.dtype} <= _TAKES and out_dtype in _TAKES and out.dtype in _TAKES
             and (bias is None or bias.dtype in _TAKES)) and not GUARDED_BODY.get()
    device_m = takes and _device_m(a, b, batch_shape)
    if takes and (device_m or not _counted_on_device(a, b, batch_shape)):
        try:
            return _matmul(name, a, b, out_dtype, out, out_index, bias, batch_shape, params, fp32,
                           epilogue, device_m=device_m)
        except _GenericInstead:
            pass
    generic = _generic_matmul()
    if generic is None:
        raise ValueError(f"gemm template: dtypes {a.dtype} x {b.dtype} -> {out_dtype} not supported")
    return generic(name, a, b, out_dtype, out, out_index=out_index, bias=bias, batch_shape=batch_shape,
                   epilogue=epilogue)


def on_tensor_cores(params: dict) -> dict:
    """SIMT fp32 params (one config or tiers picked by M) as 3xTF32 ones of a like size: 64 x 64
    tiles where SIMT chose tiles of at most 64 rows (small M or N), 128 x 128 otherwise."""
    if "tiers" in params:
        return {"tiers": [on_tensor_cores(t) for t in params["tiers"]]}
    small = params.get("BM", 128) <= 64
    p = (dict(tier="tf32", BM=64, BN=64, BK=32, WM=2, WN=2, ST=2, PASSES=3) if small
         else dict(tier="tf32", BM=128, BN=128, BK=32, WM=4, WN=2, ST=2, PASSES=3))
    if "max_m" in params:
        p["max_m"] = params["max_m"]
    return p


def _merged(tiers: list) -> list:
    """Tiers picked by M at run time, a tier dropped where the next one is the same kernel (split-K
    was all that told them apart): each tier is a kernel body NVRTC compiles, and plans with several
    GEMMs ran past the compile time limit."""
    out = []
    for t in tiers:
        if out and {k: v for k, v in out[-1].items() if k != "max_m"} == \
                {k: v for k, v in t.items() if k != "max_m"}:
            out[-1] = t                 # the later one covers the larger M (or every M)
        else:
            out.append(t)
    return out


def _matmul(name, a, b, out_dtype, out, out_index, bias, batch_shape, params,
            fp32: str = "simt", epilogue=None, device_m: bool = False) -> GemmLaunchSpec:
    from .. import symexpr
    from ..generic import mm_result
    from ..loops import prod

    bshape = list(batch_shape if batch_shape is not None else a.shape[:-2])
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-1]
    NB = prod(bshape) if bshape else sympy.Integer(1)
    k = _kernel_class()(name)
    k.locals.update({_B, _R, _K, _ROW, _COL})
    bidx = _batch_index(bshape)
    m_count = None
    if device_m:
        # launched for M's upper bound; the kernel's first lines read the count (its head lines, made
        # here before the loaders': `const long long z_dynI = p_bJ[0];`) and take it as p.M
        from ..dynamic import _ACTIVE, upper

        m_count = k.c(M)
        M = upper(M, _ACTIVE.get())

    # the multiply's type: 16-bit tensor cores when both operands are 16-bit (or fp8), else fp32
    dts = {a.dtype, b.dtype}
    if dts <= {"float16"}:
        compute = "float16"
    elif dts <= {"bfloat16"} or dts <= {"bfloat16", "float8_e4m3fn", "float8_e5m2"}:
        compute = "bfloat16"
    elif dts <= {"float8_e4m3fn", "float8_e5m2"}:
        compute = "bfloat16"
    elif dts <= {"float16", "float8_e4m3fn", "float8_e5m2"}:
        compute = "float16"
    else:
        compute = "float32"

    opa = _strided_operand(k, a, bidx, 0, 1, compute) or _load_operand(k, a, bidx, "a")
    opb = _strided_operand(k, b, bidx, 1, 0, compute) or _load_operand(k, b, bidx, "b")

    om, on = symexpr.sym(_ROW), symexpr.sym(_COL)

    def store():
        val = "v"
        if bias is not None:
            bv = bias(k, bidx + [om, on])
            val = f"(v + (float)({bv}))"
        if out_index is None:
            flat = symexpr.sym(_B) * M * N + om * N + on
        else:
            flat = out_index(bidx, om, on)
        mm_result(k, val, out_dtype, out, flat, bidx, om, on, epilogue)
    lines, _ = _capture(k, store)
    epi = (f"const long long {_B} = b; const long long {_ROW} = row; const long long {_COL} = col; "
           f"(void){_B}; (void){_ROW}; (void){_COL};\n" + "\n".join(lines))

    # every parameter the loaders registered becomes a struct member; workspace buffers' pointers
    # (the Kernel's head lines `T* p_x = (T*)(ws + o_x);`) are members set at entry
    args, helpers, init = [], [], []
    for decl, launch in k.params:
        ctype, nm = G._split_decl(decl)
        args.append(G.KArg(ctype, nm, launch))
    counts = []
    for line in k.head:
        c = re.match(r"\s*const long long (z_\w+)\s*=\s*(p_\w+)\[0\];\s*$", line)
        if c and device_m:
            counts.append(f"const long long {c.group(1)} = p.{c.group(2)}[0];")
            continue
        m = re.match(r"\s*(.+?\*)\s*(p_\w+)\s*=\s*(.+);\s*$", line)
        if not m:
            raise ValueError(f"unexpected kernel head line {line!r}")
        helpers.append(f"    {m.group(1)} {m.group(2)};")
        init.append(f"p.{m.group(2)} = {m.group(3)};")
    if device_m:
        # after the members' own inits (p.M = M: the bound): no rows, nothing to do
        init += counts + device_m_init(m_count)

    spec = G.GemmSpec(name=name, a=opa, b=opb, m=symexpr.to_axis(M), n=symexpr.to_axis(N),
                      k=symexpr.to_axis(K), batch=symexpr.to_axis(NB), out=None, epilogue=epi,
                      args=tuple(args), compute=compute, helpers="\n".join(helpers), init=tuple(init))
    if params is None:
        def hint(e):
            return symexpr.as_int(e)
        params = G.default_params(spec, hint(M), hint(N), hint(K), hint(NB))
        if fp32 == "3xtf32" and compute == "float32":
            params = on_tensor_cores(params)
    # one launch: no split-K (its reduce kernel would be a second launch)
    params = ({"tiers": _merged([dict(t, SPLIT=1) for t in params["tiers"]])} if "tiers" in params
              else dict(params, SPLIT=1))
    text, launches, _, sig, _ = G.render(spec, params, inline_header=True)
    if device_m and re.search(r"\bz_dyn", text.split('extern "C"')[0]):
        raise _GenericInstead()  # the count reaches a loader or the store: no member of the struct
    k.text = text
    k.params = list(sig)   # the generated signature, in order: the plan's args() follow it
    la = launches[0]
    bounds = int(re.search(r"__launch_bounds__\((\d+)\)", text).group(1))
    return GemmLaunchSpec(kernel=k, grid=la["grid"], block=la["block"], smem=la["smem"],
                          launch_bounds=bounds, kind="matmul",
                          notes=f"gemm template {params}")


# ---------------------------------------------------------------------------------------------------
# depthwise / tiny-group convolutions: a direct kernel instead of a degenerate per-group GEMM
# ---------------------------------------------------------------------------------------------------
DIRECT_BELOW = 16   # a group GEMM with N (output channels per group) or K (c_in/g x kernel) below one MMA


def lower_convolution(L, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, **kw):
    """The lowering of aten.convolution with the same arguments as the compiler's own: a direct
    kernel (one thread per output element, fp32 accumulation over the group's channels and the
    window, loaders for x, w and bias as every kernel of the lowering reads them) when the
    per-group GEMM would be degenerate (depthwise: 1 output channel per group); otherwise the
    compiler's implicit-GEMM lowering (whose matmul is the GEMM template through `matmul`)."""
    from .. import lower as lw
    from .. import symexpr
    from ..kernel import Kernel, convert, round_to
    from ..loops import contiguous_strides, prod, view_of
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    def generic():
        return lw._convolution(L, node, x, w, bias, stride, padding, dilation, transposed, output_padding,
                               groups, **kw)

    G = int(groups)
    Cout, Cg, ks = w.shape[0], w.shape[1], list(w.shape[2:])
    ocg = symexpr.as_int(sympy.simplify(Cout / G))
    cg = symexpr.as_int(Cg)
    kvol = symexpr.as_int(prod(ks))
    out_dt = node["dtype"]
    if (transposed or ocg is None or cg is None or kvol is None or out_dt not in _TAKES
            or not (ocg < DIRECT_BELOW or cg * kvol < DIRECT_BELOW)):
        return generic()
    nsp = len(x.shape) - 2
    oshape = [symexpr.parse(sz) for sz in node["shape"]]
    stride = list(stride) * (nsp if len(stride) == 1 else 1)
    padding = list(padding) * (nsp if len(padding) == 1 else 1)
    dilation = list(dilation) * (nsp if len(dilation) == 1 else 1)
    x, w = L.operand(x), L.operand(w)
    isp = x.shape[2:]
    buf = L.new_buffer(out_dt, oshape)
    k = Kernel(L.kname("dwconv"))
    total = prod(oshape)
    e = symexpr.sym("e_")
    k.locals.add("e_")
    k.emit("const long long e_ = (long long)blockIdx.x * 256 + threadIdx.x;")
    k.emit(f"if (e_ >= {k.c(total)}) return;")
    st = contiguous_strides(oshape)
    idx = [FloorDiv(e, st[0])] + [ModularIndexing(e, a, b) for a, b in zip(st[1:], oshape[1:])]
    n, oc, pos = idx[0], idx[1], idx[2:]
    g = FloorDiv(oc, ocg) if ocg != 1 else oc
    k.emit("float acc_ = 0.0f;")
    c = symexpr.sym("c_")
    k.locals.add("c_")
    k.open(f"for (long long c_ = 0; c_ < {cg}; ++c_)")
    kq = []
    for d, kd in enumerate(ks):
        nm = f"q{d}_"
        k.locals.add(nm)
        k.open(f"for (long long {nm} = 0; {nm} < {k.c(kd)}; ++{nm})")
        kq.append(symexpr.sym(nm))
    ipos = [o * s_ - p_ + q * d_ for o, s_, p_, q, d_ in zip(pos, stride, padding, kq, dilation)]
    k.push_mask(" && ".join(f"({k.c(ip)} >= 0 && {k.c(ip)} < {k.c(sz)})" for ip, sz in zip(ipos, isp)))
    xv = x(k, [n, g * cg + c] + ipos)
    k.pop_mask()
    wv = w(k, [oc, c] + kq)
    k.emit(f"acc_ += (float)({xv}) * (float)({wv});")
    for _ in ks:
        k.close()
    k.close()
    val = "acc_"
    if bias is not None:
        val = f"(acc_ + (float)({bias(k, [oc])}))"
    k.store(buf, e, convert(round_to(val, out_dt) if out_dt != "float32" else val, out_dt, buf.dtype))
    L.kernels.append(GemmLaunchSpec(kernel=k, grid=[f"max(1, ceil_div({symexpr.to_axis(total)}, 256))"],
                                    block=["256"], launch_bounds=256, kind="conv",
                                    notes="direct convolution (depthwise / tiny groups)"))
    return view_of(buf)


__all__ = ["matmul", "lower_convolution", "GemmLaunchSpec", "DIRECT_BELOW"]
