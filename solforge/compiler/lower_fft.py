"""Complex values and the FFT ops (`_fft_r2c`, `_fft_c2r`, `_fft_c2c`) for the lowering.

A complex64 tensor is a `Complex`: two float32 loaders (real and imaginary part) of one shape, so
complex elementwise work inlines like real work and never needs a complex storage type. Views,
copies and linear reductions apply to each part with the real lowering; complex arithmetic
(mul/div/add/sub/neg/conj/exp/polar/abs/angle, view_as_real/view_as_complex) is written here.

A transform of length n along one dim is a DFT as a matmul: the operand's rows (every other dim)
times an n-by-n cos/sin matrix, with real and imaginary parts side by side ([re | im] columns), so
it runs on the generic fp32 matmul (sequential fp32 FMA accumulation; the tolerance of an fp32 FFT
holds: the error grows like n * eps of the sum, not of each term). The matrix is read from a
twiddle table cos/sin(2 pi m / n), m < n, computed once in double and rounded to float; element
(f, t) reads the table at (f * t) mod n, exact integer arithmetic, so no angle is ever large.
O(n^2) per row against cuFFT's O(n log n): correct first, a faster template can replace it.

`lowering(node, env, table)` gives the lowering for a node that has complex operands or results
or is an FFT op (None otherwise); lower.py asks it before its own table.
"""

from __future__ import annotations

from typing import Any, Optional

import sympy

from .ir import refs as _refs
from . import generic, loops, symexpr
from .kernel import convert
from .loops import Loader, prod, view_of

PART = {"complex64": "float32"}


class Unsupported(Exception):
    """Raised as lower.Unsupported by the caller's table wrapper (no import of lower: no cycle)."""


class Complex:
    """A complex tensor as its real and imaginary parts (float32 loaders of the same shape)."""

    def __init__(self, re: Loader, im: Loader):
        self.re, self.im = re, im
        self.shape = list(re.shape)
        self.dtype = "complex64"
        self.cost = max(re.cost, im.cost)


# ── reading operands ─────────────────────────────────────────────────────────────────────────────
def _part(x, i: int):
    if isinstance(x, Complex):
        return x.re if i == 0 else x.im
    if isinstance(x, dict) and "complex" in x:     # a complex Python number from the trace
        return float(x["complex"][i])
    return x if i == 0 else 0.0


def _read(k, x, idx, shape) -> str:
    """x (a real loader, a number, a size expression, a float scalar input) at the output index,
    broadcast, as a float C value."""
    if isinstance(x, Loader):
        nd = len(shape)
        sub = []
        for j, s in enumerate(x.shape):
            i = j + nd - len(x.shape)
            sub.append(sympy.Integer(0) if (loops.same(s, 1) and not loops.same(shape[i], 1)) else idx[i])
        return convert(x(k, sub), x.dtype, "float32")
    if hasattr(x, "emit"):                  # a float computed from sizes (lower.SymFloat)
        return x.emit(k)
    if hasattr(x, "name") and not isinstance(x, sympy.Basic):   # a float scalar input (lower.Scalar)
        return k.scalar(x.name)
    if isinstance(x, sympy.Basic):
        return f"((float)({k.c(x)}))"
    if isinstance(x, bool):
        return "1.0f" if x else "0.0f"
    if isinstance(x, (int, float)):
        return f"((float){float(x)!r})"
    raise Unsupported(f"complex operand of type {type(x).__name__}")


def _out_shape(node):
    return [symexpr.parse(s) for s in node["shape"]]


def _cost(xs) -> int:
    return sum(getattr(x, "cost", 0) + 1 for x in xs if isinstance(x, (Loader, Complex)))


def _complex_ew(node, operands, body) -> Complex:
    """A complex elementwise value: body(k, [(re, im) C values per operand]) -> (re, im) C exprs."""
    shape = _out_shape(node)
    key = object()

    def pair(k, idx):
        ck = ("cplx", id(key), tuple(str(i) for i in idx))
        got = k.lookup(ck)
        if got is None:
            vals = [(_read(k, _part(x, 0), idx, shape), _read(k, _part(x, 1), idx, shape))
                    for x in operands]
            re, im = body(vals)
            got = (k.let("float", re), k.let("float", im))
            k.remember(ck, got)
        return got
    c = _cost(operands) + 2
    return Complex(Loader(shape, "float32", lambda k, idx: pair(k, idx)[0], cost=c),
                   Loader(shape, "float32", lambda k, idx: pair(k, idx)[1], cost=c))


