"""Shortcuts of HybridMode's hot path (trace.py) that give torch's own results, faster.

- `shape_meta`: meta results of matmuls (mm, bmm, addmm, baddbmm) and integer indexing without
  torch's Python meta kernels and decompositions.

- `index_meta`: the meta result of `aten.index.Tensor` with integer indices into a contiguous fake
  tensor (`hidden_states[token_ids]` once per expert of an MoE loop). torch's Python meta kernel
  (meta_index_Tensor: broadcasting through torch._refs, stride inference) cost ~3 ms a call.
- `ViewNonzero`: `nonzero` of a strided view of a big real index tensor, the MoE routing idiom
  `mask = one_hot(sel, E).permute(2, 1, 0); for e in range(E): torch.where(mask[e])`. Each mask[e]
  touches T*k elements 4 KB apart (page and cache misses: ~3-8 ms each, 512 experts: 2-4 s per
  trace; a permuted copy of the base costs 0.6 s). The base's nonzero positions are found once
  (keyed by the base's version counter: an in-place write into it starts afresh) and sorted in the
  view's dimension order; each mask[e] takes its block of them.
"""

from __future__ import annotations

import weakref

import torch

META = torch.device("meta")
_INT_INDEX = (torch.int64, torch.int32)


def index_meta(self: torch.Tensor, indices) -> torch.Tensor | None:
    """The meta result of self[indices] (aten.index.Tensor), or None when the case is not the simple
    one: self contiguous, integer index tensors (no masks) in adjacent positions."""
    if not self.is_contiguous() or not indices or len(indices) > self.dim():
        return None
    pos = []
    shapes = []
    for i, ix in enumerate(indices):
        if ix is None:
            continue
        if not isinstance(ix, torch.Tensor) or ix.dtype not in _INT_INDEX:
            return None
        pos.append(i)
        shapes.append(tuple(ix.shape))
    if not pos or pos[-1] - pos[0] + 1 != len(pos):
        return None  # no index, or indices apart (their dims go first): the meta kernel decides
    try:
        rep = broadcast_shapes(shapes)
    except RuntimeError:
        return None
    shape = tuple(self.shape[:pos[0]]) + rep + tuple(self.shape[pos[-1] + 1:])
    return torch.empty(shape, dtype=self.dtype, device=META)


_MM = torch.ops.aten.mm.default
_BMM = torch.ops.aten.bmm.default
_ADDMM = torch.ops.aten.addmm.default
_BADDBMM = torch.ops.aten.baddbmm.default
_INDEX = torch.ops.aten.index.Tensor


def shape_meta(func, args, kwargs) -> torch.Tensor | None:
    """The meta result (shape, dtype, contiguous strides, as torch's meta kernels give them) of the
    most frequent non-pointwise ops on well-formed operands -- matmuls (meta_mm's checks cost ~80 us,
    addmm's decomposition ~1 ms) and integer indexing -- or None (the meta kernel decides: anything
    unusual, including every malformed call, whose error the kernel raises)."""
    if kwargs:
        return None
    if func is _INDEX:
        return index_meta(args[0], args[1])
    if func is _MM or func is _BMM:
        if len(args) != 2:
            return None
        a, b = args
        out = _mm_shape(a, b, 2 if func is _MM else 3)
    elif func is _ADDMM or func is _BADDBMM:
        if len(args) != 3:  # beta/alpha given: rare, the kernel decides
            return None
        bias, a, b = args
        out = _mm_shape(a, b, 2 if func is _ADDMM else 3)
        if out is None or not isinstance(bias, torch.Tensor) or bias.dtype != a.dtype or \
                bias.dim() > len(out):
            return None
        try:
            if broadcast_shapes([tuple(bias.shape), out]) != out:
                return None
        except RuntimeError:
            return None
    else:
        return None
    if out is None:
        return None
    dtype = args[-2].dtype if func in (_ADDMM, _BADDBMM) else args[0].dtype
    return torch.empty(out, dtype=dtype, device=META)


def _mm_shape(a, b, dim: int) -> tuple | None:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != dim or \
            b.dim() != dim or a.dtype != b.dtype or a.shape[-1] != b.shape[-2]:
        return None
    if dim == 3:
        if a.shape[0] != b.shape[0]:
            return None
        return (a.shape[0], a.shape[1], b.shape[2])
    return (a.shape[0], b.shape[1])


