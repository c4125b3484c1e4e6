"""Lower the traced IR to kernels: walk the nodes in order, keep elementwise work and views as
loaders (inlined into whichever kernel reads them), and realise into buffers what needs a kernel of
its own (reductions, matmuls, convolutions, scans, sorts, scatters, graph outputs).

`Lowering(ir).run()` gives the kernels in launch order and the workspace buffers; an op it cannot
lower raises `Unsupported("op ...: why")`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import sympy
from torch.utils._sympy.functions import FloorDiv

from .ir import refs as _refs
from . import counted_loops, dynamic, dynamic_lower, rolling
from . import generic as templates  # generic kernels; templates/ holds the fast segment templates
from . import attention_segment, conv_gemm, epilogue, loops, lower_conv_transpose, lower_fft, symexpr
from . import view_bounds
from .kernel import Buffer, Kernel, compute_type, convert, is_float, round_to
from .loops import Loader, prod, same, view_of


from .errors import Unsupported  # noqa: E402 - defined there (errors.py), raised here


class Scalar:
    """A float scalar input, known only at run time (kernel parameter f_<name>)."""

    def __init__(self, name: str):
        self.name = name


class SymFloat:
    """A float computed from sizes at run time (C double over size params)."""

    def __init__(self, c: str, names: list, fnames: list = ()):
        self.c, self.names, self.fnames = c, names, list(fnames)

    def emit(self, k) -> str:
        for n in self.names:
            k.size(n)
        for n in self.fnames:
            k.scalar(n)
        return f"((float)({self.c}))"


Number = (int, float)


def _lit(v, dtype: str) -> str:
    ct = compute_type(dtype)
    if isinstance(v, bool):
        v = int(v)
    if ct == "bool":
        return "true" if v else "false"
    if ct == "long long":
        return f"({int(v)}LL)"
    v = float(v)
    if math.isnan(v):
        return "SF_NAN" if ct == "float" else "((double)SF_NAN)"
    if math.isinf(v):
        s = "SF_INF" if ct == "float" else "((double)SF_INF)"
        return s if v > 0 else f"(-{s})"
    return f"(({ct}){v!r})"


_PROMO = ["bool", "uint8", "int8", "int16", "int32", "int64", "float8_e4m3fn", "float8_e5m2",
          "float16", "bfloat16", "float32", "float64"]


def promote(a: str, b: str) -> str:
    if a == b:
        return a
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return a if _PROMO.index(a) > _PROMO.index(b) else b


class Lowering:
    def __init__(self, ir: dict, out_specs: dict[str, tuple[str, list]], prefix: str = "",
                 matmul=None, attention: bool = False, pins: Optional[dict] = None):
        # how matmuls and convolutions lower: generic.matmul (the first candidate) unless the caller
        # passes another with the same call (api.py: the GEMM template's adapter, a tunable)
        self.matmul = matmul or templates.matmul
        # attention=True: softmax(QK^T)V patterns run as the flash template (attention_segment.py)
        self.attention = attention
        self.ir = ir
        self.prefix = prefix
        self.out_specs = out_specs          # output name -> (dtype, shape exprs) of the definition
        # sizes this variant's guards fix (`batch_size == 1`, trace._pins): constants in the inputs'
        # and outputs' shapes, as they already are in its graph, so that a view the graph takes of
        # an input is seen to be one (not a copy of it)
        self.pins = {symexpr.sym(k): sympy.Integer(v) for k, v in (pins or {}).items()}
        self.env: dict[str, Any] = {}
        self.kernels: list[templates.LaunchSpec] = []
        self.ws: list[Buffer] = []
        self.users: dict[str, int] = {}
        self._n = 0
        # a workspace buffer's name never repeats an input's or output's (an input named `b2` and
        # workspace buffer b2 would both be the kernel parameter p_b2)
        self._io_names = {i["name"] for i in ir.get("inputs", [])} | set(out_specs)
        self.dyn = dynamic.Sizes(ir)        # data-dependent sizes (nonzero's count), if any
        if self.dyn:   # a product needs a value read back, a pinned size is one
            self.dyn.products = view_bounds.view_products(ir, self.dyn.bounds)
            self.dyn.pinned = view_bounds.pinned_sizes(ir)
        # what epilogue.fuse needs once every kernel is written: each mm/bmm/addmm's call by its
        # output buffer's name, each pointwise kernel's (loader, buffer) items by the kernel
        self.gemm_calls: dict[str, dict] = {}
        self.pointwise_items: dict[int, tuple] = {}

    # ---- helpers ---------------------------------------------------------------------------
    def shape_expr(self, s) -> sympy.Expr:
        """An input's or output's dim (an axis expression) with this variant's pinned sizes."""
        e = symexpr.parse(str(s))
        return e.subs(self.pins) if self.pins else e

    def new_buffer(self, dtype: str, shape) -> Buffer:
        self._n += 1
        while f"b{self._n}" in self._io_names:
            self._n += 1
        b = Buffer(f"b{self._n}", dtype, [sympy.sympify(s) for s in shape], "ws")
        self.ws.append(b)
        return b

    def kname(self, kind: str) -> str:
        return f"{self.prefix}k{len(self.kernels)}_{kind}"

    def realize(self, x: Loader, dtype: Optional[str] = None) -> Buffer:
        """A buffer holding x contiguously (x itself when it already is one)."""
        dtype = dtype or x.dtype
        if x.is_view and dtype == x.dtype and same(x.offset, 0) and len(x.shape) == len(x.buf.shape) \
                and all(same(a, b) for a, b in zip(x.shape, x.buf.shape)) \
                and all(same(a, b) or same(s, 1) for a, b, s in
                        zip(x.strides, loops.contiguous_strides(x.shape), x.shape)):
            return x.buf
        b = self.new_buffer(dtype, x.shape)
        self.add_pointwise(self.kname("copy"), [(x, b)])
        return b

    def add_pointwise(self, name: str, items: list) -> None:
        """A pointwise kernel writing each loader into its buffer (epilogue.fuse may later move one
        item into the epilogue of the GEMM whose result it reads)."""
        spec = templates.pointwise(name, items)
        self.pointwise_items[id(spec)] = (spec, list(items))
        self.kernels.append(spec)

    def add_matmul(self, name: str, a: Loader, b: Loader, out_dtype: str, out: Buffer, **kw) -> None:
        """A matmul into its own workspace buffer `out` (contiguous (*batch, M, N)), recorded so that
        epilogue.fuse can write it again with the one elementwise consumer of `out` fused."""
        spec = self.matmul(name, a, b, out_dtype, out, **kw)
        self.gemm_calls[out.name] = dict(spec=spec, name=name, a=a, b=b, out_dtype=out_dtype, out=out, kw=kw)
        self.kernels.append(spec)

    def operand(self, x: Loader) -> Loader:
        """An anchor's operand: a strided view of a buffer is read in place; computed values are
        realised first unless they are a cheap chain (a cast or scale), recomputed per tile."""
        if x.is_view or x.cost <= 2:
            return x
        return view_of(self.realize(x))

    def arg(self, a):
        if isinstance(a, dict):
            if "ref" in a:
                v = self.env.get(a["ref"])
                if v is None:
                    raise Unsupported(f"value {a['ref']} is not available")
                return v
            if "sym" in a:
                return symexpr.parse(a["sym"])
            if "scalar" in a:
                return Scalar(a["scalar"])
            if "dtype" in a:
                return ("dtype", a["dtype"])
            if "float" in a:
                return float(a["float"])
            if "symf" in a:
                return SymFloat(a["symf"], a["names"], a.get("fnames", []))
        if isinstance(a, list):
            return [self.arg(x) for x in a]
        return a

    # ---- the walk ----------------------------------------------------------------------------
    def run(self):
        why = dynamic.check_oblivious(self.ir)
        if why:
            raise Unsupported(why)
        token = dynamic.activate(self.dyn)  # kernels read a dynamic size from its count
        try:
            self._run()
            counted_loops.assumed_checks(self)   # size equalities the trace assumed
        finally:
            dynamic.deactivate(token)
        try:
            dynamic_lower.finalize(self)     # buffers and grids at the sizes' upper bounds
        except ValueError as e:
            raise Unsupported(str(e)[:200]) from None
        return self

    def _run(self):
        for inp in self.ir["inputs"]:
            if inp["kind"] == "tensor":
                buf = Buffer(inp["name"], inp["dtype"], [self.shape_expr(s) for s in inp["shape"]],
                             "input")
                self.env[inp["name"]] = view_of(buf)
        for n in self.ir["nodes"]:
            for a in _refs(n["args"]) + _refs(list(n["kwargs"].values())):
                self.users[a] = self.users.get(a, 0) + 1
        segs = attention_segment.find(self.ir) if self.attention else {}
        inside = attention_segment.absorbed(segs)
        for n in self.ir["nodes"]:
            if n["name"] in inside:
                continue
            if n["name"] in segs:
                self.env[n["name"]] = attention_segment.lower(self, n, segs[n["name"]])
                continue
            self.lower_node(n)
        self._outputs()
        epilogue.fuse(self)   # an elementwise consumer of a GEMM's result into the GEMM's store

    def lower_node(self, n: dict, **extra) -> None:
        op = n["op"]
        # complex values (two real parts) and the FFT ops: lower_fft's own table
        fn = lower_fft.lowering(n, self.env, LOWER, Unsupported) or LOWER.get(op)
        if fn is None and op.startswith("prims."):
            base = "aten." + op.split(".")[1]
            fn = LOWER.get(base + ".Tensor") or LOWER.get(base + ".default")
        if fn is None:
            raise Unsupported(f"op {op} has no lowering")
        args = [self.arg(a) for a in n["args"]]
        kwargs = {k: self.arg(v) for k, v in n["kwargs"].items()}
        try:
            out = fn(self, n, *args, **kwargs, **extra)
        except Unsupported:
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError) as e:
            raise Unsupported(f"op {op}: {type(e).__name__}: {str(e)[:150]}") from None
        out = _with_storage(op, out, args[0] if args else None)
        if isinstance(out, Loader) and not out.is_view and out.storage is None and op not in VIEW_OPS \
                and out.cost > REALIZE_COST:
            out = view_of(self.realize(out))
        self.env[n["name"]] = out

    def _outputs(self):
        items = []
        for (name, (dtype, shape)), o in zip(self.out_specs.items(), self.ir["outputs"]):
            v = self.arg(o)
            if not isinstance(v, Loader):
                raise Unsupported(f"output {name} is not a tensor")
            shp = [self.shape_expr(s) for s in shape]
            if len(shp) != len(v.shape) and prod(shp) != prod(v.shape):
                raise Unsupported(f"output {name}: traced shape {v.shape} vs definition {shp}")
            if len(shp) != len(v.shape) or not all(same(a, b) for a, b in zip(shp, v.shape)):
                v = loops.reshape(v, shp)
            buf = Buffer(name, dtype, shp, "output")
            items.append((v, buf))
        # outputs of the same size share one kernel
        groups: list[list] = []
        for it in items:
            for g in groups:
                if same(g[0][1].numel(), it[1].numel()):
                    g.append(it)
                    break
            else:
                groups.append([it])
        for g in groups:
            self.add_pointwise(self.kname("out"), g)


