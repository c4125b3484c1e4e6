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
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from . import loops, symexpr
from .loops import Loader, prod, same, view_of


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

    def unr(e, strides, sizes):
        return [sympy.Integer(0) if same(s, 1) else ModularIndexing(e, st, s)
                for st, s in zip(strides, sizes)]

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

    A = Loader([sympy.Integer(G), M, KK], x.dtype, a_fn)
    B = Loader([sympy.Integer(G), KK, Cog], w.dtype, b_fn)
    buf = L.new_buffer(out_dt, oshape)
    obst = loops.contiguous_strides(oshape)

    def out_index(bidx, om, on):
        g = bidx[0] if bidx else sympy.Integer(0)
        n = FloorDiv(om, P) if not same(P, 1) else om
        pos = unr(om, ost, osp)
        return sum((i * s for i, s in zip([n, g * Cog + on] + pos, obst)), sympy.Integer(0))

    bias_l = None
    if bias is not None:
        bias_l = Loader([sympy.Integer(G), M, Cog], bias.dtype,
                        lambda k, idx: bias(k, [idx[0] * Cog + idx[2]]))
    L.kernels.append(L.matmul(L.kname("convT"), A, B, out_dt, buf, out_index=out_index,
                              bias=bias_l, batch_shape=[sympy.Integer(G)]))
    return view_of(buf)