def _real_ew(node, operands, body) -> Loader:
    """A real value of complex operands: body([(re, im)]) -> a float C expression."""
    shape = _out_shape(node)

    def fn(k, idx):
        vals = [(_read(k, _part(x, 0), idx, shape), _read(k, _part(x, 1), idx, shape))
                for x in operands]
        return k.let("float", body(vals))
    return Loader(shape, "float32", fn, cost=_cost(operands) + 2)


def _mul(a, b):
    (ar, ai), (br, bi) = a, b
    return f"(({ar} * {br}) - ({ai} * {bi}))", f"(({ar} * {bi}) + ({ai} * {br}))"


def _div(a, b):
    (ar, ai), (br, bi) = a, b
    d = f"(({br} * {br}) + ({bi} * {bi}))"
    return f"((({ar} * {br}) + ({ai} * {bi})) / {d})", f"((({ai} * {br}) - ({ar} * {bi})) / {d})"


def _is_complex(x) -> bool:
    return isinstance(x, Complex) or (isinstance(x, dict) and "complex" in x)


def _arith(kind):
    def lower(L, node, a, b, alpha=1, **kw):
        if kind in ("add", "sub"):
            s = "+" if kind == "add" else "-"
            al = f"((float){float(alpha)!r})" if alpha not in (1, None) else None

            def body(v):
                (ar, ai), (br, bi) = v
                if al:
                    br, bi = f"({al} * {br})", f"({al} * {bi})"
                return f"({ar} {s} {br})", f"({ai} {s} {bi})"
            return _complex_ew(node, [a, b], body)
        if kind == "mul":
            if not _is_complex(a) or not _is_complex(b):
                # a real factor scales both parts (PyTorch: (a + 0i)(c + di), the same values)
                c, r = (a, b) if _is_complex(a) else (b, a)
                return _complex_ew(node, [c, r], lambda v: (f"({v[0][0]} * {v[1][0]})",
                                                            f"({v[0][1]} * {v[1][0]})"))
            return _complex_ew(node, [a, b], lambda v: _mul(*v))
        # div: by a real number (a size, a Python scalar) PyTorch multiplies by its reciprocal
        if _is_complex(a) and not isinstance(b, (Loader, Complex)) and not _is_complex(b):
            return _complex_ew(node, [a, b], lambda v: (f"({v[0][0]} * (1.0f / {v[1][0]}))",
                                                        f"({v[0][1]} * (1.0f / {v[1][0]}))"))
        return _complex_ew(node, [a, b], lambda v: _div(*v))
    return lower


def _exp(L, node, x, **kw):
    def body(v):
        (r, i), = v
        return f"(expf({r}) * cosf({i}))", f"(expf({r}) * sinf({i}))"
    return _complex_ew(node, [x], body)


def _polar(L, node, mag, ang, **kw):
    return _complex_ew(node, [mag, ang], lambda v: (f"({v[0][0]} * cosf({v[1][0]}))",
                                                    f"({v[0][0]} * sinf({v[1][0]}))"))


def _complex_of(L, node, re, im, **kw):
    return _complex_ew(node, [re, im], lambda v: (v[0][0], v[1][0]))


def _view_as_real(L, node, x, **kw):
    shape = _out_shape(node)

    def fn(k, idx):
        last = sympy.sympify(idx[-1])
        if last.is_number:
            return (x.re if int(last) == 0 else x.im)(k, idx[:-1])
        re, im = x.re(k, idx[:-1]), x.im(k, idx[:-1])
        return k.let("float", f"(({k.c(last)}) == 0 ? {re} : {im})")
    return Loader(shape, "float32", fn, cost=x.cost)


def _view_as_complex(L, node, x, **kw):
    return Complex(loops.select(x, -1, 0), loops.select(x, -1, 1))


def _to_copy(L, node, x, dtype=None, **kw):
    if _is_complex(x):
        if node["dtype"] in PART:
            return x
        return convert_real(x.re, node["dtype"])
    return Complex(convert_real(x, "float32"), Loader(list(x.shape), "float32", lambda k, idx: "0.0f"))


