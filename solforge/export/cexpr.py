"""Axis expressions (solforge.problem.axis_expr grammar) translated to C++ over doubles.

The exported torch binding evaluates a candidate's grid/block/smem/args/workspace expressions at run
time, from the tensor shapes it is given, with the same meaning as the Python evaluator the launcher
uses: every value is a double (exact for integers below 2**53, far above any tensor size), `/` is true
division, `//` and `%` follow Python's floor semantics, `and`/`or` give 1 or 0 (the evaluator's
all()/any()), and
ceil_div(a, b) = -((-a) // b). The helpers it calls (sf_*) are emitted by `CPP_HELPERS`.
"""

from __future__ import annotations

import ast
from typing import Callable

from ..problem import axis_expr

CPP_HELPERS = r"""
static inline double sf_floordiv(double a, double b) { return std::floor(a / b); }
static inline double sf_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;  // Python: the result takes the divisor's sign
  return r;
}
static inline double sf_ceil_div(double a, double b) { return -std::floor(-a / b); }
static inline double sf_min(double a, double b) { return b < a ? b : a; }
static inline double sf_max(double a, double b) { return b > a ? b : a; }
static inline double sf_and(double a, double b) { return (a != 0.0 && b != 0.0) ? 1.0 : 0.0; }
static inline double sf_or(double a, double b) { return (a != 0.0 || b != 0.0) ? 1.0 : 0.0; }
"""

_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def to_cpp(expr: str, name: Callable[[str], str]) -> str:
    """C++ double expression for `expr`; `name(axis)` gives the C++ variable holding an axis value."""
    tree = axis_expr.parse(str(expr))
    return _emit(tree.body, name)


def _emit(n: ast.AST, name: Callable[[str], str]) -> str:
    if isinstance(n, ast.Constant):
        return f"{float(n.value)!r}"
    if isinstance(n, ast.Name):
        return name(n.id)
    if isinstance(n, ast.BinOp):
        a, b = _emit(n.left, name), _emit(n.right, name)
        op = type(n.op)
        if op in _BIN:
            return f"({a} {_BIN[op]} {b})"
        if op is ast.FloorDiv:
            return f"sf_floordiv({a}, {b})"
        if op is ast.Mod:
            return f"sf_mod({a}, {b})"
        if op is ast.Pow:
            return f"std::pow({a}, {b})"
    if isinstance(n, ast.UnaryOp):
        a = _emit(n.operand, name)
        if isinstance(n.op, ast.USub):
            return f"(-{a})"
        if isinstance(n.op, ast.UAdd):
            return a
        if isinstance(n.op, ast.Not):
            return f"(({a}) == 0.0 ? 1.0 : 0.0)"
    if isinstance(n, ast.Compare):
        terms, left = [], _emit(n.left, name)
        for op, right in zip(n.ops, n.comparators):
            r = _emit(right, name)
            terms.append(f"({left} {_CMP[type(op)]} {r})")
            left = r
        return "((" + " && ".join(terms) + ") ? 1.0 : 0.0)"
    if isinstance(n, ast.BoolOp):
        fn = "sf_and" if isinstance(n.op, ast.And) else "sf_or"
        vals = [_emit(v, name) for v in n.values]
        out = vals[-1]
        for v in reversed(vals[:-1]):
            out = f"{fn}({v}, {out})"
        return out
    if isinstance(n, ast.Call):
        args = [_emit(a, name) for a in n.args]
        f = n.func.id
        if f == "abs" and len(args) == 1:
            return f"std::fabs({args[0]})"
        if f == "ceil_div" and len(args) == 2:
            return f"sf_ceil_div({args[0]}, {args[1]})"
        if f in ("min", "max") and args:
            out = args[-1]
            for a in reversed(args[:-1]):
                out = f"sf_{f}({a}, {out})"
            return out
    raise axis_expr.ExprError(f"cannot translate {ast.dump(n)} to C++")
