"""Size expressions: sympy <-> axis-expression strings <-> C.

The trace writes every size as an axis-expression string (solforge/problem/axis_expr.py syntax over
the definition's var axes and int scalar inputs); the compiler works on sympy expressions (index
arithmetic simplifies) and prints them back as launch expressions or as C over kernel parameters.
Integer division is FloorDiv and modulo ModularIndexing/Mod from torch's sympy helpers: both are
only ever applied to non-negative values here (sizes, indices), where C's `/` and `%` agree.
"""

from __future__ import annotations

import ast
from functools import lru_cache

import sympy
from torch.utils._sympy.functions import (CeilToInt, CleanDiv, FloatPow, FloorDiv, FloorToInt,
                                          Identity, IntTrueDiv, Max, Min, ModularIndexing, Mod,
                                          FloatTrueDiv, PythonMod, ToFloat, TruncToInt)


@lru_cache(maxsize=None)
def sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def is_read_back(s) -> bool:
    """Whether a size symbol stands for a value read back from a tensor (torch's unbacked SymInts
    are named u0, u1, ...), not for an input's size (s0, ...): what a plan must read on the GPU."""
    return str(s).startswith("u")


def parse(expr: str) -> sympy.Expr:
    """An axis-expression string as a sympy expression (names become integer symbols)."""
    return _from_ast(ast.parse(str(expr).strip(), mode="eval").body)


def _from_ast(n):
    if isinstance(n, ast.Constant):
        v = n.value
        return sympy.Integer(v) if isinstance(v, int) or float(v) == int(v) else sympy.Float(v)
    if isinstance(n, ast.Name):
        return sym(n.id)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        return -_from_ast(n.operand)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.UAdd):
        return _from_ast(n.operand)
    if isinstance(n, ast.BinOp):
        if isinstance(n.op, ast.FloorDiv) and isinstance(n.right, ast.Constant) and \
                n.right.value == 1 and _float_ops(n.left):
            return TruncToInt(_float_from_ast(n.left))   # a truncated float size (truncated_float)
        a, b = _from_ast(n.left), _from_ast(n.right)
        if isinstance(n.op, ast.Add):
            return a + b
        if isinstance(n.op, ast.Sub):
            return a - b
        if isinstance(n.op, ast.Mult):
            return a * b
        if isinstance(n.op, ast.FloorDiv):
            return FloorDiv(a, b)
        if isinstance(n.op, ast.Div):
            q = sympy.simplify(a / b)
            if q.is_integer:
                return q
            return FloorDiv(a, b)  # sizes: a true division that is exact in every workload
        if isinstance(n.op, ast.Mod):
            return Mod(a, b)
        if isinstance(n.op, ast.Pow):
            return a ** b
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
        args = [_from_ast(a) for a in n.args]
        f = n.func.id
        if f == "min":
            return Min(*args)
        if f == "max":
            return Max(*args)
        if f == "ceil_div":
            return FloorDiv(args[0] + args[1] - 1, args[1])
        if f == "abs":
            return sympy.Abs(args[0])
    raise ValueError(f"size expression {ast.dump(n)[:80]} not understood")


# A size truncated from Python float arithmetic on sizes (int(n ** 0.5), int(n * 8 / 160 * 1.25)):
# TruncToInt over ToFloat / IntTrueDiv / FloatTrueDiv / FloatPow / numbers / sizes. An axis
# expression has no int(): it prints as `(F) // 1` with F the same float arithmetic (a whole float,
# which axis_expr.as_int accepts), and parses back from that form.
def _float_ops(n) -> bool:
    """Whether an axis-expression node does float arithmetic (a float literal, `/`, `** 0.5`)."""
    return any(isinstance(x, ast.Div) or (isinstance(x, ast.Constant) and isinstance(x.value, float))
               for x in ast.walk(n))


def _float_from_ast(n):
    if isinstance(n, ast.Constant):
        return sympy.Float(n.value) if isinstance(n.value, float) else sympy.Integer(n.value)
    if isinstance(n, ast.BinOp) and not _float_ops(n):
        return _from_ast(n)
    if isinstance(n, (ast.Name, ast.Call)) or (isinstance(n, ast.UnaryOp) and not _float_ops(n)):
        return _from_ast(n)
    if isinstance(n, ast.BinOp):
        a, b = _float_from_ast(n.left), _float_from_ast(n.right)
        if isinstance(n.op, ast.Add):
            return a + b
        if isinstance(n.op, ast.Sub):
            return a - b
        if isinstance(n.op, ast.Mult):
            return a * b
        if isinstance(n.op, ast.Div):
            return IntTrueDiv(a, b) if a.is_integer and b.is_integer else FloatTrueDiv(a, b)
        if isinstance(n.op, ast.Pow):
            return FloatPow(ToFloat(a) if a.is_integer else a, b)
    raise ValueError(f"float size expression {ast.dump(n)[:80]} not understood")