# A computed value whose inlined chain exceeds this many elementwise ops is written to a buffer
# (one pointwise kernel) and read from there. Inlining re-emits the whole chain in every kernel and
# at every index it is read at: a tensor updated in place in a Python loop (`x[..., i, :i] = ...`
# 64 times) is a 64-deep where-chain whose each reader re-emitted all of it, minutes of lowering
# for one plan. The same idea as Inductor's realize_opcount_threshold; far above ordinary chains
# (an activation, a norm's arithmetic: tens), so it only cuts chains that grow with a loop.
REALIZE_COST = 128

# ops whose result aliases their first argument's storage in torch (torch's own view ops; a traced
# reshape that had to copy shows as clone + _unsafe_view, and the clone starts a new storage)
VIEW_OPS = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.slice.Tensor", "aten.select.int",
    "aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.expand.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.unfold.default", "aten.alias.default", "aten.detach.default"})


def _with_storage(op: str, out, src):
    """`out` with the storage torch would give it: a view op's result of a computed value keeps
    that value's storage (as_strided addresses it); any other op's result is a tensor of its own,
    also where a lowering returned its input unchanged (clone, contiguous)."""
    if not isinstance(out, Loader) or out.is_view:
        return out
    if op in VIEW_OPS:
        if isinstance(src, Loader) and not src.is_view and out is not src:
            out.storage = src.storage or src
        return out
    if out.storage is not None:
        return Loader(out.shape, out.dtype, out.fn, cost=out.cost)
    return out


# ── elementwise ──────────────────────────────────────────────────────────────────────────────────
def _shape_of(x):
    return x.shape if isinstance(x, Loader) else []


def _bshape(*xs):
    shapes = [_shape_of(x) for x in xs if isinstance(x, Loader)]
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dim = sympy.Integer(1)
        for s in shapes:
            j = i - (nd - len(s))
            if j < 0:
                continue
            if not same(s[j], 1):
                dim = s[j]
        out.append(dim)
    return out


def _val(k: Kernel, x, idx, shape, dtype: str) -> str:
    """Operand x at the output index, converted to dtype (a tensor is rounded to it; a Python
    number or scalar input stays in opmath)."""
    if isinstance(x, Loader):
        nd = len(shape)
        sub = []
        for j, s in enumerate(x.shape):
            i = j + nd - len(x.shape)
            sub.append(sympy.Integer(0) if (same(s, 1) and not same(shape[i], 1)) else idx[i])
        return convert(x(k, sub), x.dtype, dtype)
    if isinstance(x, SymFloat):
        v = x.emit(k)
        return v if compute_type(dtype) == "float" else f"(({compute_type(dtype)}){v})"
    if isinstance(x, Scalar):
        v = k.scalar(x.name)
        return v if compute_type(dtype) == "float" else f"(({compute_type(dtype)}){v})"
    if isinstance(x, sympy.Expr):
        c = k.c(x)
        return f"(({compute_type(dtype)})({c}))"
    return _lit(x, dtype)


def _cost(*xs):
    return sum(x.cost + 1 for x in xs if isinstance(x, Loader)) + 0


def elementwise(node, operands, body, compute_dtype: Optional[str] = None,
                round_result: bool = True) -> Loader:
    """A loader for node's value: body(*operand C values in compute_dtype) is a C expression."""
    out_dtype = node["dtype"]
    cdt = compute_dtype or out_dtype
    shape = [symexpr.parse(s) for s in node["shape"]]

    def fn(k, idx):
        vals = [_val(k, x, idx, shape, cdt) for x in operands]
        e = body(*vals)
        if cdt != out_dtype:
            e = convert(e, cdt, out_dtype) if not (cdt in ("float32",) and out_dtype == "bool") else e
        elif round_result:
            e = round_to(e, out_dtype)
        return k.let(compute_type(out_dtype), e)
    return Loader(shape, out_dtype, fn, cost=_cost(*operands))


def _ct(node):
    return compute_type(node["dtype"])


def _fun(fname_f, fname_d=None):
    def body(L, node, x, *rest, **kw):
        ct = _ct(node)
        f = fname_f if ct == "float" else (fname_d or fname_f.rstrip("f"))
        if ct not in ("float", "double"):
            raise Unsupported(f"{node['op']} on {node['dtype']}")
        return elementwise(node, [x], lambda a: f"{f}({a})")
    return body


UNARY_F = {"exp": "expf", "exp2": "exp2f", "expm1": "expm1f", "log": "logf", "log2": "log2f",
           "log10": "log10f", "log1p": "log1pf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "sin": "sinf",
           "cos": "cosf", "tan": "tanf", "tanh": "tanhf", "erf": "erff", "erfc": "erfcf",
           "erfinv": "erfinvf", "asin": "asinf", "acos": "acosf", "atan": "atanf",
           "sinh": "sinhf", "cosh": "coshf", "asinh": "asinhf", "acosh": "acoshf",
           "atanh": "atanhf", "lgamma": "lgammaf", "floor": "floorf", "ceil": "ceilf",
           "trunc": "truncf", "round": "rintf"}


