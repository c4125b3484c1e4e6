"""Find softmax(mod(Q K^T)) V in the compiler's traced graph and describe it as an AttentionSpec.

Input: the trace's IR (solforge/compiler/trace.py): {"inputs": [...], "nodes": [{"name", "op",
"args", "kwargs", "dtype", "shape"}], "outputs": [...]}, op names as torch prints them
("aten.bmm.default"), arguments {"ref": value}, {"sym": "axis expr"}, {"scalar": input name},
numbers, lists; shapes are lists of axis-expression strings.

The pattern, read from the graph's structure only:
  bmm(Q', K') -> [view] -> [mul/div by a constant or a float scalar input] -> [div c, tanh, mul c]
  -> [+ bias | where(mask, -inf, s) | where(mask, s, -inf) | + where(mask, -inf, 0)]* -> [cast]
  -> amax(-1) / sub / exp / sum(-1) / div  (the decomposed softmax) -> [cast] -> [view] -> bmm(P, V')
where Q', K', V' are reached from their producers through views (view/reshape/permute/transpose/
expand/unsqueeze/squeeze/slice/select/clone): those fold into strides, a GQA head repeat
(unsqueeze + expand + reshape, i.e. repeat_interleave) into the group size. A mask is either a bool
tensor (an input or any graph value: its strides) or built from aranges and comparisons (the
decomposed triu/tril): then it must be a band j - i in [lower, upper], which becomes the causal
offset and the sliding window. The output is written straight into the layout of the view chain
after the second bmm (transpose + reshape back to (batch, seq, heads * dim)) where there is one.

Every intermediate value of the match must be used only inside it (a reference that also returns
the probabilities is not matched). `match_attention(ir)` returns the matches, each with the node
names it replaces, the node whose value it produces and the spec; `explain(ir)` says why each
bmm pair did not match (one line each), for the coverage report.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Optional

import sympy

from ..ir import refs as _refs
from .attention import AttentionSpec, TensorLayout

VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "unsqueeze", "squeeze",
            "slice", "select", "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "expand_as"}
CAST_OPS = {"_to_copy", "convert_element_type", "to"}
NEG_BIG = -1e30           # a fill value at or below this is -inf for the softmax (finfo.min fills)
HALF = {"float16", "bfloat16"}


class NoMatch(Exception):
    pass


def _op(node: dict) -> str:
    """'aten.bmm.default' -> 'bmm'; 'prims.convert_element_type.default' -> 'convert_element_type'."""
    s = node["op"]
    parts = s.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "prims", "torch"):
        return parts[1] if parts[0] != "torch" else parts[-1]
    return s


# ── size expressions ────────────────────────────────────────────────────────────────────────────
def _sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def parse_size(e) -> sympy.Expr:
    if isinstance(e, (int, sympy.Expr)):
        return sympy.Integer(e) if isinstance(e, int) else e
    if isinstance(e, dict) and "sym" in e:
        e = e["sym"]
    if isinstance(e, float) and e == int(e):
        return sympy.Integer(int(e))
    return _from_ast(ast.parse(str(e).strip(), mode="eval").body)


def _from_ast(n):
    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
        return sympy.Integer(int(n.value)) if float(n.value) == int(n.value) else sympy.Float(n.value)
    if isinstance(n, ast.Name):
        return _sym(n.id)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        return -_from_ast(n.operand)
    if isinstance(n, ast.BinOp):
        a, b = _from_ast(n.left), _from_ast(n.right)
        if isinstance(n.op, ast.Add):
            return a + b
        if isinstance(n.op, ast.Sub):
            return a - b
        if isinstance(n.op, ast.Mult):
            return a * b
        if isinstance(n.op, (ast.FloorDiv, ast.Div)):
            q = sympy.cancel(a / b)
            return q if _is_int(q) else sympy.floor(a / b)
        if isinstance(n.op, ast.Mod):
            return sympy.Mod(a, b)
        if isinstance(n.op, ast.Pow):
            return a ** b
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max"):
        args = [_from_ast(x) for x in n.args]
        return (sympy.Min if n.func.id == "min" else sympy.Max)(*args)
    raise NoMatch(f"size expression {ast.unparse(n)!r} not understood")


def _is_int(e: sympy.Expr) -> bool:
    e = sympy.cancel(e)
    num, den = sympy.fraction(e)
    return den.is_number and den == 1 or (den.is_number and num.is_number and (num / den).is_integer)


def eq(a, b) -> bool:
    return sympy.simplify(parse_size(a) - parse_size(b)) == 0


def to_expr(e: sympy.Expr) -> str:
    """sympy -> axis-expression string (floor(a/b) as a // b)."""
    e = sympy.sympify(e)
    if e.is_Integer:
        return str(int(e))
    if isinstance(e, sympy.floor):
        n, d = sympy.fraction(sympy.together(e.args[0]))
        return f"({to_expr(n)}) // ({to_expr(d)})"
    if e.is_Add:
        terms = [to_expr(t) for t in e.args]
        return "(" + " + ".join(terms) + ")"
    if e.is_Mul:
        num, den = sympy.fraction(e)
        if den != 1:
            return f"({to_expr(num)}) // ({to_expr(den)})"
        return "*".join(f"({to_expr(t)})" if t.is_Add else to_expr(t) for t in e.args)
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        return f"({to_expr(e.base)}) ** {int(e.exp)}"
    if e.is_Symbol:
        return e.name
    if isinstance(e, (sympy.Min, sympy.Max)):
        return f"{'min' if isinstance(e, sympy.Min) else 'max'}({', '.join(to_expr(a) for a in e.args)})"
    if e.is_Number and e == int(e):
        return str(int(e))
    raise NoMatch(f"size {e} has no axis-expression form")


# ── strided views ──────────────────────────────────────────────────────────────────────────────
SubDim = tuple  # (size, stride) sympy


@dataclass
class Layout:
    """A view of `origin` (a graph value, contiguous in memory): logical dim k is the row-major
    combination of dims[k]'s (size, stride) sub-dims, element offset `offset`."""
    origin: str
    offset: sympy.Expr
    dims: list          # list[list[SubDim]]

    @property
    def shape(self) -> list:
        return [sympy.Mul(*[s for s, _ in g]) for g in self.dims]


def contiguous(origin: str, shape: list) -> Layout:
    shape = [parse_size(s) for s in shape]
    dims, st = [], sympy.Integer(1)
    for s in reversed(shape):
        dims.append([(s, st)])
        st = st * s
    return Layout(origin, sympy.Integer(0), list(reversed(dims)))


def _flat(groups: list) -> list:
    return [sd for g in groups for sd in g if not eq(sd[0], 1)]


def regroup(subdims: list, sizes: list) -> list:
    """Row-major sub-dims re-split into dims of `sizes` (sub-dims are split where a boundary falls
    inside one). NoMatch where a size does not divide."""
    subs = [(parse_size(a), parse_size(b)) for a, b in subdims if not eq(a, 1)]
    out = []
    for n in sizes:
        n = parse_size(n)
        g, prod = [], sympy.Integer(1)
        while not eq(prod, n):
            if not subs:
                raise NoMatch(f"view: sizes do not line up at {n}")
            size, st = subs.pop(0)
            need = sympy.cancel(n / prod)
            if eq(size, need) or _is_int(sympy.cancel(need / size)) and not eq(need / size, 1):
                g.append((size, st))
                prod = prod * size
            elif _is_int(sympy.cancel(size / need)):
                rest = sympy.cancel(size / need)
                g.append((need, st * rest))
                subs.insert(0, (rest, st))
                prod = prod * need
            else:
                raise NoMatch(f"view: {size} and {need} do not divide")
        out.append(g if g else [(sympy.Integer(1), sympy.Integer(0))])
    if subs:
        raise NoMatch("view: sizes do not line up")
    return out


def collapse(g: list) -> Optional[tuple]:
    """One (size, stride) for a group whose sub-dims are mergeable (contiguous-compatible), else None."""
    subs = [sd for sd in g if not eq(sd[0], 1)]
    if not subs:
        return sympy.Integer(1), sympy.Integer(0)
    size, st = subs[-1]
    for s2, st2 in reversed(subs[:-1]):
        if eq(st, 0) and eq(st2, 0):
            size = size * s2
            continue
        if not eq(st2, st * size):
            return None
        size = size * s2
    return size, st


def apply_view(lay: Layout, node: dict, out_shape: list) -> Layout:
    op, args = _op(node), node["args"]
    dims = [list(g) for g in lay.dims]
    nd = len(dims)
    if op in ("clone", "contiguous", "alias", "detach", "lift_fresh_copy"):
        return lay
    if op in ("view", "_unsafe_view", "reshape"):
        shape = [parse_size(s) for s in out_shape]
        return Layout(lay.origin, lay.offset, regroup(_flat(dims), shape))
    if op == "permute":
        perm = [int(p) % nd for p in args[1]]
        return Layout(lay.origin, lay.offset, [dims[p] for p in perm])
    if op == "transpose":
        a, b = int(args[1]) % nd, int(args[2]) % nd
        dims[a], dims[b] = dims[b], dims[a]
        return Layout(lay.origin, lay.offset, dims)
    if op == "t":
        return Layout(lay.origin, lay.offset, dims[::-1])
    if op == "unsqueeze":
        d = int(args[1])
        d = d % (nd + 1) if d < 0 else d
        dims.insert(d, [(sympy.Integer(1), sympy.Integer(0))])
        return Layout(lay.origin, lay.offset, dims)
    if op == "squeeze":
        which = args[1] if len(args) > 1 else None
        if which is None:
            keep = [g for g in dims if not eq(sympy.Mul(*[s for s, _ in g]), 1)]
        else:
            which = [which] if isinstance(which, int) else list(which)
            drop = {int(w) % nd for w in which if eq(sympy.Mul(*[s for s, _ in dims[int(w) % nd]]), 1)}
            keep = [g for i, g in enumerate(dims) if i not in drop]
        return Layout(lay.origin, lay.offset, keep)
    if op in ("expand", "expand_as"):
        shape = [parse_size(s) for s in out_shape]
        lead = len(shape) - nd
        new = [[(shape[i], sympy.Integer(0))] for i in range(lead)]
        for i, g in enumerate(dims):
            cur = sympy.Mul(*[s for s, _ in g])
            tgt = shape[lead + i]
            new.append(g if eq(cur, tgt) else [(tgt, sympy.Integer(0))])
        return Layout(lay.origin, lay.offset, new)
    if op in ("slice", "select"):
        d = int(args[1]) % nd
        g = [sd for sd in dims[d] if not eq(sd[0], 1)]
        size = sympy.Mul(*[s for s, _ in g]) if g else sympy.Integer(1)
        if op == "select":
            idx = parse_size(args[2])
            if len(g) > 1:
                raise NoMatch("select on a merged dim")
            st = g[0][1] if g else sympy.Integer(0)
            if idx.is_number and idx < 0:
                idx = idx + size
            return Layout(lay.origin, lay.offset + idx * st, dims[:d] + dims[d + 1:])
        start = parse_size(args[2]) if len(args) > 2 and args[2] is not None else sympy.Integer(0)
        step = parse_size(args[4]) if len(args) > 4 else sympy.Integer(1)
        new_size = parse_size(out_shape[d])
        if eq(start, 0) and eq(step, 1) and eq(new_size, size):
            return lay
        if len(g) > 1:
            raise NoMatch("slice of a merged dim")
        st = g[0][1] if g else sympy.Integer(0)
        if start.is_number and start < 0:
            start = start + size
        dims[d] = [(new_size, st * step)]
        return Layout(lay.origin, lay.offset + start * st, dims)
    raise NoMatch(f"{op} is not a view")


# ── the graph ──────────────────────────────────────────────────────────────────────────────────
class Graph:
    def __init__(self, ir: dict):
        self.ir = ir
        self.inputs = {i["name"]: i for i in ir["inputs"]}
        self.nodes = {n["name"]: n for n in ir["nodes"]}
        self.users: dict[str, list[str]] = {}
        for n in ir["nodes"]:
            for r in _refs(n.get("args", [])) + _refs(list(n.get("kwargs", {}).values())):
                self.users.setdefault(r, []).append(n["name"])
        for r in _refs(ir.get("outputs", [])):
            self.users.setdefault(r, []).append("<output>")
        # a node nothing reads (a dead cast the trace kept) is nobody's user
        dead = True
        while dead:
            dead = {n for n in self.nodes if not self.users.get(n) and n in
                    {u for us in self.users.values() for u in us}}
            for k in list(self.users):
                if any(u in dead for u in self.users[k]):
                    self.users[k] = [u for u in self.users[k] if u not in dead]

    def shape(self, name: str) -> list:
        n = self.nodes.get(name) or self.inputs.get(name)
        return list(n.get("shape") or [])

    def dtype(self, name: str) -> str:
        n = self.nodes.get(name) or self.inputs.get(name)
        return n.get("dtype")

    def node(self, name: str) -> Optional[dict]:
        return self.nodes.get(name)

    def only_user(self, name: str) -> Optional[str]:
        u = self.users.get(name, [])
        return u[0] if len(set(u)) == 1 and len(u) >= 1 else None


def _ref(a) -> Optional[str]:
    return a["ref"] if isinstance(a, dict) and "ref" in a else None


def trace_view(g: Graph, name: str) -> tuple:
    """Follow views back from `name` to the value they read: (Layout of `name` over it, the view
    nodes passed)."""
    chain = []
    cur = name
    while True:
        n = g.node(cur)
        if n is None or _op(n) not in VIEW_OPS:
            break
        if _op(n) == "clone" and n.get("kwargs", {}).get("memory_format") not in (None, "contiguous_format"):
            break
        chain.append(cur)
        cur = _ref(n["args"][0])
        if cur is None:
            raise NoMatch(f"{n['op']} of a non-tensor")
    lay = contiguous(cur, g.shape(cur))
    for v in reversed(chain):
        lay = apply_view(lay, g.node(v), g.shape(v))
    return lay, chain


def broadcast_to(lay: Layout, shape: list) -> Layout:
    """Implicit broadcasting of an elementwise operand to `shape` (right-aligned, size 1 -> stride 0)."""
    shape = [parse_size(s) for s in shape]
    lead = len(shape) - len(lay.dims)
    if lead < 0:
        raise NoMatch("operand of higher rank than the scores")
    new = [[(shape[i], sympy.Integer(0))] for i in range(lead)]
    for i, gdim in enumerate(lay.dims):
        cur = sympy.Mul(*[s for s, _ in gdim])
        tgt = shape[lead + i]
        new.append(gdim if eq(cur, tgt) else [(tgt, sympy.Integer(0))])
    return Layout(lay.origin, lay.offset, new)


# ── iota masks: sets of d = j - i ──────────────────────────────────────────────────────────────
INF = None


@dataclass
class Band:
    """{(i, j): lo <= j - i <= hi} as a union of intervals (None = unbounded); `all` = every (i, j)."""
    ivs: list   # [(lo, hi)]

    @staticmethod
    def full():
        return Band([(INF, INF)])

    def complement(self) -> "Band":
        if not self.ivs:
            return Band.full()
        if len(self.ivs) == 1:
            lo, hi = self.ivs[0]
            out = []
            if lo is not INF:
                out.append((INF, lo - 1))
            if hi is not INF:
                out.append((hi + 1, INF))
            return Band(out)
        if len(self.ivs) == 2:
            (a, b), (c, d) = self.ivs
            if a is INF and d is INF:
                return Band([(b + 1, c - 1)])
        raise NoMatch("mask: not a band around the diagonal")

    def intersect(self, o: "Band") -> "Band":
        out = []
        for lo1, hi1 in self.ivs:
            for lo2, hi2 in o.ivs:
                lo = _bound(lo1, lo2, max)
                hi = _bound(hi1, hi2, min)
                out.append((lo, hi))
        return Band(out)

    def union(self, o: "Band") -> "Band":
        return self.complement().intersect(o.complement()).complement()


def _bound(a, b, pick):
    if a is INF:
        return b
    if b is INF:
        return a
    if eq(a, b):
        return a
    d = sympy.simplify(a - b)
    if d.is_number:
        return a if (d > 0) == (pick is max) else b
    raise NoMatch("mask: two symbolic bounds on one side")


@dataclass
class Affine:
    """value = sum(coef[p] * index along dim p) + c, dims counted from the right (0: the last dim,
    j of the scores; 1: the one before, i)."""
    coef: dict
    c: sympy.Expr


_FLIP = {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}


class _MaskEval:
    """Evaluates a mask built from aranges: an Affine for index tensors, a Band (the (i, j) where
    the bool is True) for predicates, ("const", v) for constants."""

    def __init__(self, g: Graph):
        self.g = g
        self.used: set[str] = set()

    def value(self, a):
        if isinstance(a, bool):
            return Band.full() if a else Band([])
        if isinstance(a, (int, float)):
            return ("const", a)
        if isinstance(a, dict) and "sym" in a:
            return ("const", parse_size(a["sym"]))
        if isinstance(a, dict) and "float" in a:
            return ("const", float(a["float"]))
        name = _ref(a)
        if name is None or name not in self.g.nodes:
            raise NoMatch("mask: reads a tensor that is not built from aranges")
        self.used.add(name)
        n = self.g.node(name)
        op, args = _op(n), n["args"]
        if op == "arange":
            start, end = (args[0], args[1]) if len(args) >= 2 else (0, args[0])
            if len(args) >= 3 and args[2] != 1:
                raise NoMatch("mask: arange with a step")
            return Affine({0: sympy.Integer(1)}, parse_size(start))
        if op == "slice":
            shp_in, shp_out = self.g.shape(_ref(args[0])), n["shape"]
            if not all(eq(a, b) for a, b in zip(shp_in, shp_out)):
                raise NoMatch("mask: a slice of an index tensor")
            return self.value(args[0])
        if op in ("unsqueeze", "view", "_unsafe_view", "reshape", "expand", "clone", "alias", "squeeze") or op in CAST_OPS:
            v = self.value(args[0])
            if isinstance(v, Affine) and op not in CAST_OPS and op not in ("clone", "alias", "expand"):
                return Affine(self._moved(v.coef, self.g.shape(_ref(args[0])), n["shape"]), v.c)
            return v
        if op in ("full", "scalar_tensor"):
            val = args[1] if op == "full" else args[0]
            if isinstance(val, dict) and "float" in val:
                val = float(val["float"])
            if isinstance(val, bool) or n.get("dtype") == "bool":
                return Band.full() if val else Band([])
            return ("const", val)
        if op in ("add", "sub", "mul", "neg"):
            if op == "neg":
                return self._lin(self.value(args[0]), ("const", -1), "mul")
            x, y = self.value(args[0]), self.value(args[1])
            if isinstance(x, Band) and isinstance(y, Band) and op == "mul":
                return x.intersect(y)
            alpha = n.get("kwargs", {}).get("alpha", 1)
            if alpha != 1:
                y = self._lin(y, ("const", alpha), "mul")
            return self._lin(x, y, op)
        if op in ("ge", "gt", "le", "lt"):
            return self._cmp(self.value(args[0]), self.value(args[1]), op)
        if op in ("logical_and", "bitwise_and"):
            return self.value(args[0]).intersect(self.value(args[1]))
        if op in ("logical_or", "bitwise_or"):
            return self.value(args[0]).union(self.value(args[1]))
        if op in ("logical_not", "bitwise_not"):
            return self.value(args[0]).complement()
        if op == "where":
            c, x, y = self.value(args[0]), self.value(args[1]), self.value(args[2])
            if isinstance(c, Band) and isinstance(x, Band) and isinstance(y, Band):
                return c.intersect(x).union(c.complement().intersect(y))
            raise NoMatch("mask: where over values")
        raise NoMatch(f"mask: {op} in an arange-built mask")

    @staticmethod
    def _moved(coef: dict, in_shape, out_shape) -> dict:
        """Positions (from the right) of the index dims after a reshape that only adds or drops
        size-1 dims."""
        ins = [parse_size(x) for x in in_shape][::-1]
        outs = [parse_size(x) for x in out_shape][::-1]
        big_in = [k for k, x in enumerate(ins) if not eq(x, 1)]
        big_out = [k for k, x in enumerate(outs) if not eq(x, 1)]
        if len(big_in) != len(big_out) or any(not eq(ins[a], outs[b]) for a, b in zip(big_in, big_out)):
            raise NoMatch("mask: an index tensor is reshaped")
        out = {}
        for p, cf in coef.items():
            if p not in big_in:
                if not eq(ins[p], 1):
                    raise NoMatch("mask: index dim lost")
                continue   # an index over one element is the constant 0
            out[big_out[big_in.index(p)]] = cf
        return out

    @staticmethod
    def _lin(x, y, op):
        if isinstance(x, tuple) and isinstance(y, tuple):
            a, b = x[1], y[1]
            return ("const", a + b if op == "add" else a - b if op == "sub" else a * b)
        if isinstance(x, Band) or isinstance(y, Band):
            raise NoMatch("mask: arithmetic on a predicate")
        if op == "mul":
            if isinstance(x, tuple):
                x, y = y, x
            if not isinstance(y, tuple):
                raise NoMatch("mask: product of two index tensors")
            k = _const(y[1])
            return Affine({p: cf * k for p, cf in x.coef.items()}, x.c * k)
        sign = 1 if op == "add" else -1
        if isinstance(y, tuple):
            return Affine(dict(x.coef), x.c + sign * _const(y[1]))
        if isinstance(x, tuple):
            return Affine({p: sign * cf for p, cf in y.coef.items()}, _const(x[1]) + sign * y.c)
        coef = dict(x.coef)
        for p, cf in y.coef.items():
            coef[p] = coef.get(p, 0) + sign * cf
        return Affine(coef, x.c + sign * y.c)

    def _cmp(self, x, y, op):
        if isinstance(y, Affine) and not isinstance(x, Affine):
            x, y, op = y, x, _FLIP[op]
        if not isinstance(x, Affine):
            raise NoMatch("mask: comparison of constants")
        if isinstance(y, Affine):
            x, y = self._lin(x, y, "sub"), ("const", 0)
        coef = {p: cf for p, cf in x.coef.items() if not eq(cf, 0)}
        cj, ci = coef.pop(0, sympy.Integer(0)), coef.pop(1, sympy.Integer(0))
        if coef:
            raise NoMatch("mask: an index along a batch or head dim")
        if not eq(ci, -cj) or eq(cj, 0):
            raise NoMatch("mask: not a condition on j - i")
        k = _const(y[1]) - x.c
        if not eq(cj, 1):
            if not eq(cj, -1):
                raise NoMatch("mask: j - i scaled")
            k, op = -k, _FLIP[op]
        # (j - i) op k
        if op == "ge":
            return Band([(k, INF)])
        if op == "gt":
            return Band([(k + 1, INF)])
        if op == "le":
            return Band([(INF, k)])
        return Band([(INF, k - 1)])


def _const(v) -> sympy.Expr:
    if isinstance(v, float):
        if v != int(v):
            raise NoMatch("mask: fractional offset")
        return sympy.Integer(int(v))
    return parse_size(v) if not isinstance(v, sympy.Expr) else v


# ── the matcher ─────────────────────────────────────────────────────────────────────────────────
@dataclass
class AttentionMatch:
    nodes: set              # node names the segment replaces
    output: str             # the node whose value it produces (in that node's shape, contiguous)
    spec: AttentionSpec
    notes: list = field(default_factory=list)


def _num(a) -> Optional[float]:
    if isinstance(a, bool):
        return None
    if isinstance(a, (int, float)):
        return float(a)
    if isinstance(a, dict) and "float" in a:
        return float(a["float"])
    return None


def _scalar_expr(a) -> Optional[str]:
    """A multiplier as an expression: a number, a float scalar input, or a size."""
    v = _num(a)
    if v is not None:
        return repr(v)
    if isinstance(a, dict) and "scalar" in a:
        return a["scalar"]
    if isinstance(a, dict) and "sym" in a:
        return f"({a['sym']})"
    if isinstance(a, dict) and "symf" in a:   # a float from scalars and sizes, as C: "((double)f_scaling)"
        import re
        text = str(a["symf"]).replace("(double)", "").replace("(float)", "")
        for n in a.get("fnames", []):
            text = re.sub(rf"\bf_{re.escape(n)}\b", n, text)
        try:
            from ...problem import axis_expr
            axis_expr.parse(text)
        except Exception:  # noqa: BLE001 - C the launch evaluator cannot read (sqrt, casts...)
            return None
        return f"({text})"
    return None


def _fill_value(g: Graph, a) -> Optional[float]:
    """The constant a where-branch holds (a number, scalar_tensor, full, or a cast of one)."""
    v = _num(a)
    if v is not None:
        return v
    name = _ref(a)
    n = g.node(name) if name else None
    if n is None:
        return None
    op = _op(n)
    if op == "scalar_tensor":
        return _num(n["args"][0])
    if op == "constant" and not isinstance(n.get("value"), list):
        return _num(n.get("value"))
    if op == "constant" and n.get("value") is not None and _numel(n["value"]) == 1:
        return _num(_first(n["value"]))
    if op == "full":
        return _num(n["args"][1])
    if op in CAST_OPS or op in ("expand", "view", "unsqueeze", "lift_fresh_copy", "clone", "alias"):
        return _fill_value(g, n["args"][0])
    return None


def _numel(v) -> int:
    return sum(_numel(x) for x in v) if isinstance(v, list) else 1


def _first(v):
    return _first(v[0]) if isinstance(v, list) else v


def _is_neg_inf(v: Optional[float]) -> bool:
    return v is not None and (v == -math.inf or v <= NEG_BIG)


class _Builder:
    def __init__(self, g: Graph, bmm1: str):
        self.g = g
        self.bmm1 = bmm1
        self.nodes: set[str] = {bmm1}
        self.scale: list[str] = []
        self.softcap: Optional[str] = None
        self.bias: Optional[Layout] = None
        self.bias_dtype: Optional[str] = None
        self.mask: Optional[Layout] = None
        self.mask_keep = False
        self.band: Optional[Band] = None
        self.round = False
        self.stage = 0          # 0 scale, 1 softcap done, 2 bias/mask seen
        self.mask_nodes: set[str] = set()
        self.empty_nan = True
        self.optional: set[str] = set()   # nodes replaced only if nothing outside reads them


def match_attention(ir: dict) -> list[AttentionMatch]:
    """Every attention pattern in the graph (at most one per bmm pair)."""
    out = []
    for m in _scan(Graph(ir)):
        if isinstance(m, AttentionMatch):
            out.append(m)
    return out


def explain(ir: dict) -> list[str]:
    """For each bmm that starts a score chain: 'matched' or why not (one line)."""
    return [m if isinstance(m, str) else f"{m.output}: attention {m.notes}" for m in _scan(Graph(ir))]


def _scan(g: Graph):
    for name, n in g.nodes.items():
        if _op(n) != "bmm":
            continue
        try:
            yield _match_from(g, name)
        except NoMatch as e:
            yield f"{name}: {e}"
        except Exception as e:  # noqa: BLE001 - a graph this matcher misreads: no match, never a crash
            yield f"{name}: matcher error {type(e).__name__}: {str(e)[:120]}"


def _match_from(g: Graph, bmm1: str) -> AttentionMatch:
    b = _Builder(g, bmm1)
    n1 = g.node(bmm1)
    qname, kname = _ref(n1["args"][0]), _ref(n1["args"][1])
    in_dt = g.dtype(bmm1)
    BH, SQ, SK = [parse_size(s) for s in g.shape(bmm1)]

    # ---- the score chain ----
    cur = bmm1
    while True:
        users = g.users.get(cur, [])
        n = g.node(users[0]) if len(set(users)) == 1 else None
        if n is None:
            # the softmax head: amax and sub of the same value
            ops = sorted(_op(g.node(u)) for u in set(users) if g.node(u))
            if len(set(users)) == len(ops) and ops in (["amax", "sub"], ["amax", "eq", "sub"]):
                break
            raise NoMatch(f"scores {cur} used by {len(set(users))} nodes ({', '.join(ops) or 'outputs'})")
        op = _op(n)
        name = n["name"]
        if op in ("view", "_unsafe_view", "reshape", "clone", "alias"):
            sh = [parse_size(s) for s in n["shape"]]
            if len(sh) < 2 or not (eq(sh[-1], SK) and eq(sh[-2], SQ)) or not eq(sympy.Mul(*sh[:-2]) if sh[:-2] else 1, BH):
                raise NoMatch(f"scores reshaped to {n['shape']}")
        elif op in CAST_OPS:
            pass
        elif op in ("mul", "div") and _scalar_expr(n["args"][1]) is not None and _ref(n["args"][0]) == cur:
            c = _scalar_expr(n["args"][1])
            nxt = g.node(g.only_user(name) or "") if g.only_user(name) else None
            if op == "div" and nxt is not None and _op(nxt) == "tanh":
                cap_user = g.node(g.only_user(nxt["name"]) or "")
                if cap_user is None or _op(cap_user) != "mul" or _scalar_expr(cap_user["args"][1]) != c:
                    raise NoMatch("tanh without the softcap's mul by the same constant")
                if b.stage >= 1 or b.softcap is not None:
                    raise NoMatch("softcap after a bias or mask, or twice")
                b.softcap = c
                b.stage = 1
                b.round |= g.dtype(name) in HALF
                b.nodes |= {name, nxt["name"], cap_user["name"]}
                cur = cap_user["name"]
                continue
            if b.stage >= 1:
                raise NoMatch("a scale after the softcap, bias or mask")
            b.scale.append(c if op == "mul" else f"1.0 / {c}")
            b.round |= g.dtype(name) in HALF
        elif op == "mul" and _scalar_expr(n["args"][0]) is not None and _ref(n["args"][1]) == cur:
            if b.stage >= 1:
                raise NoMatch("a scale after the softcap, bias or mask")
            b.scale.append(_scalar_expr(n["args"][0]))
            b.round |= g.dtype(name) in HALF
        elif op == "add":
            other = n["args"][1] if _ref(n["args"][0]) == cur else n["args"][0]
            if n.get("kwargs", {}).get("alpha", 1) != 1:
                raise NoMatch("add with alpha")
            _additive(b, other, n["shape"])
            b.round |= g.dtype(name) in HALF
        elif op == "where":
            c, x, y = n["args"]
            if _ref(y) == cur and _is_neg_inf(_fill_value(g, x)):
                _mask(b, c, n["shape"], keep=False)
            elif _ref(x) == cur and _is_neg_inf(_fill_value(g, y)):
                _mask(b, c, n["shape"], keep=True)
            else:
                raise NoMatch("where that is not a -inf fill")
        elif op == "masked_fill":
            if not _is_neg_inf(_fill_value(g, n["args"][2])):
                raise NoMatch("masked_fill with a finite value")
            _mask(b, n["args"][1], n["shape"], keep=False)
        else:
            raise NoMatch(f"{op} in the score chain")
        b.nodes.add(name)
        cur = name

    # ---- the decomposed softmax ----
    users = set(g.users[cur])
    amax = next(g.node(u) for u in users if _op(g.node(u)) == "amax")
    sub = next(g.node(u) for u in users if _op(g.node(u)) == "sub")
    scores = cur
    safe = next((g.node(u) for u in users if _op(g.node(u)) == "eq"), None)
    last = len(g.shape(cur)) - 1
    if [int(d) % (last + 1) for d in amax["args"][1]] != [last] or _ref(sub["args"][1]) != amax["name"] \
            or _ref(sub["args"][0]) != cur or g.only_user(amax["name"]) != sub["name"]:
        raise NoMatch("not a softmax over the last dim")
    exp = g.node(g.only_user(sub["name"]) or "")
    if exp is None or _op(exp) != "exp":
        raise NoMatch("softmax without exp")
    eu = set(g.users.get(exp["name"], []))
    ssum = next((g.node(u) for u in eu if g.node(u) and _op(g.node(u)) == "sum"), None)
    div = next((g.node(u) for u in eu if g.node(u) and _op(g.node(u)) == "div"), None)
    if len(eu) != 2 or ssum is None or div is None or [int(d) % (last + 1) for d in ssum["args"][1]] != [last] \
            or _ref(div["args"][0]) != exp["name"] or _ref(div["args"][1]) != ssum["name"] \
            or g.only_user(ssum["name"]) != div["name"]:
        raise NoMatch("softmax's sum / div not found")
    b.nodes |= {amax["name"], sub["name"], exp["name"], ssum["name"], div["name"]}
    empty_nan = True
    if safe is not None:   # torch's _safe_softmax: rows with every score -inf give 0, not NaN
        b.nodes |= _safe_softmax_tail(g, scores, safe, div)
        div = g.node(next(n for n in b.nodes if _op(g.node(n) or {"op": ""}) == "where"
                          and _ref(g.node(n)["args"][2]) == div["name"]))
        empty_nan = False
    b.empty_nan = empty_nan

    # ---- P -> second bmm ----
    cur = div["name"]
    while True:
        u = g.only_user(cur)
        n = g.node(u) if u else None
        if n is None:
            raise NoMatch("probabilities used outside the attention (or by several nodes)")
        op = _op(n)
        if op == "bmm":
            if _ref(n["args"][0]) != cur:
                raise NoMatch("probabilities are the second bmm's right operand")
            bmm2 = n["name"]
            break
        if op in CAST_OPS or op in ("view", "_unsafe_view", "reshape", "expand", "clone", "alias", "unsqueeze"):
            if op in ("expand",) and not all(eq(a, c) for a, c in zip(n["shape"], g.shape(cur))) \
                    and len(n["shape"]) == len(g.shape(cur)):
                raise NoMatch("probabilities broadcast")
            b.nodes.add(n["name"])
            cur = n["name"]
            continue
        raise NoMatch(f"{op} between the softmax and the second bmm")
    b.nodes.add(bmm2)
    sh2 = [parse_size(s) for s in g.shape(cur)]
    if len(sh2) != 3 or not (eq(sh2[0], BH) and eq(sh2[1], SQ) and eq(sh2[2], SK)):
        raise NoMatch("probabilities reshaped")
    vname = _ref(g.node(bmm2)["args"][1])
    p_dt = g.dtype(cur)
    return _finish(b, qname, kname, vname, bmm2, in_dt, p_dt, BH, SQ, SK)


def _safe_softmax_tail(g: Graph, scores: str, eqn: dict, div: dict) -> set:
    """where(not any(not (s == -inf), -1), 0, softmax(s)): the nodes of that guard."""
    if _num(eqn["args"][1]) != -math.inf or _ref(eqn["args"][0]) != scores:
        raise NoMatch("eq on the scores that is not the safe-softmax guard")
    chain, cur = [eqn["name"]], eqn["name"]
    want = ["logical_not", "any", "logical_not"]
    for w in want:
        u = g.only_user(cur)
        n = g.node(u) if u else None
        if n is None or _op(n) != w:
            raise NoMatch("safe-softmax guard not recognised")
        chain.append(n["name"])
        cur = n["name"]
    wh = g.node(g.only_user(cur) or "")
    if wh is None or _op(wh) != "where" or _ref(wh["args"][2]) != div["name"]:
        raise NoMatch("safe-softmax guard not recognised")
    zero = wh["args"][1]
    zn = g.node(_ref(zero) or "")
    if _fill_value(g, zero) != 0.0 and not (zn is not None and _op(zn) in ("full_like", "zeros_like")
                                            and _num(zn["args"][1] if len(zn["args"]) > 1 else 0) == 0.0):
        raise NoMatch("safe-softmax guard fills something other than 0")
    if set(g.users.get(div["name"], [])) - {wh["name"]} - ({zn["name"]} if zn else set()):
        raise NoMatch("probabilities used outside the attention")
    return set(chain) | {wh["name"]} | ({zn["name"]} if zn else set())


def _additive(b: _Builder, other, shape) -> None:
    g = b.g
    name = _ref(other)
    if name is None:
        raise NoMatch("add of a constant to the scores")
    n = g.node(name)
    passed = {name}
    if n is not None and _op(n) in CAST_OPS | {"expand", "view", "unsqueeze", "_unsafe_view"}:
        inner = n
        while inner is not None and _op(inner) in CAST_OPS | {"expand", "view", "unsqueeze", "_unsafe_view"}:
            inner = g.node(_ref(inner["args"][0]) or "")
            if inner is not None:
                passed.add(inner["name"])
        if inner is not None and _op(inner) == "where":
            n = inner
    if n is not None and _op(n) == "where":
        c, x, y = n["args"]
        fx, fy = _fill_value(g, x), _fill_value(g, y)
        if _is_neg_inf(fx) and fy == 0.0:
            _mask(b, c, shape, keep=False, via=passed)
            return
        if _is_neg_inf(fy) and fx == 0.0:
            _mask(b, c, shape, keep=True, via=passed)
            return
    if b.bias is not None:
        raise NoMatch("two additive biases")
    lay, chain = trace_view(g, name)
    b.bias = broadcast_to(lay, shape)
    b.bias_dtype = g.dtype(lay.origin)
    b.stage = 2
    b.optional |= set(chain)


def _exclusive(g: Graph, name: str, inside: set) -> bool:
    return all(u in inside for u in g.users.get(name, []))


def _mask(b: _Builder, cond, shape, keep: bool, via: Optional[set] = None) -> None:
    """A -inf fill where `cond` (keep=False) or where not `cond` (keep=True)."""
    g = b.g
    name = _ref(cond)
    if name is None:
        raise NoMatch("mask is not a tensor")
    ev = _MaskEval(g)
    try:
        band = ev.value(cond)
    except NoMatch as e:
        band = None
        why = str(e)
    if isinstance(band, Band):
        keep_band = band if keep else band.complement()
        b.band = keep_band if b.band is None else b.band.intersect(keep_band)
        extra = set(ev.used) | (via or set())
        # the arange nodes go with the segment where nothing else reads them
        b.mask_nodes |= extra
        return
    # a bool tensor read through views
    if g.dtype(name) != "bool":
        raise NoMatch(f"mask {name}: {why if band is None else 'not a bool tensor'}")
    if b.mask is not None:
        raise NoMatch("two tensor masks")
    lay, chain = trace_view(g, name)
    b.mask = broadcast_to(lay, shape)
    b.mask_keep = keep
    b.optional |= set(chain)
    if via:
        b.mask_nodes |= via


def _kernel_dims(lay: Layout, bx, hq, what: str, group: int = 1) -> tuple:
    """A (BH, S, D) operand layout as (b, h, s, d) strides: BH re-split into (bx, hq) (hq =
    kv heads x group for K/V, the group part broadcast)."""
    if len(lay.dims) != 3:
        raise NoMatch(f"{what}: not a 3-d bmm operand")
    sizes = [bx, sympy.cancel(hq / group)] + ([group] if group > 1 else [])
    parts = regroup(lay.dims[0], sizes)
    cb = collapse(parts[0])
    ch = collapse(parts[1])
    if cb is None or ch is None:
        raise NoMatch(f"{what}: batch/head dims not expressible as strides")
    if group > 1:
        cg = collapse(parts[2])
        if cg is None or not eq(cg[1], 0):
            raise NoMatch(f"{what}: heads do not repeat in groups of {group}")
    cs, cd = collapse(lay.dims[1]), collapse(lay.dims[2])
    if cs is None or cd is None:
        raise NoMatch(f"{what}: seq/dim not expressible as strides")
    return cb[1], ch[1], cs[1], cd[1]


def _group_of(lay: Layout) -> tuple:
    """(batch size, kv heads, group) from a K/V operand's BH sub-dims: a trailing stride-0 sub-dim
    after a strided one is the GQA repeat."""
    subs = [sd for sd in lay.dims[0] if not eq(sd[0], 1)]
    if len(subs) >= 2 and eq(subs[-1][1], 0) and not eq(subs[-2][1], 0):
        G = subs[-1][0]
        if not G.is_number:
            raise NoMatch("GQA group size is not a constant")
        return int(G), subs[-2][0]
    return 1, None


def trace_scaled(g: Graph, name: str, b: "_Builder") -> tuple:
    """trace_view, also through multiplications by a constant or float scalar (q * c, k * c:
    SDPA's split sqrt scale, a pre-scaled query): they join the softmax scale."""
    lay, chain = trace_view(g, name)
    passed = list(chain)
    while True:
        n = g.node(lay.origin)
        if n is None or _op(n) not in ("mul", "div") or len(n["args"]) != 2:
            return lay, passed
        x, c = n["args"]
        if _ref(x) is None or _scalar_expr(c) is None:
            return lay, passed
        inner, ch = trace_view(g, _ref(x))
        # the views below the multiply, then the ones above it (relative to the multiply's value)
        below = inner
        for v in reversed(chain):
            below = apply_view(below, g.node(v), g.shape(v))
        lay, chain = below, chain + ch
        passed += [n["name"]] + ch
        b.scale.append(_scalar_expr(c) if _op(n) == "mul" else f"1.0 / {_scalar_expr(c)}")


def _finish(b: _Builder, qname, kname, vname, bmm2, in_dt, p_dt, BH, SQ, SK) -> AttentionMatch:
    g = b.g
    qlay, qchain = trace_scaled(g, qname, b)
    klay, kchain = trace_scaled(g, kname, b)     # (BH, D, SK)
    vlay, vchain = trace_view(g, vname)     # (BH, SK, DV)
    klay = Layout(klay.origin, klay.offset, [klay.dims[0], klay.dims[2], klay.dims[1]])
    if {g.dtype(qlay.origin), g.dtype(klay.origin), g.dtype(vlay.origin)} != {in_dt} or p_dt != in_dt:
        raise NoMatch(f"dtypes q/k/v/p {g.dtype(qlay.origin)}/{g.dtype(klay.origin)}/{g.dtype(vlay.origin)}/{p_dt}")
    D = parse_size(g.shape(qname)[2])
    DV = parse_size(g.shape(vname)[2])
    if not (D.is_number and DV.is_number):
        raise NoMatch("head dim is not a constant")
    G, hkv = _group_of(klay)
    Gv, _ = _group_of(vlay)
    if Gv != G:
        raise NoMatch(f"k and v repeat heads differently ({G} vs {Gv})")
    # batch x heads: from the q operand's BH sub-dims (heads = the innermost one)
    qsubs = [sd for sd in qlay.dims[0] if not eq(sd[0], 1)]
    hq = qsubs[-1][0] if qsubs else sympy.Integer(1)
    if G > 1 and not _is_int(sympy.cancel(hq / G)):
        hq = hkv * G
    bx = sympy.cancel(BH / hq)
    if not _is_int(bx):
        raise NoMatch("batch x heads does not split")
    qs = _kernel_dims(qlay, bx, hq, "q")
    ks = _kernel_dims(klay, bx, hq, "k", G)
    vs = _kernel_dims(vlay, bx, hq, "v", G)

    # the output: written where the view chain after the second bmm puts it
    o_arg, o_strides, o_nodes = _output_layout(g, bmm2, bx, hq, SQ, DV)
    b.nodes |= o_nodes

    def tl(lay: Layout, st, dt) -> TensorLayout:
        return TensorLayout(arg=lay.origin, strides=tuple(to_expr(s) for s in st), dtype=dt, offset=to_expr(lay.offset))

    extra = {}
    if b.bias is not None:
        bl = b.bias
        if len(bl.dims) == 3:
            parts = regroup(bl.dims[0], [bx, hq])
            dims = parts + bl.dims[1:]
        else:
            dims = regroup(_flat(bl.dims[:-2]), [bx, hq]) + bl.dims[-2:]
        cs = [collapse(d) for d in dims]
        if any(c is None for c in cs):
            raise NoMatch("bias not expressible as strides")
        if b.bias_dtype not in ("float32", "float16", "bfloat16"):
            raise NoMatch(f"bias dtype {b.bias_dtype}")
        extra["bias"] = TensorLayout(arg=bl.origin, strides=tuple(to_expr(c[1]) for c in cs), dtype=b.bias_dtype,
                                     offset=to_expr(bl.offset))
    if b.mask is not None:
        ml = b.mask
        dims = (regroup(ml.dims[0], [bx, hq]) + ml.dims[1:]) if len(ml.dims) == 3 else \
            (regroup(_flat(ml.dims[:-2]), [bx, hq]) + ml.dims[-2:])
        cs = [collapse(d) for d in dims]
        if any(c is None for c in cs):
            raise NoMatch("mask not expressible as strides")
        extra["mask"] = TensorLayout(arg=ml.origin, strides=tuple(to_expr(c[1]) for c in cs), dtype="bool",
                                     offset=to_expr(ml.offset))
        extra["mask_keep"] = b.mask_keep
    causal, off, window = False, "0", None
    if b.band is not None:
        ivs = b.band.ivs
        if len(ivs) != 1:
            raise NoMatch("mask: keeps more than one band")
        lo, hi = ivs[0]
        if hi is not INF:
            causal, off = True, to_expr(sympy.simplify(hi))
        if lo is not INF:
            if hi is INF:
                off = "0"
                window = to_expr(sympy.simplify(1 - lo))
            else:
                window = to_expr(sympy.simplify(hi - lo + 1))
    # views feeding q/k/v/bias/mask and mask-building nodes go with the segment where nothing else
    # reads them (a fixpoint: a view is dead once all its readers are inside)
    optional = (b.optional | b.mask_nodes | set(qchain) | set(kchain) | set(vchain)) - b.nodes
    grew = True
    while grew:
        grew = False
        for c in sorted(optional - b.nodes):
            if _exclusive(g, c, b.nodes):
                b.nodes.add(c)
                grew = True
    # every value the segment computes must stay inside it
    for nm in b.nodes - {o_arg}:
        for u in g.users.get(nm, []):
            if u not in b.nodes:
                raise NoMatch(f"{nm} is also used by {u}")
    scale = " * ".join(f"({s})" for s in b.scale) if b.scale else "1.0"
    spec = AttentionSpec(
        q=tl(qlay, qs, in_dt), k=tl(klay, ks, in_dt), v=tl(vlay, vs, in_dt),
        o=TensorLayout(arg=o_arg, strides=tuple(to_expr(s) for s in o_strides), dtype=g.dtype(bmm2)),
        batch=to_expr(bx), heads=to_expr(hq), seq_q=to_expr(SQ), seq_k=to_expr(SK), head_dim=int(D),
        head_dim_v=int(DV), group=G, scale=scale, causal=causal, causal_offset=off, window=window,
        softcap=b.softcap, round_scores=b.round and in_dt in HALF, empty_row_nan=b.empty_nan, **extra)
    return AttentionMatch(nodes=b.nodes, output=o_arg, spec=spec,
                          notes=[f"group {G}", f"causal {causal} offset {off}", f"window {window}"])


def _output_layout(g: Graph, bmm2: str, bx, hq, SQ, DV) -> tuple:
    """(node written, its strides over (b, h, s, d), nodes absorbed): the view chain after bmm2 up
    to its last contiguous value (a reshape after a transpose, e.g. (B, S, H * D)), else bmm2."""
    chain, cur = [], bmm2
    while True:
        u = g.only_user(cur)
        n = g.node(u) if u else None
        if n is None or _op(n) not in ("view", "_unsafe_view", "reshape", "permute", "transpose", "clone", "alias"):
            break
        chain.append(n["name"])
        cur = n["name"]
    # the last value whose memory is contiguous: bmm2 itself, or after a clone/reshape
    best = (bmm2, [])
    for k in range(len(chain)):
        name = chain[k]
        if _op(g.node(name)) in ("clone", "view", "_unsafe_view", "reshape"):
            best = (name, chain[:k + 1])
    target, absorbed = best
    # layout of bmm2's value inside target's memory: target contiguous, undo the chain backwards
    lay = contiguous(target, g.shape(target))
    try:
        for name in reversed(absorbed):
            n = g.node(name)
            prev = _ref(n["args"][0])
            op = _op(n)
            if op in ("view", "_unsafe_view", "reshape"):
                lay = Layout(lay.origin, lay.offset, regroup(_flat(lay.dims), [parse_size(s) for s in g.shape(prev)]))
            elif op == "permute":
                perm = [int(p) % len(lay.dims) for p in n["args"][1]]
                inv = [perm.index(i) for i in range(len(perm))]
                lay = Layout(lay.origin, lay.offset, [lay.dims[i] for i in inv])
            elif op == "transpose":
                nd = len(lay.dims)
                a, b2 = int(n["args"][1]) % nd, int(n["args"][2]) % nd
                dims = list(lay.dims)
                dims[a], dims[b2] = dims[b2], dims[a]
                lay = Layout(lay.origin, lay.offset, dims)
        st = _kernel_dims(lay, bx, hq, "output")
    except NoMatch:
        target, absorbed = bmm2, []
        lay = contiguous(bmm2, g.shape(bmm2))
        st = _kernel_dims(lay, bx, hq, "output")
    return target, st, set(absorbed)
