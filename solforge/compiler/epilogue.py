"""Fuse an elementwise consumer of a GEMM's result into the GEMM's store.

The lowering writes each mm/bmm/addmm into a workspace buffer of its own, and an elementwise chain
over that result (relu(linear(x)), gelu(x @ w + b), silu(gate) * up, a residual add) stays a lazy
loader until some kernel materialises it: a graph output's kernel or a copy that realises an
operand. That kernel reads the GEMM's result back from global memory. `fuse` runs once every kernel
is written and, where the pattern holds exactly, writes the GEMM again with that loader as its
epilogue, storing straight into the materialised buffer; the intermediate buffer and the pointwise
kernel (or its item, in a kernel writing several outputs) disappear.

The pattern, matched on the kernels and loaders (never on names):
- the GEMM (mm, bmm, addmm: contiguous (*batch, M, N) output, float dtype) has exactly one other
  kernel touching its buffer, a pointwise kernel the lowering recorded, and exactly one of that
  kernel's items reads the buffer;
- that item reads the buffer only at the element it writes: for every index of the destination,
  each load of the GEMM's buffer is at the destination's own contiguous flat position (identity
  indexing, possibly through views that keep it: a reshape of the rows), under no mask, and the
  destination has the GEMM's element count. Other operands (a bias row, a residual of the same
  shape, another GEMM's result) are read as the pointwise kernel read them;
- nothing launched between the GEMM and the pointwise kernel writes a buffer the GEMM reads (the
  GEMM moves to the pointwise kernel's place, where every epilogue operand is already written).
The epilogue reads the GEMM's result rounded to its dtype, as the unfused plan stored it and read it
back (generic.mm_result), so both plans compute the same values.
"""

from __future__ import annotations

import inspect

import sympy

from . import symexpr
from .kernel import Kernel
from .loops import contiguous_strides, same, unravel

# the GEMM output dtypes whose result the epilogue takes as a float (what a store then a load gives)
FUSED_DTYPES = ("float32", "bfloat16", "float16")
# kernels whose `written` lists every buffer they store to (k.store); any other kind counts every
# buffer it touches as written
_WRITES_KNOWN = ("pointwise", "reduction", "matmul", "scan")


def _buffers(spec) -> set:
    """Names of the buffers a kernel touches (its parameters: graph tensors and workspace offsets)."""
    return {key[1] for key in spec.kernel._keys if isinstance(key, tuple) and key[0] in ("o", "t")}


def _writes(spec) -> set:
    written = getattr(spec.kernel, "written", None)
    if spec.kind in _WRITES_KNOWN and written is not None:
        return set(written)
    return _buffers(spec)


class _Probe(Kernel):
    """A scratch kernel that records the loads of one buffer (index, mask) instead of emitting them."""

    def load(self, buf, index) -> str:
        if buf.name == self.target:
            self.reads.append((index, self.mask()))
            return "sfe_v"
        return super().load(buf, index)


def _reads(x, dst, src) -> "bool | None":
    """True: loader x, written into dst, reads src only at dst's own contiguous flat position, under
    no mask; None: it does not read src; False: it reads src otherwise (or could not be probed)."""
    idx = [sympy.Integer(0) if same(s, 1) else symexpr.sym(f"sfe_i{j}") for j, s in enumerate(dst.shape)]
    k = _Probe("sfe_probe")
    k.target, k.reads = src.name, []
    k.locals.update(str(i) for i in idx if isinstance(i, sympy.Symbol))
    try:
        x(k, idx)
        if not k.reads:
            return None
        want = sum((i * s for i, s in zip(idx, contiguous_strides(dst.shape))), sympy.Integer(0))
        return all(m is None and same(i, want) for i, m in k.reads)
    except Exception:  # noqa: BLE001 - a loader this probe cannot emit: no fusion, the plan as it was
        return False