def truncated_float(e):
    """The float argument when e is a size truncated from float arithmetic, else None."""
    if type(e) in (TruncToInt, FloorToInt) and not isinstance(e.args[0], IntTrueDiv) and \
            any(isinstance(x, (ToFloat, FloatPow, IntTrueDiv, FloatTrueDiv)) or
                (x.is_Float if hasattr(x, "is_Float") else False)
                for x in sympy.preorder_traversal(e.args[0])):
        return e.args[0]
    return None


class _Printer:
    """Prints a sympy integer expression; `name` maps a symbol to its printed name."""

    def __init__(self, name, c: bool):
        self.name = name
        self.c = c

    def p(self, e) -> str:
        if isinstance(e, (int,)):
            return str(e)
        if e.is_Integer:
            v = int(e)
            return f"{v}LL" if self.c and abs(v) > 2**31 - 1 else str(v)
        if e.is_Rational and not e.is_Integer:
            raise ValueError(f"non-integer size {e}")
        if e.is_Symbol:
            return self.name(e.name)
        if e.is_Add:
            # sympy's own (canonical, deterministic) order of the terms, constants last. Not by
            # str(t): printing every term with sympy's printer to sort it was 90% of lowering a
            # plan with thousands of index expressions (minutes for a 64-step unrolled loop)
            terms = sorted(e.args, key=lambda t: t.is_number)
            out = self.p(terms[0])
            for t in terms[1:]:
                if t.is_number and t < 0:
                    out += f" - {self.p(-t)}"
                elif t.is_Mul and t.args[0].is_number and t.args[0] < 0:
                    out += f" - {self.p(-t)}"
                else:
                    out += f" + {self.p(t)}"
            return f"({out})"
        if e.is_Mul:
            num = [a for a in e.args if not (a.is_Pow and a.exp.is_number and a.exp < 0)]
            den = [a for a in e.args if a.is_Pow and a.exp.is_number and a.exp < 0]
            if den:
                n = sympy.Mul(*num)
                d = sympy.Mul(*[a.base ** (-a.exp) for a in den])
                op = "/" if self.c else "//"
                return f"({self.p(n)} {op} {self.p(d)})"
            if len(num) >= 2 and num[0] == -1:
                return f"(-{self.p(sympy.Mul(*num[1:]))})"
            return "(" + " * ".join(self.p(a) for a in num) + ")"
        if e.is_Pow:
            if e.exp.is_Integer and e.exp > 0:
                return "(" + " * ".join([self.p(e.base)] * int(e.exp)) + ")"
            raise ValueError(f"power {e} in a size")
        f = type(e)
        if f in (FloorDiv, CleanDiv):
            op = "/" if self.c else "//"
            return f"({self.p(e.args[0])} {op} {self.p(e.args[1])})"
        if f is ModularIndexing:
            x, d, m = e.args
            op = "/" if self.c else "//"
            inner = self.p(x) if d == 1 else f"({self.p(x)} {op} {self.p(d)})"
            return f"({inner} % {self.p(m)})"
        if f in (Mod, PythonMod, sympy.Mod):
            return f"({self.p(e.args[0])} % {self.p(e.args[1])})"
        if f in (Max, sympy.Max):
            return self._fold("max", e.args)
        if f in (Min, sympy.Min):
            return self._fold("min", e.args)
        if f in (Identity,):
            return self.p(e.args[0])
        if f in (CeilToInt, sympy.ceiling) and isinstance(e.args[0], IntTrueDiv):
            a, b = e.args[0].args
            return f"(({self.p(a)} + {self.p(b)} - 1) {'/' if self.c else '//'} {self.p(b)})"
        fl = truncated_float(e)
        if fl is not None:
            # Python's int() of float arithmetic on sizes, in double as Python computes it (a
            # square root as sqrt, correctly rounded like the host's pow(n, 0.5))
            if self.c:
                return f"((long long)({to_c_float(fl, self.name)}))"
            return f"(({_float_axis(fl, self)}) // 1)"
        if f in (FloorToInt, TruncToInt, sympy.floor) and isinstance(e.args[0], IntTrueDiv):
            a, b = e.args[0].args
            return f"({self.p(a)} {'/' if self.c else '//'} {self.p(b)})"
        if f is sympy.Abs:
            return f"{'llabs' if self.c else 'abs'}({self.p(e.args[0])})"
        if f is sympy.Piecewise:
            raise ValueError("piecewise size")
        raise ValueError(f"cannot print {f.__name__} in a size: {e}")

    def _fold(self, fn, args):
        args = list(args)
        out = self.p(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self.p(a)})" if not self.c else \
                f"(({out}) {'>' if fn == 'max' else '<'} ({self.p(a)}) ? ({out}) : ({self.p(a)}))"
        return out