def _unary_map():
    out = {}
    for name, f in UNARY_F.items():
        out[f"aten.{name}.default"] = _fun(f)
    return out


def _compare(cop):
    def lower(L, node, a, b, **kw):
        da = a.dtype if isinstance(a, Loader) else None
        db = b.dtype if isinstance(b, Loader) else None
        if da and db:
            cdt = promote(da, db)
        else:
            t = da or db
            other = b if da else a
            cdt = t
            if t in ("bool",) or (not is_float(t) and isinstance(other, float)) or isinstance(other, Scalar):
                cdt = "float32" if not is_float(t) else t
            if is_float(t) and not isinstance(other, Loader):
                cdt = t
        def body(x, y):
            return f"(({x}) {cop} ({y}))"
        # a Python number compared with a 16-bit tensor is rounded to the tensor's dtype first
        ops = []
        for x in (a, b):
            if not isinstance(x, Loader) and cdt in ("bfloat16", "float16") and not isinstance(x, sympy.Expr):
                ops.append(_RoundedConst(x, cdt))
            else:
                ops.append(x)
        return elementwise(node, ops, body, compute_dtype=cdt)
    return lower


class _RoundedConst(Loader):
    def __init__(self, v, dtype):
        def fn(k, idx):
            raw = k.scalar(v.name) if isinstance(v, Scalar) else _lit(v, "float32")
            return round_to(raw, dtype)
        super().__init__([], dtype, fn)


def _arith(sym, fn_name=None):
    def lower(L, node, a, b, alpha=1, **kw):
        cdt = node["dtype"]
        if alpha != 1 and alpha is not None:
            bb = b

            def body(x, y):
                if compute_type(cdt) == "float":
                    return f"({x} {sym} ({_lit(alpha, cdt)} * {y}))"
                return f"({x} {sym} ({_lit(alpha, cdt)} * {y}))"
            return elementwise(node, [a, bb], body)
        if fn_name:
            return elementwise(node, [a, b], lambda x, y: f"{fn_name}({x}, {y})")
        return elementwise(node, [a, b], lambda x, y: f"({x} {sym} {y})")
    return lower


def _div(L, node, a, b, rounding_mode=None, **kw):
    dt = node["dtype"]
    if rounding_mode is None:
        if not isinstance(b, Loader) and compute_type(dt) == "float":
            # PyTorch multiplies by the reciprocal of a Python scalar divisor
            return elementwise(node, [a, b], lambda x, y: f"({x} * (1.0f / {y}))")
        return elementwise(node, [a, b], lambda x, y: f"({x} / {y})")
    if compute_type(dt) == "long long":
        f = "sf_floordiv" if rounding_mode == "floor" else ""
        return elementwise(node, [a, b], lambda x, y: f"{f}({x}, {y})" if f else f"({x} / {y})")
    if rounding_mode == "floor":
        return elementwise(node, [a, b], lambda x, y: f"floorf({x} / {y})" if compute_type(dt) == "float"
                           else f"floor({x} / {y})")
    return elementwise(node, [a, b], lambda x, y: f"truncf({x} / {y})" if compute_type(dt) == "float"
                       else f"trunc({x} / {y})")


def _pow(L, node, a, b, **kw):
    dt = node["dtype"]
    ct = compute_type(dt)
    if not isinstance(b, Loader) and isinstance(b, Number) and isinstance(a, Loader):
        e = float(b)
        if ct == "long long":
            if e == 2:
                return elementwise(node, [a], lambda x: f"({x} * {x})")
            raise Unsupported("integer pow")
        table = {2.0: lambda x: f"({x} * {x})", 3.0: lambda x: f"({x} * {x} * {x})",
                 0.5: lambda x: f"sqrtf({x})" if ct == "float" else f"sqrt({x})",
                 -0.5: lambda x: f"rsqrtf({x})" if ct == "float" else f"(1.0 / sqrt({x}))",
                 1.0: lambda x: x, -1.0: lambda x: f"(({ct})1 / {x})",
                 -2.0: lambda x: f"(({ct})1 / ({x} * {x}))", 0.0: lambda x: f"(({ct})1)"}
        if e in table:
            return elementwise(node, [a], table[e])
        return elementwise(node, [a, b], lambda x, y: f"powf({x}, {y})" if ct == "float" else f"pow({x}, {y})")
    if ct == "long long":
        raise Unsupported("integer pow")
    return elementwise(node, [a, b], lambda x, y: f"powf({x}, {y})" if ct == "float" else f"pow({x}, {y})")


def _where(L, node, c, a, b, **kw):
    dt = node["dtype"]

    def fn(k, idx):
        shape = [symexpr.parse(s) for s in node["shape"]]
        cv_ = _val(k, c, idx, shape, "bool")
        av = _val(k, a, idx, shape, dt)
        bv = _val(k, b, idx, shape, dt)
        return k.let(compute_type(dt), f"(({cv_}) ? ({av}) : ({bv}))")
    return Loader([symexpr.parse(s) for s in node["shape"]], dt, fn, cost=_cost(c, a, b))


def _clamp(L, node, x, lo=None, hi=None, **kw):
    dt = node["dtype"]
    ops = [x] + [v for v in (lo, hi) if v is not None]

    def body(*vals):
        e = vals[0]
        i = 1
        if lo is not None:
            e = f"sf_max({e}, {vals[i]})" if compute_type(dt) != "float" else \
                f"(({e}) != ({e}) ? ({e}) : fmaxf({e}, {vals[i]}))"
            i += 1
        if hi is not None:
            e = f"sf_min({e}, {vals[i]})" if compute_type(dt) != "float" else \
                f"(({e}) != ({e}) ? ({e}) : fminf({e}, {vals[i]}))"
        return e
    return elementwise(node, ops, body)


def _to_copy(L, node, x, dtype=None, **kw):
    dt = node["dtype"]
    if x.dtype == dt:
        return x
    return Loader(x.shape, dt, lambda k, idx: k.let(compute_type(dt), convert(x(k, idx), x.dtype, dt)),
                  cost=x.cost + 1)


def _identity(L, node, x, *a, **kw):
    return x


def _logical(op):
    def lower(L, node, a, b=None, **kw):
        if node["dtype"] == "bool" or op in ("and", "or", "xor", "not") and node["dtype"] == "bool":
            ops = [a] if b is None else [a, b]
            if op == "not":
                return elementwise(node, ops, lambda x: f"(!({x}))", compute_dtype="bool")
            sym = {"and": "&&", "or": "||", "xor": "!="}[op]
            return elementwise(node, ops, lambda x, y: f"(({x}) {sym} ({y}))", compute_dtype="bool")
        # integer bitwise ops
        if op == "not":
            return elementwise(node, [a], lambda x: f"(~({x}))")
        sym = {"and": "&", "or": "|", "xor": "^"}[op]
        return elementwise(node, [a, b], lambda x, y: f"(({x}) {sym} ({y}))")
    return lower


def _logical_bool(op):
    def lower(L, node, a, b=None, **kw):
        ops = [a] if b is None else [a, b]
        if op == "not":
            return elementwise(node, ops, lambda x: f"(!({x}))", compute_dtype="bool")
        sym = {"and": "&&", "or": "||", "xor": "!="}[op]
        return elementwise(node, ops, lambda x, y: f"(({x}) {sym} ({y}))", compute_dtype="bool")
    return lower


def _full(L, node, size, value, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]

    def fn(k, idx):
        return _val(k, value, idx, shape, dt) if not isinstance(value, Number) else _lit(value, dt)
    return Loader(shape, dt, fn)


def _scalar_tensor(L, node, value, **kw):
    return _full(L, node, [], value)


def _empty(L, node, *a, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]
    return Loader(shape, dt, lambda k, idx: _lit(0, dt))