def convert_real(x: Loader, dtype: str) -> Loader:
    return Loader(list(x.shape), dtype, lambda k, idx: k.let(
        "float" if dtype == "float32" else "double", convert(x(k, idx), x.dtype, dtype)), cost=x.cost)


ELEMENTWISE = {
    "aten.add.Tensor": _arith("add"), "aten.add.Scalar": _arith("add"),
    "aten.sub.Tensor": _arith("sub"), "aten.sub.Scalar": _arith("sub"),
    "aten.mul.Tensor": _arith("mul"), "aten.mul.Scalar": _arith("mul"),
    "aten.div.Tensor": _arith("div"), "aten.div.Scalar": _arith("div"),
    "aten.neg.default": lambda L, n, x, **k: _complex_ew(n, [x], lambda v: (f"(-{v[0][0]})", f"(-{v[0][1]})")),
    "aten.conj_physical.default": lambda L, n, x, **k: _complex_ew(n, [x], lambda v: (v[0][0], f"(-{v[0][1]})")),
    "aten._conj.default": lambda L, n, x, **k: _complex_ew(n, [x], lambda v: (v[0][0], f"(-{v[0][1]})")),
    "aten.reciprocal.default": lambda L, n, x, **k: _complex_ew(n, [1.0, x], lambda v: _div(*v)),
    "aten.exp.default": _exp, "aten.polar.default": _polar, "aten.complex.default": _complex_of,
    "aten.abs.default": lambda L, n, x, **k: _real_ew(n, [x], lambda v: f"hypotf({v[0][0]}, {v[0][1]})"),
    "aten.angle.default": lambda L, n, x, **k: _real_ew(n, [x], lambda v: f"atan2f({v[0][1]}, {v[0][0]})"),
    "aten.real.default": lambda L, n, x, **k: x.re, "aten.imag.default": lambda L, n, x, **k: x.im,
    "aten.view_as_real.default": _view_as_real, "aten.view_as_complex.default": _view_as_complex,
    "aten._to_copy.default": _to_copy,
    "prims.convert_element_type.default": _to_copy,
}

# ops that move or linearly combine values: the real lowering applied to each part
PARTWISE = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
            "aten.view_copy.default", "aten.permute.default", "aten.transpose.int", "aten.t.default",
            "aten.expand.default", "aten.slice.Tensor", "aten.select.int", "aten.unsqueeze.default",
            "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.clone.default",
            "aten.alias.default", "aten.detach.default", "aten.contiguous.default",
            "aten.lift_fresh_copy.default", "aten.cat.default", "aten.flip.default",
            "aten.index_select.default", "aten.index.Tensor", "aten._unsafe_index.Tensor",
            "aten.sum.dim_IntList", "aten.sum.default", "aten.mean.dim", "aten.mean.default",
            "aten.copy.default", "aten.copy_.default", "aten.as_strided.default",
            "prims.broadcast_in_dim.default"}


def _map_parts(a, i):
    if isinstance(a, Complex):
        return _part(a, i)
    if isinstance(a, list):
        return [_map_parts(x, i) for x in a]
    return a


def _partwise(table):
    def lower(L, node, *args, **kwargs):
        if node["op"] == "aten.constant_pad_nd.default" and len(args) > 2 and args[2] not in (0, 0.0):
            raise Unsupported("complex padding with a nonzero value")
        fn = table[node["op"]]
        sub = dict(node, dtype="float32")
        parts = [fn(L, sub, *_map_parts(list(args), i), **{k: _map_parts(v, i) for k, v in kwargs.items()})
                 for i in (0, 1)]
        return Complex(*parts)
    return lower


# ── the transforms ──────────────────────────────────────────────────────────────────────────────
def _twiddles(L, n) -> Any:
    """A workspace table [2, n]: cos(2 pi m / n) then sin(2 pi m / n), computed in double."""
    def fn(k, idx):
        arg = f"(6.283185307179586 * (double)({k.c(idx[1])}) / (double)({k.c(n)}))"
        sel = sympy.sympify(idx[0])
        if sel.is_number:
            return k.let("float", f"(float){'cos' if int(sel) == 0 else 'sin'}({arg})")
        return k.let("float", f"(float)(({k.c(sel)}) == 0 ? cos({arg}) : sin({arg}))")
    return L.realize(Loader([sympy.Integer(2), n], "float32", fn))


def _last(x: Loader, dim: int) -> Loader:
    nd = len(x.shape)
    return x if dim == nd - 1 else loops.permute(x, [d for d in range(nd) if d != dim] + [dim])


