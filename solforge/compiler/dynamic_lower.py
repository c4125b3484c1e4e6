"""Kernels and lowerings for data-dependent sizes (dynamic.py says how they are traced and read).

- `nonzero`: the coordinates of a tensor's nonzero elements in row-major order, and their count in
  an int64 workspace slot. One block walks the elements in chunks of BLOCK: a flag per thread, a
  prefix sum (in each warp by xor shuffles, across warps through shared memory) gives each nonzero
  element its output row, the running total carries to the next chunk. Ordered as torch's nonzero; the buffer is sized at the upper
  bound (every element nonzero).
- boolean-mask indexing (`x[mask]`, `x[mask] = v`, `masked_select`): the mask's nonzero
  coordinates become ordinary index tensors, so the existing index / index_put lowerings serve.
- `finalize`: once every kernel is written, workspace buffers and grids at the upper bounds.
"""

from __future__ import annotations

import ast

import sympy

from . import dynamic, loops, symexpr
from .generic import LaunchSpec
from .kernel import Kernel, convert
from .loops import Loader, prod, unravel, view_of

BLOCK = 1024  # one block: 32 warps


def _dyn_name(node_shape, L) -> str:
    names = [str(s) for d in node_shape for s in symexpr.parse(str(d)).free_symbols
             if dynamic.is_dynamic(str(s))]
    names = sorted(set(names))
    if len(names) != 1 or L.dyn.bounds.get(names[0]) is None:
        raise ValueError(f"no single data-dependent size in the output shape {node_shape}")
    return names[0]


def _coords(L, x: Loader, name: str):
    """The (name, ndim) int64 coordinates of x's nonzero elements (a view), computed once per
    size: the trace gives one symbol per counted mask."""
    cached = L.dyn.coords.get(name)
    if cached is not None:
        return cached
    shape = list(x.shape)
    nd = max(len(shape), 1)
    idx_shape = shape if shape else [sympy.Integer(1)]
    out = L.new_buffer("int64", [symexpr.sym(name), sympy.Integer(nd)])
    count = L.new_buffer("int64", [sympy.Integer(1)])
    k = Kernel(L.kname("nonzero"))
    k.emit("__shared__ int wt_[32];")
    k.emit(f"const long long n_ = {k.c(prod(idx_shape))};")
    k.emit("const int lane_ = threadIdx.x & 31, warp_ = threadIdx.x >> 5;")
    k.emit("long long base_ = 0;")
    k.open(f"for (long long c0_ = 0; c0_ < n_; c0_ += {BLOCK})")
    lin = k.local_sym("_x")
    k.emit(f"const long long {lin} = c0_ + threadIdx.x;")
    pos = unravel(lin, idx_shape)
    k.push_mask(f"{lin} < n_")
    v = x(k, pos if shape else [])
    k.pop_mask()
    k.emit(f"const bool f_ = ({lin} < n_) && ({convert(v, x.dtype, 'bool')});")
    # the flags' inclusive prefix within the warp (butterfly over xor shuffles), then the warps'
    # totals through shared memory
    k.emit("int s_ = f_ ? 1 : 0, tot_ = s_;")
    for off in (1, 2, 4, 8, 16):
        k.emit(f"{{ const int t_ = __shfl_xor_sync(0xffffffffu, tot_, {off}); "
               f"if (lane_ & {off}) s_ += t_; tot_ += t_; }}")
    k.emit("if (lane_ == 0) wt_[warp_] = tot_;")
    k.emit("__syncthreads();")
    k.emit("int before_ = 0, all_ = 0;")
    k.emit(f"for (int w_ = 0; w_ < {BLOCK // 32}; ++w_) {{ const int v_ = wt_[w_]; "
           "if (w_ < warp_) before_ += v_; all_ += v_; }")
    k.open("if (f_)")
    k.emit("const long long row_ = base_ + before_ + s_ - 1;")
    k.locals.add("row_")
    row = symexpr.sym("row_")
    for d in range(nd):
        k.store(out, row * nd + d, k.c(pos[d]) if shape else "0LL")
    k.close()
    k.emit("base_ += all_;")
    k.emit("__syncthreads();")
    k.close()
    k.open("if (threadIdx.x == 0)")
    k.store(count, sympy.Integer(0), "base_")
    k.close()
    L.kernels.append(LaunchSpec(k, ["1"], [str(BLOCK)], launch_bounds=BLOCK, kind="nonzero"))
    L.dyn.counts[name] = count
    res = view_of(out)
    L.dyn.coords[name] = res
    return res


def nonzero(L, node, x, **kw):
    return _coords(L, x, _dyn_name(node["shape"], L))


def expand_masks(L, node, indices) -> list:
    """An index list with each boolean mask replaced by its nonzero coordinates, one index tensor
    per dim the mask covers (torch's own meaning of x[mask])."""
    if not any(isinstance(t, Loader) and t.dtype == "bool" for t in indices):
        return list(indices)
    out = []
    for t in indices:
        if isinstance(t, Loader) and t.dtype == "bool":
            name = _mask_name(L, node, t)
            c = _coords(L, t, name)
            out += [loops.select(c, 1, d) for d in range(len(t.shape))]
        else:
            out.append(t)
    return out


def _mask_name(L, node, mask) -> str:
    """The dynamic size a mask counts: in an index node's own output shape; for index_put (whose
    output is the target) the size the trace gave the values."""
    if node["op"].startswith("aten.index.") or node["op"].startswith("aten._unsafe_index"):
        return _dyn_name(node["shape"], L)
    vals = L.arg(node["args"][2]) if len(node["args"]) > 2 else None
    if isinstance(vals, Loader):
        names = sorted({str(s) for d in vals.shape for s in sympy.sympify(d).free_symbols
                        if dynamic.is_dynamic(str(s))})
        if len(names) == 1:
            return names[0]
    raise ValueError("a boolean-mask index_put whose values do not have the mask's count")