def _arange(L, node, *args, **kw):
    # arange.start_step(start, end, step) / arange.default(end) / arange.start(start, end)
    op = node["op"]
    if op.endswith("start_step"):
        start, _, step = (list(args) + [1])[:3]
    elif op.endswith(".start"):
        start, step = args[0], 1
    else:
        start, step = 0, 1
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]

    def fn(k, idx):
        i = k.c(idx[0])
        s = _val(k, start, idx, shape, dt) if not isinstance(start, Number) else _lit(start, dt)
        st = _val(k, step, idx, shape, dt) if not isinstance(step, Number) else _lit(step, dt)
        return k.let(compute_type(dt), round_to(f"({s} + ({compute_type(dt)})({i}) * {st})", dt))
    return Loader(shape, dt, fn)


def _copy(L, node, dst, src, *a, **kw):
    return _to_copy(L, node, loops.broadcast_to(src, dst.shape))


# ── views ────────────────────────────────────────────────────────────────────────────────────────
def _ints(xs):
    return [x for x in xs]


def _view(L, node, x, size, *a, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    if L.dyn and L.dyn.products:
        # a view over values read back that bounds their product (view_bounds.py): its
        # element count checked on the device, so the buffers sized by that bound never overrun
        n_in, n_out = prod(x.shape), prod(shape)
        if any(dynamic.is_dynamic(str(v)) and L.dyn.bounds.get(str(v), 0) is None
               for v in (sympy.sympify(n_in) - sympy.sympify(n_out)).free_symbols):
            L.kernels.append(counted_loops.check_kernel(
                L, lambda k: f"({k.c(n_in)}) == ({k.c(n_out)})", "view_check"))
    out = loops.reshape(x, shape)
    if not out.is_view and getattr(x, "div_depth", 0) >= 1:
        # a reshape that does not fold, of one that did not either: its index would nest the first
        # one's divisions and modulos inside its own (3.9 MB for one load of a reference with a
        # few such chains); the first is written to a buffer, which this one views with strides
        out = loops.reshape(view_of(L.realize(x)), shape)
    return out


def _broadcast_in_dim(L, node, x, shape, bdims, **kw):
    out_shape = [symexpr.parse(s) for s in node["shape"]]
    y = x
    for d in range(len(out_shape)):
        if d not in bdims:
            y = loops.unsqueeze(y, d)
    return loops.expand(y, out_shape)


def _permute(L, node, x, dims, **kw):
    return loops.permute(x, dims)


def _transpose(L, node, x, d0, d1, **kw):
    n = len(x.shape)
    dims = list(range(n))
    d0, d1 = d0 % n, d1 % n
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return loops.permute(x, dims)


def _t(L, node, x, **kw):
    return loops.permute(x, [1, 0]) if len(x.shape) == 2 else x


def _expand(L, node, x, size, *a, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    return loops.expand(x, shape)


def _slice(L, node, x, dim=0, start=None, end=None, step=1, **kw):
    y = loops.slice_(x, dim, start, end, step)
    shape = [symexpr.parse(s) for s in node["shape"]]
    y.shape = shape  # the trace's own (clamped) sizes
    return y


def _select(L, node, x, dim, index, **kw):
    return loops.select(x, dim, index)


def _unsqueeze(L, node, x, dim, **kw):
    return loops.unsqueeze(x, dim)


def _squeeze(L, node, x, dims=None, **kw):
    if isinstance(dims, int):
        dims = [dims]
    return loops.squeeze(x, dims)


def _unfold(L, node, x, dim, size, step, **kw):
    """Sliding windows along dim: a view (window index * step + position in the window)."""
    shape = [symexpr.parse(s) for s in node["shape"]]
    nd = len(x.shape)
    dim %= nd if nd else 1
    if x.is_view:
        st = list(x.strides)
        st = st[:dim] + [st[dim] * step] + st[dim + 1:] + [st[dim]]
        return view_of(x.buf, shape, st, x.offset)
    return loops.reindex(x, shape, lambda idx: idx[:dim] + [idx[dim] * step + idx[-1]] + idx[dim + 1:-1])


def _as_strided(L, node, x, size, stride, offset=0, **kw):
    return loops.as_strided(x, [sympy.sympify(s) for s in size], [sympy.sympify(s) for s in stride],
                            offset or 0)


# ── reductions ───────────────────────────────────────────────────────────────────────────────────
def _rdims(x, dims):
    nd = len(x.shape)
    if dims is None or dims == []:
        return list(range(nd))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % nd for d in dims}) if nd else []


def _reduce(L, node, x, dims, op, keepdim=False, dtype_out=None, scale=None):
    out_dt = dtype_out or node["dtype"]
    rd = _rdims(x, dims)
    if not x.shape:
        return x
    kshape = [x.shape[d] for d in range(len(x.shape)) if d not in rd]
    buf = L.new_buffer(out_dt, kshape)
    src = x
    if op in ("sum", "prod") and out_dt != x.dtype and is_float(out_dt):
        src = Loader(x.shape, out_dt, lambda k, idx: convert(x(k, idx), x.dtype, out_dt), cost=x.cost)
    if op in ("sum", "prod") and compute_type(out_dt) == "long long" and x.dtype != out_dt:
        src = Loader(x.shape, out_dt, lambda k, idx: convert(x(k, idx), x.dtype, out_dt), cost=x.cost)
    L.kernels.append(templates.reduction(L.kname(op), src, rd, op, buf, kshape, scale=scale))
    out = view_of(buf)
    shape = [symexpr.parse(s) for s in node["shape"]] if node.get("shape") is not None else None
    if keepdim and shape is not None:
        out = loops.reshape(out, shape)
    return out


def _sum(L, node, x, dims=None, keepdim=False, dtype=None, **kw):
    return _reduce(L, node, x, dims, "sum", keepdim)


def _mean(L, node, x, dims=None, keepdim=False, dtype=None, **kw):
    rd = _rdims(x, dims)
    return _reduce(L, node, x, dims, "sum", keepdim, scale=prod([x.shape[d] for d in rd]))


def _prims_var(L, node, x, dims, correction=1, output_dtype=None, **kw):
    """Two passes: the mean (kept dims), then the sum of squared deviations / (N - correction)."""
    rd = _rdims(x, dims)
    n = prod([x.shape[d] for d in rd])
    f32 = x.dtype if is_float(x.dtype) else "float32"
    kshape = [x.shape[d] for d in range(len(x.shape)) if d not in rd]
    mbuf = L.new_buffer(f32, kshape)
    L.kernels.append(templates.reduction(L.kname("mean"), x, rd, "sum", mbuf, kshape, scale=n))
    mean = view_of(mbuf)
    keep_map = [d for d in range(len(x.shape)) if d not in rd]

    def dev(k, idx):
        v = convert(x(k, idx), x.dtype, f32)
        m = mean(k, [idx[d] for d in keep_map])
        return k.let(compute_type(f32), round_to(f"(({v} - {m}) * ({v} - {m}))", f32))
    sq = Loader(list(x.shape), f32, dev, cost=x.cost + 2)
    out = L.new_buffer(node["dtype"], kshape)
    corr = correction if correction is not None else 1
    L.kernels.append(templates.reduction(L.kname("var"), sq, rd, "sum", out, kshape,
                                         scale=sympy.Max(n - int(corr), 0), recip=False))
    return view_of(out)


def _prod(L, node, x, dim=None, keepdim=False, dtype=None, **kw):
    return _reduce(L, node, x, dim, "prod", keepdim)


def _amax(L, node, x, dims=None, keepdim=False, **kw):
    return _reduce(L, node, x, dims, "max", keepdim)


def _amin(L, node, x, dims=None, keepdim=False, **kw):
    return _reduce(L, node, x, dims, "min", keepdim)


def _any(L, node, x, dims=None, keepdim=False, **kw):
    return _reduce(L, node, x, dims, "any", keepdim)


def _all(L, node, x, dims=None, keepdim=False, **kw):
    return _reduce(L, node, x, dims, "all", keepdim)