class Epilogue:
    """The loader of a pointwise item as a matmul epilogue: evaluated at the destination index of
    GEMM element (batch, m, n), with its loads of the GEMM's buffer taking the result v."""

    def __init__(self, loader, dst, src, bshape, M, N):
        self.loader, self.dst, self.src = loader, dst, src
        self.bshape, self.M, self.N = list(bshape), M, N
        self.dtype = loader.dtype

    def index(self, bidx, om, on) -> list:
        full = self.bshape + [self.M, self.N]
        shape = self.dst.shape
        if len(shape) == len(full) and all(same(a, b) for a, b in zip(shape, full)):
            return list(bidx) + [om, on]
        bz = sum((i * s for i, s in zip(bidx, contiguous_strides(self.bshape))), sympy.Integer(0))
        if same(shape[-1], self.N):     # rows regrouped (a 3-D linear's (B, S) rows): n stays
            return unravel(bz * self.M + om, shape[:-1]) + [on]
        return unravel((bz * self.M + om) * self.N + on, shape)

    def __call__(self, k, v, bidx, om, on) -> str:
        k.replace[self.src.name] = v
        try:
            return self.loader(k, self.index(bidx, om, on))
        finally:
            del k.replace[self.src.name]


def _takes_epilogue(matmul) -> bool:
    try:
        return "epilogue" in inspect.signature(matmul).parameters
    except (TypeError, ValueError):
        return False


def fuse(L) -> None:
    """Every recorded GEMM whose one consumer is a recorded pointwise item that reads it elementwise
    at identity: the GEMM written again with that item as its epilogue, in the pointwise kernel's
    place."""
    if L.dyn or not L.gemm_calls or not _takes_epilogue(L.matmul):
        # sizes counted on the device: their bounds are guessed from the kernels as written
        return
    for call in list(L.gemm_calls.values()):
        _fuse_one(L, call)


def _fuse_one(L, call) -> bool:
    out, sg, kw = call["out"], call["spec"], call["kw"]
    if call["out_dtype"] not in FUSED_DTYPES or out.kind != "ws" or kw.get("out_index") is not None:
        return False
    at = [i for i, s in enumerate(L.kernels) if s is sg]
    if len(at) != 1:        # a rolled loop's body is launched as copies: left as it is
        return False
    g = at[0]
    readers = [i for i, s in enumerate(L.kernels) if i != g and out.name in _buffers(s)]
    if len(readers) != 1 or readers[0] < g:
        return False
    p = readers[0]
    sp = L.kernels[p]
    rec = L.pointwise_items.get(id(sp))
    if rec is None or rec[0] is not sp:
        return False
    items = rec[1]
    hits = []
    for j, (x, dst) in enumerate(items):
        r = _reads(x, dst, out)
        if r is False:
            return False
        if r:
            hits.append(j)
    if len(hits) != 1:      # the result itself is also an output, or two items read it
        return False
    x, dst = items[hits[0]]
    if dst is out or not same(dst.numel(), out.numel()):
        return False
    # the GEMM moves from g to p: nothing launched in between may write what it reads
    reads = _buffers(sg) - {out.name}
    if any(_writes(s) & reads for s in L.kernels[g + 1:p]):
        return False
    a, b = call["a"], call["b"]
    bshape = kw.get("batch_shape")
    bshape = list(a.shape[:-2] if bshape is None else bshape)
    epi = Epilogue(x, dst, out, bshape, a.shape[-2], b.shape[-1])
    fused = L.matmul(call["name"], a, b, call["out_dtype"], dst, epilogue=epi, **kw)
    fused.notes = (fused.notes + "; " if fused.notes else "") + f"epilogue fused ({sp.kernel.name})"
    rest = [it for j, it in enumerate(items) if j != hits[0]]
    new = [fused]
    del L.pointwise_items[id(sp)]
    if rest:
        from .generic import pointwise

        spec = pointwise(sp.kernel.name, rest)
        L.pointwise_items[id(spec)] = (spec, rest)
        new.append(spec)
    L.kernels[p:p + 1] = new
    del L.kernels[g]
    L.ws[:] = [w for w in L.ws if w is not out]
    return True
