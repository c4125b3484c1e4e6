"""Loaders: a tensor value as a function from an index to a C expression, and the view algebra.

A `Loader` has a shape (sympy sizes), a dtype and `fn(kernel, index) -> C value`. A view of a
materialised buffer keeps (buffer, strides, offset) so that permute/expand/slice/select/reshape
compose into one strided load, never a copy; a reshape that strides cannot express re-indexes
through the flat position (still no copy). Elementwise ops make new loaders whose fn inlines the
operands' fns, so a chain of them is one expression in whichever kernel reads it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Optional

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from .kernel import Buffer, Kernel


def prod(xs):
    out = sympy.Integer(1)
    for x in xs:
        out = out * x
    return out


def same(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def contiguous_strides(shape):
    st, acc = [], sympy.Integer(1)
    for s in reversed(shape):
        st.append(acc)
        acc = acc * s
    return list(reversed(st))


_UIDS = itertools.count()


def unravel(lin, shape) -> list:
    """Coordinates of flat position lin (< numel) in a contiguous shape. The outermost dim needs
    no modulo (lin < numel), which saves a 64-bit division by a run-time size per element."""
    st = contiguous_strides(shape)
    out = []
    first = True
    for stv, s in zip(st, shape):
        if same(s, 1):
            out.append(sympy.Integer(0))
        elif first:
            out.append(lin if same(stv, 1) else FloorDiv(lin, stv))
        else:
            out.append(ModularIndexing(lin, stv, s))
        if not same(s, 1):
            first = False
    return out


@dataclass
class Loader:
    shape: list
    dtype: str
    fn: Callable
    buf: Optional[Buffer] = None      # a strided view of buf when set
    strides: Optional[list] = None
    offset: sympy.Expr = sympy.Integer(0)
    cost: int = 0                     # elementwise ops inlined (a realisation heuristic)
    # a computed value's view (a slice, a reshape of a slice): the value whose contiguous flat is
    # this tensor's storage in torch, which as_strided's absolute strides and offset address
    storage: Optional["Loader"] = None
    # reshapes that did not fold into strides composed into this loader's index (each one a
    # division and a modulo per dim over the one before): lower._view stops a chain at one
    div_depth: int = 0

    def __post_init__(self):
        self.uid = next(_UIDS)

    def __call__(self, k: Kernel, idx: list) -> str:
        if self.buf is not None:
            return self.fn(k, list(idx))
        # a computed value read twice at the same index in one scope is computed once
        key = ("v", self.uid, tuple(idx))   # sympy hashes structurally (str of a deep index is slow)
        v = k.lookup(key)
        if v is None:
            v = self.fn(k, list(idx))
            k.remember(key, v)
        return v

    @property
    def is_view(self) -> bool:
        return self.buf is not None


def view_of(buf: Buffer, shape=None, strides=None, offset=sympy.Integer(0)) -> Loader:
    shape = list(buf.shape if shape is None else shape)
    strides = list(contiguous_strides(shape) if strides is None else strides)

    def fn(k, idx):
        flat = offset + sum((i * s for i, s in zip(idx, strides)), sympy.Integer(0))
        return k.load(buf, flat)
    return Loader(shape, buf.dtype, fn, buf, strides, offset)


def reindex(src: Loader, shape, f) -> Loader:
    """A loader over `shape` reading src at f(index)."""
    return Loader(list(shape), src.dtype, lambda k, idx: src(k, f(idx)), cost=src.cost,
                  div_depth=src.div_depth)


def permute(src: Loader, dims) -> Loader:
    n = len(src.shape)
    dims = [d % n for d in dims] if n else []
    shape = [src.shape[d] for d in dims]
    if src.is_view:
        return view_of(src.buf, shape, [src.strides[d] for d in dims], src.offset)
    inv = [0] * n
    for i, d in enumerate(dims):
        inv[d] = i
    return reindex(src, shape, lambda idx: [idx[inv[j]] for j in range(n)])


def expand(src: Loader, shape) -> Loader:
    shape = list(shape)
    lead = len(shape) - len(src.shape)
    out_shape = []
    for i, s in enumerate(shape):
        if isinstance(s, int) and s == -1 or (hasattr(s, "is_number") and s.is_number and s == -1):
            out_shape.append(src.shape[i - lead])
        else:
            out_shape.append(sympy.sympify(s))
    if src.is_view:
        st = [sympy.Integer(0)] * lead + [
            sympy.Integer(0) if (src.shape[i] == 1 and not same(out_shape[i + lead], 1)) else s
            for i, s in enumerate(src.strides)]
        return view_of(src.buf, out_shape, st, src.offset)
    src_shape = src.shape

    def f(idx):
        out = []
        for i, s in enumerate(src_shape):
            out.append(sympy.Integer(0) if (s == 1 and not same(out_shape[i + lead], 1)) else idx[i + lead])
        return out
    return reindex(src, out_shape, f)


def broadcast_to(src: Loader, shape) -> Loader:
    if len(src.shape) == len(shape) and all(same(a, b) for a, b in zip(src.shape, shape)):
        return src
    return expand(src, shape)


def slice_(src: Loader, dim: int, start, end, step) -> Loader:
    n = len(src.shape)
    dim %= n
    size = src.shape[dim]
    start = sympy.sympify(0 if start is None else start)
    end = sympy.sympify(size if end is None else end)
    # clamp as ATen does (negative from the end; past the end is the end)
    if start.is_number and start < 0:
        start = size + start
    if end.is_number and end < 0:
        end = size + end
    if end.is_number and size.is_number and end > size:
        end = size
    if end.is_number and int(end) >= 2**62:
        end = size
    step = int(step)
    new = FloorDiv(end - start + step - 1, step) if step != 1 else end - start
    new = sympy.simplify(new) if not isinstance(new, FloorDiv) else new
    shape = list(src.shape)
    shape[dim] = new
    if src.is_view:
        st = list(src.strides)
        off = src.offset + start * st[dim]
        st[dim] = st[dim] * step
        return view_of(src.buf, shape, st, off)
    return reindex(src, shape, lambda idx: idx[:dim] + [start + idx[dim] * step] + idx[dim + 1:])


def select(src: Loader, dim: int, index) -> Loader:
    n = len(src.shape)
    dim %= n
    index = sympy.sympify(index)
    if index.is_number and index < 0:
        index = src.shape[dim] + index
    shape = src.shape[:dim] + src.shape[dim + 1:]
    if src.is_view:
        st = src.strides[:dim] + src.strides[dim + 1:]
        return view_of(src.buf, shape, st, src.offset + index * src.strides[dim])
    return reindex(src, shape, lambda idx: idx[:dim] + [index] + idx[dim:])


def unsqueeze(src: Loader, dim: int) -> Loader:
    n = len(src.shape) + 1
    dim %= n
    shape = src.shape[:dim] + [sympy.Integer(1)] + src.shape[dim:]
    if src.is_view:
        return view_of(src.buf, shape, src.strides[:dim] + [sympy.Integer(0)] + src.strides[dim:],
                       src.offset)
    return reindex(src, shape, lambda idx: idx[:dim] + idx[dim + 1:])


def squeeze(src: Loader, dims=None) -> Loader:
    n = len(src.shape)
    if dims is None:
        dims = [i for i, s in enumerate(src.shape) if s == 1]
    dims = sorted({d % n for d in dims if n} )
    dims = [d for d in dims if src.shape[d] == 1]
    keep = [i for i in range(n) if i not in dims]
    shape = [src.shape[i] for i in keep]
    if src.is_view:
        return view_of(src.buf, shape, [src.strides[i] for i in keep], src.offset)

    def f(idx):
        out, j = [], 0
        for i in range(n):
            if i in dims:
                out.append(sympy.Integer(0))
            else:
                out.append(idx[j])
                j += 1
        return out
    return reindex(src, shape, f)


def _view_strides(old_shape, old_strides, new_shape):
    """torch's computeStride over sympy sizes: strides of the reshaped view, or None."""
    numel = prod(old_shape)
    if same(numel, 0):
        return None
    new_strides = [sympy.Integer(0)] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_strides[-1] if old_strides else sympy.Integer(1)
    tensor_numel = sympy.Integer(1)
    view_numel = sympy.Integer(1)
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel = tensor_numel * old_shape[tensor_d]
        if tensor_d == 0 or (not same(old_shape[tensor_d - 1], 1) and not same(
                old_strides[tensor_d - 1], tensor_numel * chunk_base)):
            while view_d >= 0 and (not same(view_numel, tensor_numel) or same(new_shape[view_d], 1)):
                new_strides[view_d] = view_numel * chunk_base
                view_numel = view_numel * new_shape[view_d]
                view_d -= 1
                if len(sympy.sympify(view_numel).free_symbols) > 0 and not same(view_numel, tensor_numel) \
                        and view_d >= 0 and _gt(view_numel, tensor_numel):
                    return None
            if not same(view_numel, tensor_numel):
                return None
            if tensor_d > 0:
                chunk_base = old_strides[tensor_d - 1]
                tensor_numel = sympy.Integer(1)
                view_numel = sympy.Integer(1)
    if view_d != -1:
        return None
    return new_strides