def _argmax_like(op):
    def lower(L, node, x, dim=None, keepdim=False, **kw):
        if dim is None:
            x = loops.reshape(x, [prod(x.shape)])
            dim = 0
        return _reduce(L, node, x, [dim], op, keepdim, dtype_out="int64")
    return lower


def _max_dim(op):
    def lower(L, node, x, dim=None, keepdim=False, **kw):
        if dim is None:  # max.default: the whole tensor's max
            return _reduce(L, node, x, None, op, False)
        sub_v = dict(node, dtype=node["outs"][0][0], shape=node["outs"][0][1])
        sub_i = dict(node, dtype="int64", shape=node["outs"][1][1])
        v = _reduce(L, sub_v, x, [dim], op, keepdim)
        i = _reduce(L, sub_i, x, [dim], "arg" + op, keepdim, dtype_out="int64")
        return (v, i)
    return lower


def _getitem(L, node, x, i, **kw):
    if isinstance(x, (tuple, list)):
        return x[i]
    raise Unsupported("getitem on a non-tuple")


# ── anchors ──────────────────────────────────────────────────────────────────────────────────────
def _mm(L, node, a, b, **kw):
    out_dt = node["dtype"]
    a, b = L.operand(a), L.operand(b)
    buf = L.new_buffer(out_dt, [a.shape[0], b.shape[1]])
    L.add_matmul(L.kname("mm"), a, b, out_dt, buf, batch_shape=[])
    return view_of(buf)


def _bmm(L, node, a, b, **kw):
    out_dt = node["dtype"]
    a, b = L.operand(a), L.operand(b)
    buf = L.new_buffer(out_dt, [a.shape[0], a.shape[1], b.shape[2]])
    L.add_matmul(L.kname("bmm"), a, b, out_dt, buf, batch_shape=[a.shape[0]])
    return view_of(buf)


def _addmm(L, node, bias, a, b, beta=1, alpha=1, **kw):
    if beta != 1 or alpha != 1:
        raise Unsupported("addmm with alpha/beta")
    out_dt = node["dtype"]
    a, b = L.operand(a), L.operand(b)
    M, N = a.shape[0], b.shape[1]
    bias_b = loops.broadcast_to(bias, [M, N])
    buf = L.new_buffer(out_dt, [M, N])
    L.add_matmul(L.kname("addmm"), a, b, out_dt, buf, bias=bias_b, batch_shape=[])
    return view_of(buf)


def _convolution(L, node, x, w, bias, stride, padding, dilation, transposed, output_padding,
                 groups, **kw):
    """Implicit GEMM: rows = (n, output position), cols = output channels of a group, k = (input
    channel of the group, kernel position); groups are the batch."""
    if transposed:
        return lower_conv_transpose.conv_transpose(L, node, x, w, bias, stride, padding, dilation, groups)
    out_dt = node["dtype"]
    oshape = [symexpr.parse(s) for s in node["shape"]]
    nsp = len(x.shape) - 2
    x = L.operand(x)
    w = L.operand(w)
    Nb = x.shape[0]
    Cout = w.shape[0]
    G = int(groups)
    Cg = w.shape[1]                     # input channels per group
    Cog = sympy.simplify(Cout / G) if G != 1 else Cout
    ks = w.shape[2:]
    osp = oshape[2:]
    isp = x.shape[2:]
    stride = list(stride) * (nsp if len(stride) == 1 else 1)
    padding = list(padding) * (nsp if len(padding) == 1 else 1)
    dilation = list(dilation) * (nsp if len(dilation) == 1 else 1)
    P = prod(osp)
    KK = Cg * prod(ks)
    M = Nb * P
    kst = loops.contiguous_strides([Cg] + list(ks))
    ost = loops.contiguous_strides(list(osp))

    unr = conv_gemm.unravel

    def a_fn(k, idx):
        g, m, kk = idx
        n = FloorDiv(m, P) if not same(P, 1) else m
        pos = unr(m, ost, osp)
        kpart = unr(kk, kst, [Cg] + list(ks))
        ci, kpos = kpart[0], kpart[1:]
        ipos = [o * s - p + kq * d for o, s, p, kq, d in zip(pos, stride, padding, kpos, dilation)]
        conds = [f"({k.c(ip)} >= 0 && {k.c(ip)} < {k.c(sz)})" for ip, sz in zip(ipos, isp)]
        k.push_mask(" && ".join(conds))
        v = x(k, [n, g * Cg + ci] + ipos)
        k.pop_mask()
        return v

    def b_fn(k, idx):
        g, kk, co = idx
        kpart = unr(kk, kst, [Cg] + list(ks))
        return w(k, [g * Cog + co] + kpart)

    return conv_gemm.emit(L, "conv", x, w, a_fn, b_fn, G, M, KK, Cog, P, osp, oshape, out_dt, bias)


def _cumulative(op):
    def lower(L, node, x, dim, dtype=None, **kw):
        out_dt = node["dtype"]
        buf = L.new_buffer(out_dt, x.shape)
        L.kernels.append(templates.scan(L.kname("cum" + op), x, dim, op, buf))
        return view_of(buf)
    return lower


def _sort(L, node, x, dim=-1, descending=False, stable=None, **kw):
    if "stable" in node["op"]:
        # sort.stable(self, *, stable, dim, descending)
        dim = kw.get("dim", -1) if not isinstance(dim, int) or kw.get("dim") is not None else dim
        descending = kw.get("descending", descending)
    src = L.realize(x)
    vals = L.new_buffer(x.dtype, x.shape)
    idx = L.new_buffer("int64", x.shape)
    L.kernels.append(templates.sort_rank(L.kname("sort"), src, dim, bool(descending),
                                         x.shape[dim % len(x.shape)], vals, idx, x.dtype))
    return (view_of(vals), view_of(idx))


def _topk(L, node, x, kk, dim=-1, largest=True, sorted_=True, **kw):
    largest, sorted_ = kw.get("largest", largest), kw.get("sorted", sorted_)
    dim = kw.get("dim", dim)
    src = L.realize(x)
    oshape = [symexpr.parse(s) for s in node["outs"][0][1]]
    vals = L.new_buffer(x.dtype, oshape)
    idx = L.new_buffer("int64", oshape)
    if sorted_:
        L.kernels.append(templates.sort_rank(L.kname("topk"), src, dim, bool(largest), sympy.sympify(kk),
                                             vals, idx, x.dtype))
        return (view_of(vals), view_of(idx))
    # sorted=False: the k best in sorted order first (for the k-th value), then CUDA's own order
    ranked = L.new_buffer(x.dtype, oshape)
    L.kernels.append(templates.sort_rank(L.kname("topk"), src, dim, bool(largest), sympy.sympify(kk),
                                         ranked, None, x.dtype))
    L.kernels.append(templates.topk_unsorted(L.kname("topk_order"), src, ranked, dim, bool(largest),
                                             sympy.sympify(kk), vals, idx))
    return (view_of(vals), view_of(idx))


def _wrap_index(k: Kernel, v: str, size) -> sympy.Symbol:
    """An index read from a tensor as a local symbol (negative counts from the end)."""
    s = k.local_sym("_ix")
    k.emit(f"const long long {s} = ({v}) < 0 ? ({v}) + {k.c(size)} : ({v});")
    return s


def _advanced_index(k: Kernel, idx, idx_list, first: int, bshape, sizes) -> list:
    """The source coordinates of advanced indexing (x[i0, :, i2] read or written) at the iteration
    index idx: the index tensors' broadcast dims sit at idx[first:first + len(bshape)], the sliced
    dims around them in order; each index read from its tensor and wrapped (negative from the end)."""
    nb = len(bshape)
    bidx = idx[first:first + nb]
    rest = iter(idx[:first] + idx[first + nb:])
    return [next(rest) if t is None else _wrap_index(k, _val(k, t, bidx, bshape, "int64"), sizes[d])
            for d, t in enumerate(idx_list)]