def masked_select(L, node, x, mask, **kw):
    """x[mask] after broadcasting both: the mask's coordinates gather x."""
    shape = loops_bshape(x.shape, mask.shape)
    m = loops.broadcast_to(mask, shape)
    xb = loops.broadcast_to(x, shape)
    name = _dyn_name(node["shape"], L)
    c = _coords(L, m, name)
    cols = [loops.select(c, 1, d) for d in range(len(shape))]
    out_shape = [symexpr.sym(name)]

    def fn(k, idx):
        src = []
        for col in cols:
            s = k.local_sym("_ms")
            k.emit(f"const long long {s} = {col(k, idx)};")
            src.append(s)
        return xb(k, src)
    return Loader(out_shape, x.dtype, fn, cost=x.cost + 1)


def loops_bshape(a, b) -> list:
    nd = max(len(a), len(b))
    a = [sympy.Integer(1)] * (nd - len(a)) + list(a)
    b = [sympy.Integer(1)] * (nd - len(b)) + list(b)
    return [y if loops.same(x, 1) else x for x, y in zip(a, b)]


def item(L, node, x, **kw):
    """An int read back from a 1-element tensor: realised in the workspace, where every kernel
    that uses it (an index, a size) reads it (dynamic.device_size)."""
    L.dyn.counts[node["sym"]] = L.realize(loops.reshape(x, [sympy.Integer(1)]), "int64")
    return None


def _upper_text(expr: str, sizes) -> str:
    """A launch expression string (max/min/ceil_div over axes) at the upper bounds."""
    if not any(n in expr for n, b in sizes.bounds.items() if b is not None or sizes.products):
        return expr
    tree = ast.parse(expr, mode="eval")

    class Sub(ast.NodeTransformer):
        def visit_BinOp(self, node):
            # arithmetic over values read back that only a product bounds (view_bounds.py):
            # the largest such subexpression at its bound
            if sizes.products and _reads_back(node, sizes):
                try:
                    e = dynamic.upper(symexpr.parse(ast.unparse(node)), sizes)
                except (SyntaxError, TypeError, ValueError):
                    e = None
                if e is not None and not any(dynamic.is_dynamic(str(x)) for x in e.free_symbols):
                    return ast.parse("(" + symexpr.to_axis(e) + ")", mode="eval").body
            return self.generic_visit(node)

        def visit_Name(self, node):
            if sizes.bounds.get(node.id) is not None:
                return ast.parse("(" + symexpr.to_axis(sizes.bounds[node.id]) + ")", mode="eval").body
            return node
    return ast.unparse(Sub().visit(tree))


_GRID_STRIDE = ("pointwise", "scatter", "reduction", "scan", "sort")


def _reads_back(expr, sizes) -> bool:
    """Whether a launch expression (its text, or a parsed node of it) names a value read back that
    has no bound."""
    tree = ast.parse(expr, mode="eval") if isinstance(expr, str) else expr
    return any(isinstance(x, ast.Name) and dynamic.is_dynamic(x.id) and sizes.bounds.get(x.id) is None
               for x in ast.walk(tree))
_DYN_GRID_CAP = 2048


def finalize(lowering) -> None:
    """After every kernel is written: workspace buffers and grids at the upper bounds (a kernel
    whose iteration space is a dynamic size reads the count and stops there)."""
    sizes = lowering.dyn
    if not sizes:
        return
    from . import guessed_bounds

    # a value read back that no shape bounds: a checked guess (a grid a view bounds needs none)
    guessed_bounds.guess(lowering, bounded=lambda g: bool(sizes.products) and
                         not _reads_back(_upper_text(g, sizes), sizes))
    for b in lowering.ws:
        b.shape = [dynamic.upper(s, sizes) for s in b.shape]
        if any(dynamic.is_dynamic(str(x)) for s in b.shape for x in sympy.sympify(s).free_symbols):
            raise ValueError("a size computed from a value read back from the device (.item()) "
                             "has no upper bound to allocate for")
    for spec in lowering.kernels:
        if spec.kind == "attention":  # the template's launches are rendered from its own spec
            raise ValueError("an attention segment in a plan with sizes counted on the device")
        grid = [_upper_text(str(g), sizes) for g in spec.grid]
        if spec.kind in _GRID_STRIDE:   # any grid serves a grid-stride loop: a value read back
            grid = [str(_DYN_GRID_CAP) if _reads_back(g, sizes) else g for g in grid]
        if any(dynamic.is_dynamic(x.id) for g in grid for x in ast.walk(ast.parse(g, mode="eval"))
               if isinstance(x, ast.Name)):
            raise ValueError("a launch grid depends on a value read back from the device (.item())")
        if spec.kind in _GRID_STRIDE and grid != [str(g) for g in spec.grid]:
            # a grid-stride loop up to a count read on the device: enough blocks to fill the GPU,
            # not the bound's (most of which would find nothing to do)
            grid = [f"min({g}, {_DYN_GRID_CAP})" for g in grid]
        spec.grid = grid
        spec.smem = _upper_text(str(spec.smem), sizes)
        for _, a in spec.kernel.params:
            if isinstance(a, str) and a.startswith("int64:") and dynamic.is_dynamic(a[6:]):
                raise ValueError(f"kernel {spec.kernel.name} takes {a[6:]} as a launch argument")