def broadcast_shapes(shapes) -> tuple:
    """torch.broadcast_shapes without torch._refs (100 us a call there)."""
    n = max(len(sh) for sh in shapes)
    out = [1] * n
    for sh in shapes:
        off = n - len(sh)
        for i, d in enumerate(sh):
            o = out[off + i]
            if d != 1:
                if o != 1 and o != d:
                    raise RuntimeError(f"shapes {shapes} do not broadcast")
                out[off + i] = d
    return tuple(out)


def masked_fill(args, kwargs) -> torch.Tensor | None:
    """index_put_(x, [mask], c) -- `x[mask] = c` with a bool mask of x's shape and one value -- done
    as x.masked_fill_(mask, c): the same result without listing the mask's positions first
    (~10 ms a call on the 4 M-element masks of the NVFP4 encoders, 16 masks per quantisation).
    None when the call is anything else (accumulate, several indices, a values tensor)."""
    if kwargs or len(args) < 3 or (len(args) > 3 and args[3]):
        return None
    x, indices, values = args[0], args[1], args[2]
    if len(indices) != 1 or not isinstance(values, torch.Tensor) or values.dim() != 0 or \
            values.dtype != x.dtype:  # index_put_ refuses other dtypes; masked_fill_ would cast
        return None
    m = indices[0]
    if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.shape != x.shape:
        return None
    return x.masked_fill_(m, values)


# Views of bases smaller than this take torch's own nonzero (after .contiguous()).
MIN_PERMUTED_NUMEL = 1 << 20
MAX_KEPT = 4


class ViewNonzero:
    """nonzero(x) for x a view that selects whole dims of a big contiguous base (mask[e] of a
    permuted one_hot): the base's nonzero positions, computed once per base version, sorted in the
    view's dimension order; each call takes the block of positions whose other coordinates are x's.
    The same rows, in the same (row-major over x) order as torch.nonzero(x)."""

    def __init__(self):
        self._kept: dict[tuple, tuple] = {}  # (id(base), order) -> (weakref, version, lin, coords)

    def nonzero(self, x: torch.Tensor) -> torch.Tensor:
        m = self._mapping(x)
        if m is None:
            return torch.nonzero(x.contiguous())
        base, order, n_rest, start, span = m
        key = (id(base), order)
        e = self._kept.get(key)
        if e is None or e[0]() is not base or e[1] != base._version:
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            coords = torch.nonzero(base)[:, list(order)]  # base positions, columns in the view's order
            sizes = [base.shape[i] for i in order]
            strides = [1] * len(sizes)
            for j in range(len(sizes) - 2, -1, -1):
                strides[j] = strides[j + 1] * sizes[j + 1]
            lin = coords @ torch.tensor(strides, dtype=torch.int64)
            lin, perm = torch.sort(lin)
            e = (weakref.ref(base), base._version, lin, coords[perm])
            self._kept[key] = e
        lin, coords = e[2], e[3]
        bounds = torch.searchsorted(lin, torch.tensor([start, start + span], dtype=torch.int64))
        lo, hi = int(bounds[0]), int(bounds[1])
        cols = coords[lo:hi, n_rest:]
        if cols.shape[1] == x.dim():
            return cols.contiguous()
        out = torch.zeros((hi - lo, x.dim()), dtype=torch.int64)
        out[:, [j for j in range(x.dim()) if x.shape[j] != 1]] = cols
        return out

    @staticmethod
    def _mapping(x: torch.Tensor):
        """(base, dim order: base dims x fixes then x's dims, how many x fixes, linear start of x's
        block in the permuted base, block length), or None when x is not such a view."""
        base = x._base
        if base is None or base.numel() < MIN_PERMUTED_NUMEL or not base.is_contiguous() or \
                base.dtype != x.dtype or x.numel() == 0:
            return None
        bst, bsz = base.stride(), base.shape
        used: list[int] = []
        for size, st in zip(x.shape, x.stride()):
            if size == 1:
                continue
            cand = [i for i in range(base.dim()) if bsz[i] == size and bst[i] == st and i not in used]
            if len(cand) != 1:
                return None
            used.append(cand[0])
        # the offset names one position in each remaining dim (a contiguous base: strides decrease)
        off = x.storage_offset() - base.storage_offset()
        idx = {}
        for i in sorted(range(base.dim()), key=lambda i: -bst[i]):
            if bsz[i] == 1:
                idx[i] = 0
                continue
            idx[i], off = divmod(off, bst[i])
            if idx[i] >= bsz[i]:
                return None
        if off != 0 or any(idx[i] for i in used):
            return None
        rest = [i for i in range(base.dim()) if i not in used]
        span = 1
        for i in used:
            span *= bsz[i]
        start = 0
        for i in rest:
            start = start * bsz[i] + idx[i]
        return base, tuple(rest + used), len(rest), start * span, span