def _float_axis(x, pr: "_Printer") -> str:
    """A float size expression (truncated_float's argument) as an axis expression."""
    if x.is_Float:
        return repr(float(x))
    if isinstance(x, ToFloat):
        return _float_axis(x.args[0], pr)
    if isinstance(x, (IntTrueDiv, FloatTrueDiv)):
        return f"({_float_axis(x.args[0], pr)} / {_float_axis(x.args[1], pr)})"
    if isinstance(x, FloatPow):
        return f"({_float_axis(x.args[0], pr)} ** {_float_axis(x.args[1], pr)})"
    if x.is_Mul and any(not a.is_integer for a in x.args):
        return "(" + " * ".join(_float_axis(a, pr) for a in x.args) + ")"
    if x.is_Add and any(not a.is_integer for a in x.args):
        return "(" + " + ".join(_float_axis(a, pr) for a in x.args) + ")"
    return pr.p(x)


def to_axis(e) -> str:
    """A sympy size as an axis-expression string (launch expressions, IR shapes)."""
    e = sympy.sympify(e)
    return _Printer(lambda n: n, c=False).p(e)


def to_c(e, name=lambda n: n) -> str:
    """A sympy index expression as C over int64 values."""
    e = sympy.sympify(e)
    return _Printer(name, c=True).p(e)


