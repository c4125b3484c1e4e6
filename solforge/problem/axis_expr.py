"""A small, safe arithmetic evaluator for axis expressions and constraints. Never `eval`.

Grammar (Python syntax, parsed by `ast`): integer/float literals, axis names, `+ - * / // % **`,
unary `+ -`, parentheses, comparisons (`== != < <= > >=`, chained), `and`/`or`/`not`, and the
functions min, max, abs, ceil_div. Anything else is rejected with a message naming the construct.
"""

from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache
from typing import Mapping

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max, "abs": abs, "ceil_div": lambda a, b: -(-a // b)}
_MAX_POW = 64  # exponents beyond this are a typo, not a shape


class ExprError(ValueError):
    pass


@lru_cache(maxsize=4096)
def parse(expr: str) -> ast.Expression:
    if not isinstance(expr, str) or not expr.strip():
        raise ExprError("empty expression")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {expr!r}: {e.msg}") from None
    _check(tree.body, expr)
    return tree


def _check(node: ast.AST, expr: str) -> None:
    ok = (ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Call,
          ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    for n in ast.walk(node):
        if not isinstance(n, ok):
            raise ExprError(f"{type(n).__name__} is not allowed in axis expression {expr!r}")
        if isinstance(n, ast.Constant) and (isinstance(n.value, bool) or
                                            not isinstance(n.value, (int, float))):
            raise ExprError(f"only numbers are allowed as literals in {expr!r}")
        if isinstance(n, ast.BinOp) and type(n.op) not in _BINOPS:
            raise ExprError(f"operator {type(n.op).__name__} is not allowed in {expr!r}")
        if isinstance(n, ast.Call):
            if not isinstance(n.func, ast.Name) or n.func.id not in _FUNCS or n.keywords:
                raise ExprError(f"only {sorted(_FUNCS)} may be called in {expr!r}")


def names(expr: str) -> set[str]:
    """The axis names an expression refers to."""
    tree = parse(expr)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(_FUNCS)


def evaluate(expr: str, env: Mapping[str, int | float]):
    """Evaluate an expression over axis values. Raises ExprError on unknown names or math errors."""
    return _eval(parse(expr).body, env, expr)


def _eval(node: ast.AST, env: Mapping[str, int | float], expr: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown axis {node.id!r} in {expr!r}")
        return env[node.id]
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, expr), _eval(node.right, env, expr)
        if isinstance(node.op, ast.Pow) and abs(b) > _MAX_POW:
            raise ExprError(f"exponent {b} too large in {expr!r}")
        try:
            return _BINOPS[type(node.op)](a, b)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in {expr!r}") from None
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env, expr))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, expr)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, expr)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env, expr) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Call):
        return _FUNCS[node.func.id](*(_eval(a, env, expr) for a in node.args))
    raise ExprError(f"cannot evaluate {ast.dump(node)} in {expr!r}")


def as_int(value, expr: str) -> int:
    """An axis value must be a whole number; 8.0 is fine, 8.5 is not."""
    if isinstance(value, bool):
        raise ExprError(f"{expr!r} gave a boolean, not a size")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ExprError(f"{expr!r} gave {value}, not a whole number")
        value = int(value)
    return value
