"""The implicit GEMM both convolution lowerings share (lower._convolution and
lower_conv_transpose): rows = (n, output position), columns = output channels of a group, K = (input
channel of the group, kernel position), groups as the batch. The caller gives the A and B element
functions (how an output position and a kernel position pick the input and weight elements); this
builds the operands, the output's index map and the bias, and emits the one matmul."""

from __future__ import annotations

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from . import loops
from .loops import Loader, same, view_of


def unravel(e, strides, sizes) -> list:
    """A flat index as per-dim indices (size-1 dims are 0)."""
    return [sympy.Integer(0) if same(s, 1) else ModularIndexing(e, st, s) for st, s in zip(strides, sizes)]


def emit(L, kind: str, x, w, a_fn, b_fn, G: int, M, KK, Cog, P, osp, oshape, out_dt, bias):
    """The convolution's matmul (launch name `kind`) into a new buffer of `oshape`; its view."""
    ost = loops.contiguous_strides(list(osp))
    A = Loader([sympy.Integer(G), M, KK], x.dtype, a_fn)
    B = Loader([sympy.Integer(G), KK, Cog], w.dtype, b_fn)
    buf = L.new_buffer(out_dt, oshape)
    obst = loops.contiguous_strides(oshape)

    def out_index(bidx, om, on):
        g = bidx[0] if bidx else sympy.Integer(0)
        n = FloorDiv(om, P) if not same(P, 1) else om
        pos = unravel(om, ost, osp)
        return sum((i * s for i, s in zip([n, g * Cog + on] + pos, obst)), sympy.Integer(0))

    bias_l = None
    if bias is not None:
        bias_l = Loader([sympy.Integer(G), M, Cog], bias.dtype,
                        lambda k, idx: bias(k, [idx[0] * Cog + idx[2]]))
    L.kernels.append(L.matmul(L.kname(kind), A, B, out_dt, buf, out_index=out_index,
                              bias=bias_l, batch_shape=[sympy.Integer(G)]))
    return view_of(buf)
