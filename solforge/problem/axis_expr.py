"""A small, safe arithmetic evaluator for axis expressions and constraints. Never `eval`.

Grammar (Python syntax, parsed by `ast`): integer/float literals, axis names, `+ - * / // % **`,
unary `+ -`, parentheses, comparisons (`== != < <= > >=`, chained), `and`/`or`/`not`, and the
functions min, max, abs, ceil_div. Anything else is rejected with a message naming the construct.

Constraints (FlashInfer-Trace definitions) may also state facts about tensors, in exactly two forms:
`T.shape[i]` (a dimension, checkable from the definition's shapes) and `T[i].item()` (an element,
checkable only once the data exists). `parse_constraint` accepts those; `parse` never does.
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
# Every integer an expression computes, intermediates included, stays under this many bits; the bound
# is checked from the operands' sizes BEFORE an operation runs, so ((2**64)**64)**64 is refused in
# microseconds instead of building a number of 2**24 bits (and so on, exponentially). 256 bits is far
# above any shape, byte count or product of them.
MAX_BITS = 256


class ExprError(ValueError):
    pass


# Longer is not a formula anybody wrote: refusing early keeps the parser and checks cheap. A compiler-
# made workspace size (the largest of several variants' packed buffers, each rounded up) runs to a few
# thousand characters; parsing 16 kB stays well under a millisecond, and MAX_BITS bounds the values.
_MAX_LEN = 16000


def _parse_eval(expr: str) -> ast.Expression:
    if len(expr) > _MAX_LEN:
        raise ExprError(f"expression longer than {_MAX_LEN} characters")
    try:
        return ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {expr!r}: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError("expression nested too deeply") from None


class NeedsData(ExprError):
    """The constraint reads a tensor element (`T[i].item()`) and only shapes are known."""


@lru_cache(maxsize=4096)
def parse(expr: str) -> ast.Expression:
    if not isinstance(expr, str) or not expr.strip():
        raise ExprError("empty expression")
    tree = _parse_eval(expr)
    _checked(tree, expr, tensors=False)
    return tree


@lru_cache(maxsize=4096)
def parse_constraint(expr: str) -> ast.Expression:
    """Like `parse`, but also accepts the tensor facts `T.shape[i]` and `T[i].item()`."""
    if not isinstance(expr, str) or not expr.strip():
        raise ExprError("empty expression")
    tree = _parse_eval(expr)
    _checked(tree, expr, tensors=True)
    return tree


def _checked(tree: ast.Expression, expr: str, tensors: bool) -> None:
    try:
        _check(tree.body, expr, tensors)
    except RecursionError:
        raise ExprError("expression nested too deeply") from None


def _int_index(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _tensor_dim(node: ast.AST) -> bool:
    """`T.shape[i]` with T a bare name and i an integer literal."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)
            and _int_index(node.slice))


def _tensor_item(node: ast.AST) -> bool:
    """`T[i].item()` with T a bare name and i an integer literal."""
    return (isinstance(node, ast.Call) and not node.args and not node.keywords
            and isinstance(node.func, ast.Attribute) and node.func.attr == "item"
            and isinstance(node.func.value, ast.Subscript)
            and isinstance(node.func.value.value, ast.Name) and _int_index(node.func.value.slice))


def _check(node: ast.AST, expr: str, tensors: bool = False) -> None:
    # Recursive rather than ast.walk: the two tensor forms are allowed only as whole shapes,
    # never their parts (`T.shape` alone, `x.__class__`, `f()[0]` stay rejected).
    if tensors and (_tensor_dim(node) or _tensor_item(node)):
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers are allowed as literals in {expr!r}")
        return
    if isinstance(node, ast.Name):
        if node.id.startswith("__"):
            raise ExprError(f"name {node.id!r} is not allowed in {expr!r}")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExprError(f"operator {type(node.op).__name__} is not allowed in {expr!r}")
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        children = [node.operand]
    elif isinstance(node, ast.Compare):
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise ExprError(f"only {sorted(_FUNCS)} may be called in {expr!r}")
        children = list(node.args)
    else:
        kind = "tensor constraint" if tensors else "axis expression"
        raise ExprError(f"{type(node).__name__} is not allowed in {kind} {expr!r}")
    for c in children:
        _check(c, expr, tensors)


def names(expr: str) -> set[str]:
    """The axis names an expression refers to."""
    tree = parse(expr)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(_FUNCS)


def constraint_names(expr: str) -> tuple[set[str], set[str]]:
    """(axis or scalar names, tensor names) a constraint refers to."""
    tree = parse_constraint(expr)
    tensors: set[str] = set()
    for n in ast.walk(tree):
        if _tensor_dim(n):
            tensors.add(n.value.value.id)
        elif _tensor_item(n):
            tensors.add(n.func.value.value.id)
    plain = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(_FUNCS) - tensors
    return plain, tensors