def at_most(a, b) -> bool:
    """a <= b for every value of the sizes? Decided when b - a is a number, or when b / a is (the
    same symbolic extent times other constants); else not (False: undecided)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    d = sympy.expand(b - a)
    if d.is_number:
        return bool(d >= 0)
    if a == 0:
        return True
    q = sympy.cancel(b / a)
    return bool(q.is_number and q >= 1)


def as_int(e):
    """The integer if the expression is a constant, else None."""
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def to_c_float(e, name=lambda n: n) -> str:
    """A sympy float-valued size expression (torch's SymFloat: 1/sqrt(d), 1/N) as C double."""
    e = sympy.sympify(e)

    def p(x) -> str:
        if x.is_Integer or x.is_Float or (x.is_Rational and not x.is_Integer):
            return f"({float(x)!r})"
        if x.is_Symbol:
            return f"((double){name(x.name)})"
        if x.is_Add:
            return "(" + " + ".join(p(a) for a in x.args) + ")"
        if x.is_Mul:
            return "(" + " * ".join(p(a) for a in x.args) + ")"
        if x.is_Pow:
            if x.exp == -1:
                return f"(1.0 / {p(x.base)})"
            if x.exp == sympy.Rational(1, 2):
                return f"sqrt({p(x.base)})"
            if x.exp == sympy.Rational(-1, 2):
                return f"(1.0 / sqrt({p(x.base)}))"
            return f"pow({p(x.base)}, {p(x.exp)})"
        fn = type(x).__name__
        if fn in ("ToFloat", "Identity", "TruncToFloat"):
            return f"((double)({p(x.args[0])}))"
        if fn in ("CeilToInt", "FloorToInt"):
            return f"((double){fn[:-5].lower()}({p(x.args[0])}))"
        if fn in ("IntTrueDiv", "FloatTrueDiv"):
            return f"({p(x.args[0])} / {p(x.args[1])})"
        if fn == "FloatPow" and x.args[1] == sympy.Float(0.5):
            return f"sqrt({p(x.args[0])})"   # correctly rounded, as the host's pow(n, 0.5)
        if fn in ("FloatPow", "PowByNatural"):
            return f"pow({p(x.args[0])}, {p(x.args[1])})"
        if fn.startswith("OpaqueUnaryFn_"):
            return f"{fn[len('OpaqueUnaryFn_'):]}({p(x.args[0])})"
        if isinstance(x, (FloorDiv, ModularIndexing, Mod, PythonMod, sympy.Mod, Max, Min, CeilToInt,
                          FloorToInt, TruncToInt)):  # int-valued: math.ceil(rows / 128) ...
            return f"((double){to_c(x, name)})"
        raise ValueError(f"cannot print {fn} in a float size expression")
    return p(e)


def _dm(term):
    """term = coef * ModularIndexing(x, d, m) (m None: FloorDiv(x, d); d 1, m None: x itself)
    -> (coef, x, d, m) or None."""
    coef = sympy.Integer(1)
    core = term
    if term.is_Mul:
        nums = [a for a in term.args if a.is_number]
        rest = [a for a in term.args if not a.is_number]
        if len(rest) != 1:
            # coef may be symbolic: split the single div/mod factor from the rest (with two, as
            # 3 * ((L + 2) // 4) * (row // 3), which one is the index is unknown: no folding)
            dm = [a for a in term.args if isinstance(a, (ModularIndexing, FloorDiv))]
            if len(dm) != 1:
                return None
            core = dm[0]
            coef = sympy.Mul(*[a for a in term.args if a is not core])
        elif rest:
            core = rest[0]
            coef = sympy.Mul(*nums)
    if isinstance(core, ModularIndexing):
        return coef, core.args[0], core.args[1], core.args[2]
    if isinstance(core, FloorDiv):
        return coef, core.args[0], core.args[1], None
    return None


def fold_divmod(e):
    """Undo unravel-then-ravel: d*m*(x // (d*m)) + d*((x // d) % m) -> d*(x // d), and
    x // 1 -> x, so a contiguous read at a flat position costs no division."""
    e = sympy.sympify(e)
    if not e.is_Add:
        return e
    terms = list(e.args)
    changed = True
    while changed:
        changed = False
        for i in range(len(terms)):
            a = _dm(terms[i])
            if a is None:
                continue
            for j in range(len(terms)):
                if i == j:
                    continue
                b = _dm(terms[j])
                if b is None or a[3] is None or b[1] != a[1]:
                    continue
                ca, x, d, m = a
                cb, _, d2, m2 = b
                if sympy.expand(d2 - d * m) != 0 or sympy.expand(cb - ca * m) != 0:
                    continue
                nm = None if m2 is None else m * m2
                if nm is None:
                    new = ca * (x if d == 1 else FloorDiv(x, d))
                else:
                    new = ca * ModularIndexing(x, d, nm)
                terms = [t for k_, t in enumerate(terms) if k_ not in (i, j)] + [new]
                changed = True
                break
            if changed:
                break
    return sympy.Add(*terms)


_RELATIONS = ((sympy.Eq, "=="), (sympy.Ne, "!="), (sympy.StrictLessThan, "<"),
              (sympy.LessThan, "<="), (sympy.StrictGreaterThan, ">"), (sympy.GreaterThan, ">="))
_C_WORDS = {"true": "true", "false": "false", "and": " && ", "or": " || ", "not": "(!{})"}
_AXIS_WORDS = {"true": "1 == 1", "false": "1 == 0", "and": " and ", "or": " or ", "not": "(not {})"}


def _print_bool(e, side, words: dict) -> str:
    """A sympy condition (a trace guard: Eq, Ne, <, <=, And, Or, Not), its sides printed by `side`,
    its connectives in `words`."""
    e = sympy.sympify(e)
    if e is sympy.true or e is sympy.false:
        return words["true" if e is sympy.true else "false"]
    if isinstance(e, (sympy.And, sympy.Or)):
        joint = words["and" if isinstance(e, sympy.And) else "or"]
        return "(" + joint.join(_print_bool(a, side, words) for a in e.args) + ")"
    if isinstance(e, sympy.Not):
        return words["not"].format(_print_bool(e.args[0], side, words))
    for t, op in _RELATIONS:
        if isinstance(e, t):
            return f"({side(e.lhs)} {op} {side(e.rhs)})"
    raise ValueError(f"cannot print the condition {e}")


def to_axis_bool(e) -> str:
    """A sympy condition over sizes (a variant's guards) as an axis expression the host evaluates
    (a launch's `when`): the same test as to_c_bool's, in Python's words."""
    return _print_bool(e, lambda x: f"({to_axis(x)})", _AXIS_WORDS)


def to_c_bool(e, name=lambda n: n) -> str:
    """A sympy condition (a trace guard) as C."""
    return _print_bool(e, lambda x: to_c_float(x, name), _C_WORDS)