def _gt(a, b) -> bool:
    d = sympy.expand(a - b)
    return bool(d.is_number and d > 0)


RESHAPE_INDEX_COST = 3


def reshape(src: Loader, shape) -> Loader:
    shape = [sympy.sympify(s) for s in shape]
    total = prod(src.shape)
    if any(s == -1 for s in shape):
        known = prod([s for s in shape if s != -1])
        shape = [FloorDiv(total, known) if s == -1 else s for s in shape]
        shape = [sympy.simplify(s) if isinstance(s, FloorDiv) and (total / known).is_polynomial() else s
                 for s in shape]
        shape = [sympy.cancel(total / known) if isinstance(s, FloorDiv) and
                 sympy.cancel(total / known).is_polynomial() else s for s in shape]
    if len(shape) == len(src.shape) and all(same(a, b) for a, b in zip(shape, src.shape)):
        return Loader(shape, src.dtype, src.fn, src.buf, src.strides, src.offset, src.cost,
                      div_depth=src.div_depth)
    if src.is_view:
        try:
            st = _view_strides(src.shape, src.strides, shape)
        except (TypeError, ValueError):
            st = None
        if st is not None:
            return view_of(src.buf, shape, st, src.offset)
    new_st = contiguous_strides(shape)
    old_st = contiguous_strides(src.shape)
    old_shape = list(src.shape)

    def f(idx):
        flat = sum((i * s for i, s in zip(idx, new_st)), sympy.Integer(0))
        return [ModularIndexing(flat, st, sz) if not same(sz, 1) else sympy.Integer(0)
                for st, sz in zip(old_st, old_shape)]
    out = reindex(src, shape, f)
    # a division and a modulo per element and dim (by runtime sizes, often): cheap once, not when an
    # anchor re-reads every element per tile (a GEMM reads A N/BN times), so anchors realise it
    # (Lowering.operand: a contiguous copy the template then reads with plain strides)
    out.cost = src.cost + RESHAPE_INDEX_COST
    out.div_depth = src.div_depth + 1
    return out


def as_strided(src: Loader, size, stride, offset=0) -> Loader:
    """torch's as_strided: strides and the storage offset are absolute, over the storage of src's
    base (a chunk of x[2:] starts at offset 8, not 8 past the slice; a chunk of a transposed matmul
    output steps through the matmul's own row-major storage). A view of a buffer reads that buffer
    with them: the buffer is the base's storage (a graph input, or an op's output in the layout torch
    allocates, contiguous). A computed value is read as its contiguous flat (a fresh tensor's storage);
    a view of a computed value (a split of a reshaped slice) as the flat of the value it views."""
    off = sympy.sympify(offset or 0)
    if src.is_view:
        return view_of(src.buf, size, stride, off)
    root = src.storage or src
    flat = reshape(root, [prod(root.shape)])
    return reindex(flat, size, lambda idx: [off + sum((i * s for i, s in zip(idx, stride)),
                                                     sympy.Integer(0))])