def _index(L, node, x, indices, **kw):
    """x[i0, i1, ...] with index tensors (None = full slice): advanced indexing, the index dims
    broadcast together; placed first unless the indexed dims are adjacent."""
    shape = [symexpr.parse(s) for s in node["shape"]]
    nd = len(x.shape)
    indices = dynamic_lower.expand_masks(L, node, indices)  # x[mask]: the mask's coordinates
    idx_list = list(indices) + [None] * (nd - len(indices))
    pos = [i for i, t in enumerate(idx_list) if t is not None]
    tens = [idx_list[i] for i in pos]
    bshape = _bshape(*tens)
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    first = pos[0] if adjacent else 0

    def fn(k, idx):
        return x(k, _advanced_index(k, idx, idx_list, first, bshape, x.shape))
    return Loader(shape, x.dtype, fn, cost=x.cost + 1)


def _index_select(L, node, x, dim, index, **kw):
    dim %= len(x.shape)
    shape = [symexpr.parse(s) for s in node["shape"]]

    def fn(k, idx):
        iv = index(k, [idx[dim]] if index.shape else [])
        s = _wrap_index(k, iv, x.shape[dim])
        return x(k, idx[:dim] + [s] + idx[dim + 1:])
    return Loader(shape, x.dtype, fn, cost=x.cost + 1)


