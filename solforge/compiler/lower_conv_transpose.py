"""Transposed convolution (conv_transpose1d/2d/3d, any stride, padding, dilation, output padding,
groups) as an implicit GEMM through the same matmul call as the forward convolution.

out[n, g*Cog + co, o] = sum over (ci of group g, kernel position q) of
    x[n, g*Cg + ci, i] * w[g*Cg + ci, co, q]   where  o = i*stride - padding + q*dilation,
so for an output position the input position is i = (o + padding - q*dilation) / stride, a term
only where that division is exact and i is in range (a masked load, never an out-of-range read).
Rows = (n, output position), columns = output channels of a group, K = (input channel of the
group, kernel position); groups are the batch. With stride s, all but 1/s^d of the K terms are
masked zeros: correct for any shape; a sub-pixel split (one GEMM per output phase) is the faster
form a template can bring.
"""

from __future__ import annotations

import sympy
from torch.utils._sympy.functions import FloorDiv

from . import conv_gemm, loops, symexpr
from .loops import prod, same


def _per_dim(v, nsp: int) -> list:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * nsp if len(v) == 1 else v


def conv_transpose(L, node, x, w, bias, stride, padding, dilation, groups):
    out_dt = node["dtype"]
    oshape = [symexpr.parse(s) for s in node["shape"]]
    nsp = len(x.shape) - 2
    x = L.operand(x)
    w = L.operand(w)
    G = int(groups)
    Cin = x.shape[1]
    Cg = sympy.simplify(Cin / G) if G != 1 else Cin    # input channels per group
    Cog = w.shape[1]                                    # output channels per group
    ks = w.shape[2:]
    osp, isp = oshape[2:], x.shape[2:]
    stride, padding, dilation = (_per_dim(v, nsp) for v in (stride, padding, dilation))
    P = prod(osp)
    KK = Cg * prod(ks)
    M = x.shape[0] * P
    kst = loops.contiguous_strides([Cg] + list(ks))
    ost = loops.contiguous_strides(list(osp))

    unr = conv_gemm.unravel

    def a_fn(k, idx):
        g, m, kk = idx
        n = FloorDiv(m, P) if not same(P, 1) else m
        pos = unr(m, ost, osp)
        kpart = unr(kk, kst, [Cg] + list(ks))
        ci, kpos = kpart[0], kpart[1:]
        conds, ipos = [], []
        for o, s, p, q, d, sz in zip(pos, stride, padding, kpos, dilation, isp):
            num = k.local_sym("_tn")
            k.emit(f"const long long {num} = {k.c(o + p - q * d)};")
            if int(s) == 1:
                ipos.append(num)
                conds.append(f"({num} >= 0 && {num} < {k.c(sz)})")
            else:
                ipos.append(FloorDiv(num, int(s)))
                conds.append(f"({num} >= 0 && {num} % {int(s)} == 0 && {num} / {int(s)} < {k.c(sz)})")
        k.push_mask(" && ".join(conds))
        v = x(k, [n, g * Cg + ci] + ipos)
        k.pop_mask()
        return v

    def b_fn(k, idx):
        g, kk, co = idx
        kpart = unr(kk, kst, [Cg] + list(ks))
        return w(k, [g * Cg + kpart[0], co] + kpart[1:])

    return conv_gemm.emit(L, "convT", x, w, a_fn, b_fn, G, M, KK, Cog, P, osp, oshape, out_dt, bias)
