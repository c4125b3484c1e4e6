"""Convolution segment template: aten.convolution (1-D, 2-D, 3-D; NCL / NCHW / NCDHW, stride,
padding — asymmetric too, so causal padding is just (k-1, 0) — dilation, groups) as an implicit GEMM
on the GEMM template's mainloops, or as a direct kernel where the GEMM would be degenerate
(depthwise and other tiny-K or tiny-N group GEMMs).

Implicit GEMM, one GEMM per group g (the GEMM's batch index b):
    M = batch * prod(out spatial)   row m = (n, o):  n = m / S_out, o = m % S_out
    N = C_out / groups              col  = output channel within the group
    K = (C_in / groups) * prod(kernel)   k = (c, kd, kh, kw)
    A(g, m, k) = x[n, g*Cg + c, o_d*s_d - pad_d + kd*dil_d, ...] (0 outside the input: `pred`)
    B(g, oc, k) = w[g*OCg + oc, c, kd, kh, kw]   (w is K-major: row oc, K contiguous)
    out[n, g*OCg + oc, o] = epilogue(acc)
Nothing is unfolded in memory: the im2col gather is the A operand's offset expression.

Spatial input sizes and the batch are launch expressions (axes); kernel size, stride, padding,
dilation and groups are constants of the traced graph, baked into the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .gemm import (CTYPES, HEADER_NAME, Bias, Generated, GemmSpec, KArg, Operand, Output,
                   default_params as gemm_default_params, generate as gemm_generate,
                   header_text, param_space as gemm_param_space)


@dataclass(frozen=True)
class ConvSpec:
    """x: [batch, c_in, *in_size]; w: [c_out, c_in / groups, *kernel]; out: [batch, c_out, *out].
    padding: one (lo, hi) pair per spatial dim. epilogue: C++ statements over `float v`, `i64 n`,
    `int oc` (absolute output channel), `i64 o` (linear output spatial index), run after bias and
    before the store (out=None: the hook stores). tensors are launch args (tensor names or
    "workspace" with a byte offset)."""
    name: str
    x: str
    w: str
    out: Optional[str]
    dtype: str                       # x and w element type
    batch: str                       # launch expression
    c_in: int
    c_out: int
    in_size: tuple                   # launch expressions, one per spatial dim
    kernel: tuple                    # ints
    stride: tuple = ()
    padding: tuple = ()              # ((lo, hi), ...)
    dilation: tuple = ()
    groups: int = 1
    out_dtype: Optional[str] = None
    bias: Optional[str] = None       # tensor of c_out elements
    bias_dtype: Optional[str] = None
    alpha: Optional[str] = None
    epilogue: Optional[str] = None
    args: tuple = ()                 # extra KArgs
    x_byte_offset: str = "0"
    w_byte_offset: str = "0"
    out_byte_offset: str = "0"
    ws_offset: str = "0"

    @property
    def nd(self) -> int:
        return len(self.kernel)

    def norm(self) -> "ConvSpec":
        nd = self.nd
        st = tuple(self.stride) or (1,) * nd
        dl = tuple(self.dilation) or (1,) * nd
        pd = tuple(self.padding) or ((0, 0),) * nd
        pd = tuple((p, p) if isinstance(p, int) else tuple(p) for p in pd)
        if not (len(st) == len(dl) == len(pd) == len(self.in_size) == nd) or nd not in (1, 2, 3):
            raise ValueError(f"{self.name}: 1-3 spatial dims, one stride/padding/dilation each")
        if self.c_in % self.groups or self.c_out % self.groups:
            raise ValueError(f"{self.name}: channels must divide by groups")
        from dataclasses import replace
        return replace(self, stride=st, dilation=dl, padding=pd)

    def out_size(self) -> tuple:
        """Launch expressions of the output spatial sizes (floor division as aten.convolution)."""
        s = self.norm()
        return tuple(f"(({i}) + {lo + hi} - {d * (k - 1) + 1}) // {st} + 1"
                     for i, k, st, (lo, hi), d in zip(s.in_size, s.kernel, s.stride, s.padding, s.dilation))

    def direct(self) -> bool:
        """Depthwise and tiny group GEMMs: a direct kernel beats a GEMM with N or K below one MMA."""
        cg, ocg = self.c_in // self.groups, self.c_out // self.groups
        ks = 1
        for k in self.kernel:
            ks *= k
        return ocg < 16 or cg * ks < 16


_DIMS = ("d", "h", "w")


def _names(nd: int) -> tuple:
    return _DIMS[3 - nd:]


def _size_args(s: ConvSpec) -> tuple:
    """int scalar args in{dim}, out{dim} and the batch, as KArgs."""
    args = []
    for nm, i, o in zip(_names(s.nd), s.in_size, s.out_size()):
        args.append(KArg("int", f"in_{nm}", f"int32:{i}"))
        args.append(KArg("int", f"out_{nm}", f"int32:{o}"))
    args.append(KArg("int", "nb", f"int32:{s.batch}"))
    return tuple(args)


def _helpers(s: ConvSpec) -> str:
    """Struct members: the im2col gather (offset of x for group g, row m, k; valid flag)."""
    nd, names = s.nd, _names(s.nd)
    cg = s.c_in // s.groups
    ks = 1
    for k in s.kernel:
        ks *= k
    sp_out = " * ".join(f"(i64)out_{n}" for n in names)
    sp_in = " * ".join(f"(i64)in_{n}" for n in names)
    lines = [f"    __device__ __forceinline__ bool x_at(i64 g, int m, int k, i64& off) const {{",
             f"        const i64 S_out = {sp_out};",
             "        const i64 n = m / S_out;",
             "        i64 o = m - n * S_out;",
             f"        const int c = k / {ks};",
             f"        int kk = k - c * {ks};"]
    # spatial coordinates, innermost dim last: peel from the right
    for i in reversed(range(nd)):
        nm = names[i]
        kdim = s.kernel[i]
        lines.append(f"        const int o_{nm} = (int)(o % out_{nm}); o /= out_{nm};")
        lines.append(f"        const int k_{nm} = kk % {kdim}; kk /= {kdim};")
        lines.append(f"        const int i_{nm} = o_{nm} * {s.stride[i]} - {s.padding[i][0]} + k_{nm} * {s.dilation[i]};")
    ok = " && ".join(f"(unsigned)i_{nm} < (unsigned)in_{nm}" for nm in names)
    lin = "i_" + names[0]
    for nm in names[1:]:
        lin = f"({lin}) * (i64)in_{nm} + i_{nm}"
    lines += [f"        off = ((n * {s.c_in} + g * {cg} + c) * ({sp_in})) + {lin};",
              f"        return {ok};",
              "    }",
              "    __device__ __forceinline__ i64 x_off(i64 g, int m, int k) const { i64 o; x_at(g, m, k, o); return o; }",
              "    __device__ __forceinline__ bool x_ok(i64 g, int m, int k) const { i64 o; return x_at(g, m, k, o); }",
              f"    __device__ __forceinline__ i64 s_out() const {{ return {sp_out}; }}"]
    return "\n".join(lines)


def gemm_spec(s: ConvSpec) -> GemmSpec:
    """The implicit GEMM of a convolution (one GEMM per group)."""
    s = s.norm()
    cg, ocg = s.c_in // s.groups, s.c_out // s.groups
    ks = 1
    for k in s.kernel:
        ks *= k
    sp_out = " * ".join(f"({o})" for o in s.out_size())
    m = f"({s.batch}) * {sp_out}"
    a = Operand(s.x, s.dtype, offset="x_off(b, r, k)", pred="x_ok(b, r, k)",
                contig="r" if s.stride[-1] == 1 else "k", byte_offset=s.x_byte_offset)
    b = Operand.k_major(s.w, s.dtype, str(cg * ks), b_offset=f"b * {ocg * cg * ks}",
                        byte_offset=s.w_byte_offset)
    out = None
    # epilogue variables the conv hook expects: n, oc, o (linear output spatial index)
    pre = ("const i64 S_o = s_out(); const i64 n = row / S_o; const i64 o = row - n * S_o; "
           f"const int oc = (int)b * {ocg} + col; (void)n; (void)o; (void)oc;")
    epi = pre + ("\n" + s.epilogue if s.epilogue else "")
    if s.out is not None:
        out = Output(s.out, s.out_dtype or s.dtype,
                     offset=f"((row / s_out()) * {s.c_out} + (i64)b * {ocg} + col) * s_out() + row % s_out()",
                     byte_offset=s.out_byte_offset)
    bias = None
    if s.bias is not None:
        bias = Bias(s.bias, s.bias_dtype or s.dtype, kind="full", offset=f"b * {ocg} + col")
    return GemmSpec(name=s.name, a=a, b=b, m=m, n=str(ocg), k=str(cg * ks), batch=str(s.groups), out=out,
                    alpha=s.alpha, bias=bias, epilogue=epi, args=_size_args(s) + tuple(s.args),
                    helpers=_helpers(s), ws_offset=s.ws_offset)


# ---------------------------------------------------------------------------------------------------
# direct kernel (depthwise, tiny groups)
# ---------------------------------------------------------------------------------------------------
_DIRECT = r"""
// direct convolution {name}: one thread per output element (n, oc, o), fp32 accumulation over the
// group's input channels and the kernel window; consecutive threads take consecutive output
// positions, so the input reads along the innermost dim coalesce
extern "C" __global__ void __launch_bounds__({threads}) {name}({params}) {{
    const i64 S_out = {sp_out};
    const i64 e = (i64)blockIdx.x * {threads} + threadIdx.x;
    if (e >= (i64)nb * {c_out} * S_out) return;
    const i64 o = e % S_out;
    const i64 nc = e / S_out;
    const int oc = (int)(nc % {c_out});
    const i64 n = nc / {c_out};
    const int g = oc / {ocg};
{coords}
    const {xt}* xg = X + (n * {c_in} + (i64)g * {cg}) * ({sp_in});
    const {wt}* wo = W + (i64)oc * {cg} * {ks};
    float acc = 0.f;
#pragma unroll 1
    for (int c = 0; c < {cg}; ++c) {{
        const {xt}* xc = xg + (i64)c * ({sp_in});
        const {wt}* wc = wo + c * {ks};
{loops}
    }}
    float v = acc;
{alpha}{bias}{epilogue}{store}
}}
"""


def _direct_source(s: ConvSpec) -> tuple[str, list]:
    s = s.norm()
    names = _names(s.nd)
    cg, ocg = s.c_in // s.groups, s.c_out // s.groups
    ks = 1
    for k in s.kernel:
        ks *= k
    xt, ot = CTYPES[s.dtype], CTYPES[s.out_dtype or s.dtype]
    params, largs = [f"const {xt}* __restrict__ X", f"const {xt}* __restrict__ W"], [s.x, s.w]
    # byte offsets folded in below
    if s.out is not None:
        params.append(f"{ot}* __restrict__ Y")
        largs.append(s.out)
    if s.bias is not None:
        params.append(f"const {CTYPES[s.bias_dtype or s.dtype]}* __restrict__ bias")
        largs.append(s.bias)
    for a in _size_args(s) + tuple(s.args):
        params.append(f"{a.ctype} {a.name}")
        largs.append(a.launch)
    offs = []
    for nm, bo in (("X", s.x_byte_offset), ("W", s.w_byte_offset), ("Y", s.out_byte_offset)):
        if bo.strip() != "0":
            params.append(f"long long {nm}_boff")
            largs.append(f"int64:{bo}")
            offs.append(nm)
    sp_out = " * ".join(f"(i64)out_{n}" for n in names)
    sp_in = " * ".join(f"(i64)in_{n}" for n in names)
    coords = ["    i64 rest = o;"]
    for i in reversed(range(s.nd)):
        nm = names[i]
        coords.append(f"    const int o_{nm} = (int)(rest % out_{nm}); rest /= out_{nm};")
    coords.append("    (void)rest;")
    # kernel window loops, outermost dim first; inner body reads one input element
    loops, ind = [], "        "
    widx = []
    for i, nm in enumerate(names):
        k = s.kernel[i]
        loops.append(f"{ind}#pragma unroll\n{ind}for (int k_{nm} = 0; k_{nm} < {k}; ++k_{nm}) {{")
        ind += "    "
        loops.append(f"{ind}const int i_{nm} = o_{nm} * {s.stride[i]} - {s.padding[i][0]} + k_{nm} * {s.dilation[i]};")
        loops.append(f"{ind}if ((unsigned)i_{nm} >= (unsigned)in_{nm}) continue;")
        widx.append(f"k_{nm}")
    lin = "i_" + names[0]
    wl = widx[0]
    for i, nm in enumerate(names[1:], start=1):
        lin = f"({lin}) * (i64)in_{nm} + i_{nm}"
        wl = f"({wl}) * {s.kernel[i]} + {widx[i]}"
    loops.append(f"{ind}acc = fmaf(sfg::to_f(xc[{lin}]), sfg::to_f(wc[{wl}]), acc);")
    for _ in names:
        ind = ind[:-4]
        loops.append(f"{ind}}}")
    alpha = f"    v *= (float)({s.alpha});\n" if s.alpha else ""
    bias = "    v += sfg::to_f(bias[oc]);\n" if s.bias is not None else ""
    epilogue = ("    {\n" + s.epilogue + "\n    }\n") if s.epilogue else ""
    store = (f"    Y[(n * {s.c_out} + oc) * S_out + o] = sfg::from_f<{ot}>(v);" if s.out is not None else "")
    threads = 256
    body = _DIRECT.format(name=s.name, threads=threads, params=", ".join(params), sp_out=sp_out, sp_in=sp_in,
                          c_out=s.c_out, c_in=s.c_in, ocg=ocg, cg=cg, ks=ks, xt=xt, wt=xt,
                          coords="\n".join(coords), loops="\n".join(loops), alpha=alpha, bias=bias,
                          epilogue=epilogue, store=store)
    for nm in offs:  # byte offsets: shadow the pointer parameter at entry
        body = body.replace(f"    const i64 S_out = {sp_out};",
                            f"    {nm} = reinterpret_cast<decltype({nm})>(reinterpret_cast<const char*>({nm}) + {nm}_boff);\n"
                            f"    const i64 S_out = {sp_out};", 1)
    total = f"({s.batch}) * {s.c_out} * " + " * ".join(f"({o})" for o in s.out_size())
    launch = dict(kernel=s.name, grid=[f"ceil_div({total}, {threads})"], block=[str(threads)], smem="0", args=largs)
    return body, [launch]


def default_params(s: ConvSpec, batch: Optional[int] = None, in_size: Optional[tuple] = None) -> dict:
    if s.direct():
        return dict(tier="direct")
    g = gemm_spec(s)
    m = None
    if batch is not None and in_size is not None:
        m = batch
        sn = s.norm()
        for i, k, st, (lo, hi), d in zip(in_size, sn.kernel, sn.stride, sn.padding, sn.dilation):
            m *= (i + lo + hi - d * (k - 1) - 1) // st + 1
    return gemm_default_params(g, m=m, n=s.c_out // s.groups, k=g and int(g.k), batch=s.groups)


def param_space(s: ConvSpec) -> list[dict]:
    # the direct kernel and the implicit GEMM are both valid for every convolution
    return [dict(tier="direct")] + gemm_param_space(gemm_spec(s))


def generate(s: ConvSpec, params: Optional[dict] = None) -> Generated:
    p = dict(params) if params else default_params(s)
    if p.get("tier") == "direct":
        body, launches = _direct_source(s)
        src = "\n".join([f"// convolution segment {s.name}: generated by solforge/compiler/templates/conv.py",
                         "#include <cuda_fp16.h>", "#include <cuda_bf16.h>", "#include <cuda_fp8.h>",
                         f'#include "{HEADER_NAME}"', "using sfg::i64;", body])
        return Generated({f"{s.name}.cu": src, HEADER_NAME: header_text()}, [s.name], launches, "0")
    return gemm_generate(gemm_spec(s), p)


__all__ = ["ConvSpec", "gemm_spec", "generate", "default_params", "param_space"]