def tensor_dims(expr: str) -> list[tuple[str, int]]:
    """Every `T.shape[i]` in a constraint, as (T, i): the ranks can be checked without data."""
    return [(n.value.value.id, _index(n.slice)) for n in ast.walk(parse_constraint(expr))
            if _tensor_dim(n)]


def evaluate(expr: str, env: Mapping[str, int | float]):
    """Evaluate an expression over axis values. Raises ExprError on unknown names or math errors."""
    tree = parse(expr)
    try:
        return _eval(tree.body, env, expr, None)
    except RecursionError:
        raise ExprError("expression nested too deeply") from None


def evaluate_constraint(expr: str, env: Mapping[str, int | float], tensors: Mapping | None = None):
    """Evaluate a constraint. `tensors` maps a tensor name to its shape (a tuple) or to the tensor
    itself (anything with `.shape` and indexing). An element read on a shape raises NeedsData."""
    tree = parse_constraint(expr)
    try:
        return _eval(tree.body, env, expr, tensors or {})
    except RecursionError:
        raise ExprError("expression nested too deeply") from None


def _tensor(name: str, tensors: Mapping | None, expr: str):
    if tensors is None or name not in tensors:
        raise ExprError(f"unknown tensor {name!r} in {expr!r}")
    return tensors[name]


def _index(node: ast.AST) -> int:
    if isinstance(node, ast.UnaryOp):
        return -node.operand.value
    return node.value


def _eval(node: ast.AST, env: Mapping[str, int | float], expr: str, tensors: Mapping | None):
    if tensors is not None and _tensor_dim(node):
        t = _tensor(node.value.value.id, tensors, expr)
        shape = tuple(t) if isinstance(t, (tuple, list)) else tuple(t.shape)
        try:
            return int(shape[_index(node.slice)])
        except IndexError:
            raise ExprError(f"{node.value.value.id} has rank {len(shape)} in {expr!r}") from None
    if tensors is not None and _tensor_item(node):
        sub = node.func.value
        t = _tensor(sub.value.id, tensors, expr)
        if isinstance(t, (tuple, list)):
            raise NeedsData(f"{expr!r} reads data of {sub.value.id}")
        try:
            return t[_index(sub.slice)].item()
        except IndexError:
            raise ExprError(f"index out of range for {sub.value.id} in {expr!r}") from None
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown axis {node.id!r} in {expr!r}")
        return _bounded(env[node.id], expr)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, expr, tensors), _eval(node.right, env, expr, tensors)
        if isinstance(node.op, ast.Pow) and abs(b) > _MAX_POW:
            raise ExprError(f"exponent {b} too large in {expr!r}")
        _check_size(node.op, a, b, expr)
        try:
            return _bounded(_BINOPS[type(node.op)](a, b), expr)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in {expr!r}") from None
        except OverflowError:
            raise ExprError(f"result too large in {expr!r}") from None
    if isinstance(node, ast.UnaryOp):
        return _bounded(_UNARY[type(node.op)](_eval(node.operand, env, expr, tensors)), expr)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, expr, tensors)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, expr, tensors)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env, expr, tensors) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Call):
        try:
            return _bounded(_FUNCS[node.func.id](*(_eval(a, env, expr, tensors) for a in node.args)), expr)
        except (TypeError, ZeroDivisionError, OverflowError) as e:
            raise ExprError(f"{node.func.id}() failed in {expr!r}: {e}") from None
    raise ExprError(f"cannot evaluate {ast.dump(node)} in {expr!r}")


def _bits(v) -> int:
    """Bits of an integer value (floats: of their integer part; they cannot grow without bound)."""
    if isinstance(v, bool):
        return 1
    if isinstance(v, int):
        return v.bit_length()
    if isinstance(v, float) and math.isfinite(v):
        return max(0, math.frexp(v)[1])
    return 0


def _bounded(v, expr: str):
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_BITS:
        raise ExprError(f"a value in {expr!r} exceeds {MAX_BITS} bits")
    return v


def _check_size(op: ast.AST, a, b, expr: str) -> None:
    """Refuse an operation whose integer result would exceed MAX_BITS, before running it."""
    if not (isinstance(a, int) and isinstance(b, int)):
        return  # a float result overflows to an error or inf, quickly
    if isinstance(op, ast.Pow):
        if b > 0 and abs(a) > 1 and (abs(a).bit_length() - 1) * b > MAX_BITS:
            raise ExprError(f"{a.bit_length()}-bit value to the power {b} exceeds {MAX_BITS} bits in {expr!r}")
    elif isinstance(op, ast.Mult):
        if _bits(a) + _bits(b) > MAX_BITS + 1:
            raise ExprError(f"a product in {expr!r} exceeds {MAX_BITS} bits")


def as_int(value, expr: str) -> int:
    """An axis value must be a whole number; 8.0 is fine, 8.5 is not."""
    if isinstance(value, bool):
        raise ExprError(f"{expr!r} gave a boolean, not a size")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ExprError(f"{expr!r} gave {value}, not a whole number")
        value = int(value)
    return value