def _embedding(L, node, w, ind, *a, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    nd = len(ind.shape)

    def fn(k, idx):
        iv = ind(k, idx[:nd])
        s = _wrap_index(k, iv, w.shape[0])
        return w(k, [s, idx[nd]])
    return Loader(shape, w.dtype, fn, cost=1)


def _gather(L, node, x, dim, index, *a, **kw):
    dim %= len(x.shape)
    shape = [symexpr.parse(s) for s in node["shape"]]

    def fn(k, idx):
        iv = index(k, idx)
        s = _wrap_index(k, iv, x.shape[dim])
        return x(k, idx[:dim] + [s] + idx[dim + 1:])
    return Loader(shape, x.dtype, fn, cost=x.cost + 1)


def _cat(L, node, tensors, dim=0, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]
    parts = [t for t in tensors if not (len(t.shape) == 1 and same(t.shape[0], 0))]
    nd = len(shape)
    dim %= nd
    starts, acc = [], sympy.Integer(0)
    for t in parts:
        starts.append(acc)
        acc = acc + t.shape[dim]

    def fn(k, idx):
        d = k.c(idx[dim])
        res = k.fresh("cat")
        ct = compute_type(dt)
        k.emit(f"{ct} {res};")
        for j, (t, s) in enumerate(zip(parts, starts)):
            cond = f"{d} < {k.c(s + t.shape[dim])}"
            # the last part takes what is left; a cat left with one part (the others empty 1-D
            # tensors, which cat skips) is a plain block, not an `else` with no `if`
            head = ("if" if j == 0 else "else if") + f" ({cond})" if j < len(parts) - 1 else \
                ("else" if j else "")
            k.open(head)
            sub = idx[:dim] + [idx[dim] - s] + idx[dim + 1:]
            v = convert(t(k, sub), t.dtype, dt)
            k.emit(f"{res} = {v};")
            k.close()
        return res
    return Loader(shape, dt, fn, cost=sum(t.cost for t in parts) + 1)


def _pad(L, node, x, pad, value=0, **kw):
    shape = [symexpr.parse(s) for s in node["shape"]]
    nd = len(shape)
    dt = node["dtype"]
    pads = [(sympy.sympify(pad[2 * i]), sympy.sympify(pad[2 * i + 1])) for i in range(len(pad) // 2)]

    def fn(k, idx):
        src, conds = list(idx), []
        for i, (lo, hi) in enumerate(pads):
            d = nd - 1 - i
            src[d] = idx[d] - lo
            conds.append(f"({k.c(src[d])} >= 0 && {k.c(src[d])} < {k.c(x.shape[d])})")
        m = " && ".join(conds) or "true"
        ok = k.let("bool", m)
        k.push_mask(ok)
        v = x(k, src)
        k.pop_mask()
        return k.let(compute_type(dt), f"({ok} ? ({v}) : {_lit(value, dt) if isinstance(value, Number) else '0'})")
    return Loader(shape, dt, fn, cost=x.cost + 1)


def _flip(L, node, x, dims, **kw):
    nd = len(x.shape)
    dims = {d % nd for d in dims}
    return loops.reindex(x, x.shape, lambda idx: [x.shape[d] - 1 - i if d in dims else i
                                                  for d, i in enumerate(idx)])


def _scatter_common(L, node, x, dim, index, src, accumulate: str):
    buf = L.new_buffer(x.dtype, x.shape)
    L.kernels.append(templates.pointwise(L.kname("copy"), [(x, buf)]))
    dim %= len(x.shape)
    st = loops.contiguous_strides(x.shape)

    def index_fn(k, idx):
        iv = index(k, idx)
        s = _wrap_index(k, iv, x.shape[dim])
        full = idx[:dim] + [s] + idx[dim + 1:]
        return k.c(sum((i * t for i, t in zip(full, st)), sympy.Integer(0)))
    val = src if isinstance(src, Loader) else Loader(index.shape, x.dtype, lambda k, idx: _val(
        k, src, idx, index.shape, x.dtype))
    if isinstance(src, Loader):
        val = loops.reindex(src, index.shape, lambda idx: idx) if len(src.shape) == len(index.shape) else src
    L.kernels.append(templates.scatter(L.kname("scatter"), buf, index.shape, index_fn, val, accumulate))
    return view_of(buf)


def _scatter(L, node, x, dim, index, src, reduce=None, **kw):
    if reduce is not None:
        if reduce not in ("add", "sum"):
            raise Unsupported(f"scatter reduce={reduce}")
        return _scatter_common(L, node, x, dim, index, src, "add")
    return _scatter_common(L, node, x, dim, index, src, "")


def _scatter_add(L, node, x, dim, index, src, **kw):
    return _scatter_common(L, node, x, dim, index, src, "add")


def _scatter_reduce(L, node, x, dim, index, src, reduce, include_self=True, **kw):
    if reduce != "sum" or not include_self:
        raise Unsupported(f"scatter_reduce {reduce} include_self={include_self}")
    return _scatter_common(L, node, x, dim, index, src, "add")


def _index_put(L, node, x, indices, values, accumulate=False, into=None, **kw):
    """into: a buffer already holding x that may be updated in place (a rolled loop's carry)."""
    nd = len(x.shape)
    indices = dynamic_lower.expand_masks(L, node, indices)  # x[mask] = v: the mask's coordinates
    idx_list = list(indices) + [None] * (nd - len(indices))
    pos = [i for i, t in enumerate(idx_list) if t is not None]
    tens = [idx_list[i] for i in pos]
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise Unsupported("index_put with non-adjacent index tensors")
    bshape = _bshape(*tens)
    first = pos[0]
    it_shape = list(x.shape[:first]) + bshape + list(x.shape[pos[-1] + 1:])
    buf = into
    if buf is None:
        buf = L.new_buffer(x.dtype, x.shape)
        L.kernels.append(templates.pointwise(L.kname("copy"), [(x, buf)]))
    st = loops.contiguous_strides(x.shape)

    def index_fn(k, idx):
        full = _advanced_index(k, idx, idx_list, first, bshape, x.shape)
        return k.c(sum((i * t for i, t in zip(full, st)), sympy.Integer(0)))
    val = loops.broadcast_to(values, it_shape) if isinstance(values, Loader) else \
        Loader(it_shape, x.dtype, lambda k, idx: _lit(values, x.dtype))
    L.kernels.append(templates.scatter(L.kname("index_put"), buf, it_shape, index_fn, val,
                                       "add" if accumulate else ""))
    return view_of(buf)


def _bincount(L, node, x, weights=None, minlength=0, **kw):
    """Counts (or summed weights) per value: zeros, then an atomic add per element of x."""
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]
    buf = L.new_buffer(dt, shape)
    L.kernels.append(templates.pointwise(L.kname("zeros"), [(Loader(shape, dt, lambda k, idx: _lit(0, dt)), buf)]))

    def index_fn(k, idx):
        v = x(k, idx)
        return f"(({v}) < {k.c(shape[0])} ? ({v}) : 0)"
    one = weights if isinstance(weights, Loader) else Loader(list(x.shape), dt, lambda k, idx: _lit(1, dt))
    L.kernels.append(templates.scatter(L.kname("bincount"), buf, list(x.shape), index_fn, one, "add"))
    return view_of(buf)


def _max_pool(L, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, **kw):
    """max_pool{1,2,3}d_with_indices: per output element a loop over its window (padding reads as
    -inf); the index is the flat position in the input's spatial dims, first maximum wins."""
    nsp = len(kernel_size)
    ks = list(kernel_size)
    st = list(stride) if stride else ks
    pd = list(padding) if isinstance(padding, (list, tuple)) else [padding] * nsp
    dl = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation] * nsp
    st, pd, dl = [(v * nsp if len(v) == 1 else v) for v in (st, pd, dl)]
    oshape = [symexpr.parse(s) for s in node["outs"][0][1]]
    dt = x.dtype
    isp = x.shape[-nsp:]
    ct = compute_type(dt)

    def window(k, idx, want_index):
        lead, opos = idx[:-nsp], idx[-nsp:]
        best, bi = k.fresh("mx"), k.fresh("mi")
        k.emit(f"{ct} {best} = -SF_INF; long long {bi} = -1;")
        syms = []
        for i in range(nsp):
            s_ = k.local_sym("_w")
            k.open(f"for (long long {s_} = 0; {s_} < {ks[i]}; ++{s_})")
            syms.append(s_)
        ipos = [o * st[i] - pd[i] + syms[i] * dl[i] for i, o in enumerate(opos)]
        conds = " && ".join(f"({k.c(p)} >= 0 && {k.c(p)} < {k.c(sz)})" for p, sz in zip(ipos, isp))
        k.open(f"if ({conds})")
        v = x(k, lead + ipos)
        flat = sum((p * prod(isp[i + 1:]) for i, p in enumerate(ipos)), sympy.Integer(0))
        k.emit(f"if ({v} > {best} || ({v} != {v} && {best} == {best}) || {bi} < 0) "
               f"{{ {best} = {v}; {bi} = {k.c(flat)}; }}")
        k.close()
        for _ in range(nsp):
            k.close()
        return bi if want_index else best

    vals = Loader(oshape, dt, lambda k, idx: window(k, idx, False), cost=x.cost + 4)
    inds = Loader(oshape, "int64", lambda k, idx: window(k, idx, True), cost=x.cost + 4)
    return (vals, inds)


def _avg_pool(L, node, x, kernel_size, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None, **kw):
    """avg_pool{1,2,3}d: the window's sum in float over its in-range part, divided by the window
    size (count_include_pad, padding clipped to the padded input as ATen does) or the count."""
    nsp = len(kernel_size)
    ks = list(kernel_size)
    st = list(stride) if stride else ks
    pd = list(padding) if isinstance(padding, (list, tuple)) else [padding] * nsp
    st, pd = [(v * nsp if len(v) == 1 else v) for v in (st, pd)]
    oshape = [symexpr.parse(s) for s in node["shape"]]
    dt = x.dtype
    isp = x.shape[-nsp:]

    def fn(k, idx):
        lead, opos = idx[:-nsp], idx[-nsp:]
        acc, cnt = k.fresh("as"), k.fresh("ac")
        k.emit(f"float {acc} = 0.0f; long long {cnt} = 0;")
        starts = [o * st[i] - pd[i] for i, o in enumerate(opos)]
        # the divisor with padding: the window clipped to the padded extent
        pool = " * ".join(f"(sf_min((long long)({k.c(sv)} + {ks[i]}), (long long)({k.c(isp[i])} + {pd[i]})) - ({k.c(sv)}))"
                          for i, sv in enumerate(starts)) or "1"
        syms = []
        for i in range(nsp):
            s_ = k.local_sym("_w")
            k.open(f"for (long long {s_} = 0; {s_} < {ks[i]}; ++{s_})")
            syms.append(s_)
        ipos = [sv + syms[i] for i, sv in enumerate(starts)]
        conds = " && ".join(f"({k.c(p)} >= 0 && {k.c(p)} < {k.c(sz)})" for p, sz in zip(ipos, isp))
        k.open(f"if ({conds})")
        v = convert(x(k, lead + ipos), dt, "float32")
        k.emit(f"{acc} += {v}; ++{cnt};")
        k.close()
        for _ in range(nsp):
            k.close()
        if divisor_override:
            div = f"(float){int(divisor_override)}"
        elif count_include_pad:
            div = f"(float)({pool})"
        else:
            div = f"(float){cnt}"
        return k.let(compute_type(dt), round_to(f"({acc} / {div})", dt))
    return Loader(oshape, dt, fn, cost=x.cost + 4)


def _refuse(why):
    def lower(L, node, *a, **kw):
        raise Unsupported(f"op {node['op']}: {why}")
    return lower


def _constant(L, node, *a, **kw):
    vals = node.get("value")
    flat = []

    def walk(v):
        if isinstance(v, list):
            for x in v:
                walk(x)
        else:
            flat.append(v)
    walk(vals)
    shape = [symexpr.parse(s) for s in node["shape"]]
    dt = node["dtype"]
    if len(flat) == 1:
        return Loader(shape, dt, lambda k, idx: _lit(flat[0], dt))
    lits = ", ".join(_lit(v, dt) for v in flat)
    ct = compute_type(dt)
    st = loops.contiguous_strides(shape)

    def fn(k, idx):
        arr = k.fresh("cst")
        k.emit(f"const {ct} {arr}[{len(flat)}] = {{{lits}}};")
        flat_i = sum((i * s for i, s in zip(idx, st)), sympy.Integer(0))
        return k.let(ct, f"{arr}[{k.c(flat_i)}]")
    return Loader(shape, dt, fn)


LOWER: dict[str, Any] = {
    **_unary_map(),
    "aten.add.Tensor": _arith("+"), "aten.add.Scalar": _arith("+"),
    "aten.sub.Tensor": _arith("-"), "aten.sub.Scalar": _arith("-"),
    "aten.mul.Tensor": _arith("*"), "aten.mul.Scalar": _arith("*"),
    "aten.div.Tensor": _div, "aten.div.Scalar": _div, "aten.div.Tensor_mode": _div,
    "aten.div.Scalar_mode": _div,
    "aten.maximum.default": _arith(None, "sf_max"), "aten.minimum.default": _arith(None, "sf_min"),
    "aten.fmax.default": _arith(None, "fmaxf"), "aten.fmin.default": _arith(None, "fminf"),
    "aten.atan2.default": _arith(None, "atan2f"),
    "aten.remainder.Tensor": lambda L, n, a, b, **k: elementwise(n, [a, b], (lambda x, y: f"sf_fmod_py({x}, {y})") if is_float(n["dtype"]) else (lambda x, y: f"sf_mod({x}, {y})")),
    "aten.remainder.Scalar": lambda L, n, a, b, **k: elementwise(n, [a, b], (lambda x, y: f"sf_fmod_py({x}, {y})") if is_float(n["dtype"]) else (lambda x, y: f"sf_mod({x}, {y})")),
    "aten.fmod.Tensor": lambda L, n, a, b, **k: elementwise(n, [a, b], (lambda x, y: f"fmodf({x}, {y})") if is_float(n["dtype"]) else (lambda x, y: f"({x} % {y})")),
    "aten.fmod.Scalar": lambda L, n, a, b, **k: elementwise(n, [a, b], (lambda x, y: f"fmodf({x}, {y})") if is_float(n["dtype"]) else (lambda x, y: f"({x} % {y})")),
    "aten.pow.Tensor_Scalar": _pow, "aten.pow.Tensor_Tensor": _pow,
    "aten.pow.Scalar": lambda L, n, a, b, **k: elementwise(n, [a, b], lambda x, y: f"powf({x}, {y})"),
    "aten.neg.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"(-{a})"),
    "aten.abs.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"fabsf({a})" if _ct(n) == "float" else f"(({a}) < 0 ? -({a}) : ({a}))"),
    "aten.reciprocal.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"(1.0f / {a})" if _ct(n) == "float" else f"(1.0 / {a})"),
    "aten.sigmoid.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"(1.0f / (1.0f + expf(-{a})))" if _ct(n) == "float" else f"(1.0 / (1.0 + exp(-{a})))"),
    "aten.relu.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"(({a}) != ({a}) ? ({a}) : (({a}) > 0 ? ({a}) : 0))"),
    "aten.sign.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"sf_sign({a})" if _ct(n) == "float" else f"(({a} > 0) - ({a} < 0))"),
    "aten.sgn.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"sf_sign({a})"),
    "aten.frac.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"({a} - truncf({a}))"),
    "aten.isnan.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"(({a}) != ({a}))", compute_dtype=x.dtype),
    "aten.isinf.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"isinf({a})", compute_dtype=x.dtype),
    "aten.isfinite.default": lambda L, n, x, **k: elementwise(n, [x], lambda a: f"isfinite({a})", compute_dtype=x.dtype),
    "aten.where.self": _where, "aten.clamp.default": _clamp, "aten.clamp.Tensor": _clamp,
    "aten.clamp_min.default": lambda L, n, x, lo, **k: _clamp(L, n, x, lo, None),
    "aten.clamp_max.default": lambda L, n, x, hi, **k: _clamp(L, n, x, None, hi),
    "aten._to_copy.default": _to_copy, "aten.clone.default": _identity, "aten.alias.default": _identity,
    "aten.lift_fresh_copy.default": _identity, "aten.detach.default": _identity,
    "aten.contiguous.default": _identity, "aten.copy.default": _copy,
    # functionalize writes a mutated input back with copy_ at the end: its value is the source
    "aten.copy_.default": _copy,
    "aten._unsafe_view.default": _view, "aten.view.default": _view, "aten.reshape.default": _view,
    "aten.view_copy.default": _view,
    # a counted loop's collected cat given the count's length (counted_loops.counted_stack): the same
    # elements read with the node's shape; the length is pinned and checked (view_bounds)
    counted_loops.COUNTED_CAT: _view,
    "aten.permute.default": _permute, "aten.transpose.int": _transpose, "aten.t.default": _t,
    "aten.expand.default": _expand, "aten.slice.Tensor": _slice, "aten.select.int": _select,
    "aten.unsqueeze.default": _unsqueeze, "aten.squeeze.dim": _squeeze, "aten.squeeze.dims": _squeeze,
    "aten.squeeze.default": _squeeze, "aten.as_strided.default": _as_strided,
    "aten.unfold.default": _unfold,
    "aten.full.default": _full, "aten.scalar_tensor.default": _scalar_tensor,
    "aten.empty.memory_format": _empty, "aten.empty_strided.default": _empty,
    "aten.full_like.default": lambda L, n, x, v, **k: _full(L, n, None, v),
    "aten.arange.start_step": _arange, "aten.arange.default": _arange, "aten.arange.start": _arange,
    "aten.iota.default": _arange,
    "aten.sum.dim_IntList": _sum, "aten.sum.default": _sum, "aten.mean.dim": _mean,
    "aten.mean.default": _mean, "aten.prod.dim_int": _prod, "aten.prod.default": _prod,
    "prims.var.default": _prims_var,
    "prims.broadcast_in_dim.default": _broadcast_in_dim,
    "prims.convert_element_type.default": _to_copy,
    "aten.amax.default": _amax, "aten.amin.default": _amin,
    "aten.any.dim": _any, "aten.any.dims": _any, "aten.any.default": _any,
    "aten.all.dim": _all, "aten.all.dims": _all, "aten.all.default": _all,
    "aten.argmax.default": _argmax_like("argmax"), "aten.argmin.default": _argmax_like("argmin"),
    "aten.max.dim": _max_dim("max"), "aten.min.dim": _max_dim("min"),
    "aten.max.default": _amax, "aten.min.default": _amin,
    "getitem": _getitem,
    "aten.mm.default": _mm, "aten.bmm.default": _bmm, "aten.addmm.default": _addmm,
    "aten.convolution.default": _convolution,
    "aten.cumsum.default": _cumulative("sum"), "aten.cumprod.default": _cumulative("prod"),
    "aten.sort.default": _sort, "aten.sort.stable": _sort, "aten.topk.default": _topk,
    "aten.index.Tensor": _index, "aten._unsafe_index.Tensor": _index,
    "aten.index_select.default": _index_select, "aten.embedding.default": _embedding,
    "aten.gather.default": _gather, "aten.cat.default": _cat, "aten.constant_pad_nd.default": _pad,
    "aten.flip.default": _flip,
    "aten.scatter.src": _scatter, "aten.scatter.value": _scatter, "aten.scatter.reduce": _scatter,
    "aten.scatter_add.default": _scatter_add, "aten.scatter_reduce.two": _scatter_reduce,
    "aten.index_put.default": _index_put, "aten.bincount.default": _bincount,
    "aten.max_pool2d_with_indices.default": _max_pool, "aten.max_pool3d_with_indices.default": _max_pool,
    "aten.max_pool1d_with_indices.default": _max_pool,
    "aten.avg_pool2d.default": _avg_pool, "aten.avg_pool1d.default": _avg_pool,
    "aten.avg_pool3d.default": _avg_pool,
    "constant": _constant,
    # runtime checks of the reference (one_hot's range check): nothing to compute
    "aten._assert_async.msg": lambda L, n, *a, **k: None, "aten._assert_async.default": lambda L, n, *a, **k: None,
    "aten._assert_scalar.default": lambda L, n, *a, **k: None,
    "aten._assert_tensor_metadata.default": lambda L, n, *a, **k: None,
    "aten.rand.default": _refuse("random numbers (the evaluator cannot match them)"),
    "aten.randn.default": _refuse("random numbers"), "aten.bernoulli.p": _refuse("random numbers"),
    "aten.nonzero.default": dynamic_lower.nonzero, "aten.masked_select.default": dynamic_lower.masked_select,
    "aten.sym_constrain_range_for_size.default": lambda L, n, *a, **k: None,
    rolling.LOOP_OP: lambda L, n, **k: rolling.lower_loop(L, n),  # a rolled Python loop
    dynamic.VALUE_OP: dynamic_lower.item,   # an int .item(), read on the device
}
for _c, _s in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    LOWER[f"aten.{_c}.Tensor"] = _compare(_s)
    LOWER[f"aten.{_c}.Scalar"] = _compare(_s)
for _n, _o in (("and", "and"), ("or", "or"), ("xor", "xor"), ("not", "not")):
    LOWER[f"aten.logical_{_n}.default"] = _logical_bool(_o)
    LOWER[f"aten.bitwise_{_n}.Tensor"] = _logical(_o)
    LOWER[f"aten.bitwise_{_n}.Scalar"] = _logical(_o)
LOWER["aten.bitwise_not.default"] = _logical("not")
for _n, _o in (("rshift", ">>"), ("lshift", "<<")):
    for _ov in ("Scalar", "Tensor"):
        LOWER[f"aten.__{_n}__.{_ov}"] = (lambda o: lambda L, n, a, b, **k: elementwise(
            n, [a, b], lambda x, y: f"(({x}) {o} ({y}))"))(_o)
    _full_name = "right" if _n == "rshift" else "left"
    for _ov in ("Tensor", "Tensor_Scalar", "Scalar_Tensor"):
        LOWER[f"aten.bitwise_{_full_name}_shift.{_ov}"] = LOWER[f"aten.__{_n}__.Tensor"]


def _view_dtype(L, node, x, dtype, **kw):
    from .packed_dtypes import UnsupportedView, view_dtype

    try:
        return view_dtype(x, dtype[1] if isinstance(dtype, tuple) else node["dtype"])
    except UnsupportedView as e:
        raise Unsupported(f"op {node['op']}: {e}") from None


LOWER["aten.view.dtype"] = _view_dtype