def _back(x: Loader, dim: int) -> Loader:
    """Undo _last: the transformed dim (now last) back to its place."""
    nd = len(x.shape)
    if dim == nd - 1:
        return x
    order = [d for d in range(nd) if d != dim] + [dim]
    inv = [order.index(d) for d in range(nd)]
    return loops.permute(x, inv)


def _rows(x: Loader, dim: int):
    """x with dim moved last and every other dim flattened: (loader [R, n], lead shape)."""
    y = _last(x, dim)
    lead = list(y.shape[:-1])
    return loops.reshape(y, [prod(lead), y.shape[-1]]), lead


def _stacked(c: Complex, dim: int):
    """[R, 2m]: the real parts then the imaginary parts of each row (m = size along dim)."""
    re, lead = _rows(c.re, dim)
    im, _ = _rows(c.im, dim)
    m = re.shape[1]

    def fn(k, idx):
        r, j = idx
        jc = k.c(j)
        k.push_mask(f"{jc} < {k.c(m)}")
        a = re(k, [r, j])
        k.pop_mask()
        k.push_mask(f"{jc} >= {k.c(m)}")
        b = im(k, [r, j - m])
        k.pop_mask()
        return k.let("float", f"(({jc} < {k.c(m)}) ? {a} : {b})")
    return Loader([re.shape[0], 2 * m], "float32", fn, cost=c.cost + 1), lead, m


def _scale(normalization, n: str) -> str:
    # torch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n
    norm = int(normalization)
    if norm == 1:
        return f" * (float)(1.0 / sqrt((double)({n})))"
    return f" * (float)(1.0 / (double)({n}))" if norm == 2 else ""


def _weights(L, n, K, N, rule, normalization) -> Loader:
    """The DFT matrix [K, N] through the twiddle table: rule(k, j, l) -> (f, t, C sign/part code)
    gives per element the frequency, the position and how to combine cos/sin."""
    tab = _twiddles(L, n)
    tabv = view_of(tab, [2 * n], [1])

    def fn(k, idx):
        j, l = (k.c(i) for i in idx)
        nc = k.c(n)
        f, t, cos_coef, sin_coef = rule(k, j, l, nc)
        m = k.local_sym("_m")
        k.emit(f"const long long {m} = (({f}) * ({t})) % {nc};")
        c = tabv(k, [m])
        s = tabv(k, [m + n])
        sc = _scale(normalization, nc)
        return k.let("float", f"((({cos_coef}) * {c} + ({sin_coef}) * {s}){sc})")
    return Loader([K, N], "float32", fn, cost=3)


def _matmul(L, a: Loader, w: Loader, R, N) -> Any:
    """[R, N] = a @ w in fp32 on the generic SIMT matmul (never a TF32 tier: fp32 FFT tolerance)."""
    a = L.operand(a)
    buf = L.new_buffer("float32", [R, N])
    L.kernels.append(generic.matmul(L.kname("dft"), a, w, "float32", buf, batch_shape=[]))
    return buf


def _split(buf, lead, m, dim) -> Complex:
    """A [R, 2m] DFT result ([re | im] per row) as a Complex with the transformed dim at dim."""
    v = view_of(buf, list(lead) + [2 * m])
    re = loops.slice_(v, -1, 0, m, 1)
    im = loops.slice_(v, -1, m, 2 * m, 1)
    return Complex(_back(re, dim), _back(im, dim))


def _r2c_one(L, x: Loader, dim: int, normalization, onesided: bool, out_len) -> Complex:
    x = convert_real(x, "float32") if x.dtype != "float32" else x
    a, lead = _rows(x, dim)
    n = a.shape[1]
    F = out_len

    def rule(k, j, l, nc):
        fc = k.c(F)
        f = f"(({l}) < {fc} ? ({l}) : ({l}) - {fc})"
        return f, j, f"(({l}) < {fc} ? 1.0f : 0.0f)", f"(({l}) < {fc} ? 0.0f : -1.0f)"
    w = _weights(L, n, n, 2 * F, rule, normalization)
    return _split(_matmul(L, a, w, a.shape[0], 2 * F), lead, F, dim)


def _c2c_one(L, x: Complex, dim: int, normalization, forward: bool) -> Complex:
    a, lead, n = _stacked(x, dim)
    sgn = "-" if forward else ""

    def rule(k, j, l, nc):
        f = f"(({j}) < {nc} ? ({j}) : ({j}) - {nc})"
        t = f"(({l}) < {nc} ? ({l}) : ({l}) - {nc})"
        jr, lr = f"(({j}) < {nc})", f"(({l}) < {nc})"
        # (a + ib) e^{-+i theta}: re = a cos +- b sin, im = b cos -+ a sin
        cos_c = f"(({jr}) == ({lr}) ? 1.0f : 0.0f)"
        sin_c = (f"(({jr}) ? (({lr}) ? 0.0f : {sgn}1.0f) : (({lr}) ? -({sgn}1.0f) : 0.0f))")
        return f, t, cos_c, sin_c
    w = _weights(L, n, 2 * n, 2 * n, rule, normalization)
    return _split(_matmul(L, a, w, a.shape[0], 2 * n), lead, n, dim)


def _c2r_one(L, x: Complex, dim: int, normalization, n) -> Loader:
    a, lead, m = _stacked(x, dim)

    def rule(k, j, l, nc):
        mc = k.c(m)
        f = f"(({j}) < {mc} ? ({j}) : ({j}) - {mc})"
        # Hermitian symmetry: every frequency but 0 and n/2 stands for itself and its mirror
        coef = k.fresh("cf")
        k.emit(f"const float {coef} = ({f} == 0 || 2 * {f} == {nc}) ? 1.0f : "
               f"(2 * {f} < {nc} ? 2.0f : 0.0f);")
        jr = f"(({j}) < {mc})"
        return f, l, f"({jr} ? {coef} : 0.0f)", f"({jr} ? 0.0f : -{coef})"
    w = _weights(L, n, 2 * m, n, rule, normalization)
    buf = _matmul(L, a, w, a.shape[0], n)
    return _back(view_of(buf, list(lead) + [n]), dim)


def _dims(x, dim) -> list:
    nd = len(x.shape)
    return [int(d) % nd for d in (dim if isinstance(dim, (list, tuple)) else [dim])]


def _fft_r2c(L, node, x, dim, normalization, onesided, **kw):
    dims = _dims(x, dim)
    shape = _out_shape(node)
    last = dims[-1]
    c = _r2c_one(L, x, last, normalization, bool(onesided), shape[last])
    for d in reversed(dims[:-1]):
        c = _c2c_one(L, c, d, normalization, True)
    return c


def _fft_c2c(L, node, x, dim, normalization, forward, **kw):
    c = x
    for d in reversed(_dims(x, dim)):
        c = _c2c_one(L, c, d, normalization, bool(forward))
    return c


def _fft_c2r(L, node, x, dim, normalization, last_dim_size, **kw):
    dims = _dims(x, dim)
    c = x
    for d in dims[:-1]:
        c = _c2c_one(L, c, d, normalization, False)
    return _c2r_one(L, c, dims[-1], normalization, sympy.sympify(last_dim_size))


FFT = {"aten._fft_r2c.default": _fft_r2c, "aten._fft_c2c.default": _fft_c2c,
       "aten._fft_c2r.default": _fft_c2r}


def lowering(node: dict, env: dict, table: dict, unsupported=Unsupported) -> Optional[Any]:
    """The lowering of a node that makes or reads complex values (or an FFT op), else None.
    `table` is the real lowering table (for the part-wise ops); `unsupported` the exception the
    caller reports."""
    op = node["op"]
    if op in FFT:
        fn = FFT[op]
    else:
        refs = _refs(node["args"]) + _refs(node["kwargs"])
        if not (str(node.get("dtype") or "").startswith("complex")
                or any(isinstance(env.get(r), Complex) for r in refs)):
            return None
        if str(node.get("dtype") or "").startswith("complex") and node["dtype"] not in PART:
            raise unsupported(f"op {op}: dtype {node['dtype']} (complex64 only)")
        if op in ELEMENTWISE:
            fn = ELEMENTWISE[op]
        elif op in PARTWISE or op == "aten.constant_pad_nd.default":
            fn = _partwise(table)
        else:
            raise unsupported(f"op {op} on complex values has no lowering")

    def run(L, n, *a, **kw):
        try:
            return fn(L, n, *a, **kw)
        except Unsupported as e:
            raise unsupported(f"op {op}: {e}") from None
    return run
