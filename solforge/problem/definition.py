"""Definition: the operator's contract (SOL-ExecBench docs/definition.md), one pydantic model.

Axes are `const` (fixed), `var` (bound per workload) or `expr` (computed from other axes by the safe
evaluator in axis_expr). Tensor shapes list axis names; an integer literal (also written as a string,
"1") is accepted because the shared dataset has them. `shape: null` is a Python scalar, `[]` a 0-d tensor.
"""

from __future__ import annotations

import ast
import re
import types
from functools import cached_property, lru_cache
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from . import axis_expr
from .dtypes import DTYPE_NAMES

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    # Unknown keys are kept, not rejected: the upstream formats grow fields, and the official
    # evaluator ignores what it does not know. Typos that matter are caught explicitly.
    model_config = ConfigDict(extra="allow", frozen=False)


class AxisConst(_Model):
    type: Literal["const"]
    value: int = Field(ge=0)
    description: Optional[str] = None


class AxisVar(_Model):
    type: Literal["var"]
    description: Optional[str] = None


class AxisExpr(_Model):
    type: Literal["expr"]
    expression: str
    description: Optional[str] = None

    @field_validator("expression")
    @classmethod
    def _parses(cls, v: str) -> str:
        axis_expr.parse(v)  # raises ExprError (a ValueError) with the reason
        return v


Axis = Annotated[Union[AxisConst, AxisVar, AxisExpr], Field(discriminator="type")]


class TensorSpec(_Model):
    shape: Optional[list[Union[str, int]]]
    dtype: str
    description: Optional[str] = None

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPE_NAMES:
            raise ValueError(f"unknown dtype {v!r} (known: {', '.join(DTYPE_NAMES)})")
        return v

    @field_validator("shape")
    @classmethod
    def _dims(cls, v):
        if v is None:
            return v
        out = []
        for d in v:
            if isinstance(d, bool):
                raise ValueError(f"shape entry {d!r} is not an axis name or integer")
            if isinstance(d, str) and d.strip().lstrip("-").isdigit():
                d = int(d.strip())  # integer literal written as a string ("1")
            if isinstance(d, int) and d < 0:
                raise ValueError(f"negative shape entry {d}")
            if isinstance(d, str) and not _IDENT.match(d):
                raise ValueError(f"shape entry {d!r} is not an axis name")
            out.append(d)
        return out

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


def _parse_constraint(c: str) -> str:
    axis_expr.parse_constraint(c)  # axis arithmetic plus T.shape[i] / T[i].item()
    return c


# Validated per item so that an error names its index (constraints.2).
Constraint = Annotated[str, AfterValidator(_parse_constraint)]


class Definition(_Model):
    name: str = Field(min_length=1)
    op_type: Optional[str] = None
    description: Optional[str] = None
    hf_id: Optional[str] = None
    tags: list[str] = Field(default_factory=list)
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec] = Field(min_length=1)
    reference: str = Field(min_length=1)
    constraints: list[Constraint] = Field(default_factory=list)
    custom_inputs_entrypoint: Optional[str] = None

    @field_validator("axes", "inputs", "outputs")
    @classmethod
    def _identifiers(cls, v: dict) -> dict:
        for k in v:
            if not _IDENT.match(k):
                raise ValueError(f"{k!r} is not a valid identifier")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Definition":
        names = set(self.axes)
        for aname, ax in self.axes.items():
            if isinstance(ax, AxisExpr):
                unknown = axis_expr.names(ax.expression) - names
                if unknown:
                    raise ValueError(f"axes.{aname}: expression names unknown axes {sorted(unknown)}")
        self._expr_order()  # raises on cycles
        tensors = {k for g in (self.inputs, self.outputs) for k, t in g.items() if not t.is_scalar}
        for i, c in enumerate(self.constraints):
            plain, tnames = axis_expr.constraint_names(c)
            unknown = plain - names - self.scalar_input_names
            if unknown:
                raise ValueError(f"constraints.{i}: {c!r} names unknown axes {sorted(unknown)}")
            if tnames - tensors:
                raise ValueError(f"constraints.{i}: {c!r} names unknown tensors "
                                 f"{sorted(tnames - tensors)}")
            for t, k in axis_expr.tensor_dims(c):
                spec = self.inputs.get(t) or self.outputs[t]
                rank = len(spec.shape or [])
                if not -rank <= k < rank:
                    raise ValueError(f"constraints.{i}: {c!r} reads dimension {k} of {t}, "
                                     f"which has rank {rank}")
        for group in ("inputs", "outputs"):
            for tname, t in getattr(self, group).items():
                for d in t.shape or []:
                    if isinstance(d, str) and d not in names:
                        raise ValueError(f"{group}.{tname}.shape: unknown axis {d!r}")
        dup = set(self.inputs) & set(self.outputs)
        if dup:
            raise ValueError(f"outputs: names also used as inputs: {sorted(dup)}")
        funcs = _top_level_functions(self.reference)
        if "run" not in funcs:
            raise ValueError("reference: must define a top-level function `run`")
        if self.custom_inputs_entrypoint and self.custom_inputs_entrypoint not in funcs:
            raise ValueError(f"custom_inputs_entrypoint: {self.custom_inputs_entrypoint!r} "
                             "is not a function defined in reference")
        return self

    # ---- derived views -------------------------------------------------------------------
    @property
    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if isinstance(a, AxisConst)}

    @property
    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if isinstance(a, AxisVar)]

    @property
    def scalar_input_names(self) -> set[str]:
        return {k for k, t in self.inputs.items() if t.is_scalar}

    def _expr_order(self) -> list[str]:
        """Expr axes in an order where each comes after the axes it uses."""
        exprs = {k: axis_expr.names(a.expression) for k, a in self.axes.items()
                 if isinstance(a, AxisExpr)}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(k: str, stack: tuple[str, ...]) -> None:
            if state.get(k) == 2:
                return
            if state.get(k) == 1:
                raise ValueError(f"axes: cyclic expressions {' -> '.join(stack + (k,))}")
            state[k] = 1
            for dep in exprs[k]:
                if dep in exprs:
                    visit(dep, stack + (k,))
            state[k] = 2
            order.append(k)

        for k in exprs:
            visit(k, ())
        return order

    def resolve_axes(self, var_values: dict[str, int]) -> dict[str, int]:
        """Every axis's concrete value for one workload; checks the constraints.

        Raises ValueError naming the axis or constraint that fails."""
        missing = [k for k in self.var_axes if k not in var_values]
        if missing:
            raise ValueError(f"var axes missing: {missing}")
        env: dict[str, int] = dict(self.const_axes)
        for k in self.var_axes:
            env[k] = int(var_values[k])
        for k in self._expr_order():
            expr = self.axes[k].expression
            env[k] = axis_expr.as_int(axis_expr.evaluate(expr, env), expr)
            if env[k] < 0:
                raise ValueError(f"axis {k} = {expr} evaluates to {env[k]} < 0")
        return env

    def check_constraints(self, env: dict[str, int | float], tensors: Optional[dict] = None) -> None:
        """Check every constraint. Tensor facts use `tensors` (name -> tensor) when given, else the
        shapes the definition implies; element reads (`T[i].item()`) wait for data then."""
        if not self.constraints:
            return
        if tensors is None:
            tensors = {}
            if all(k in env for k in self.axes):
                tensors = {k: s for k, s in {**self.input_shapes(env), **self.output_shapes(env)}.items()
                           if s is not None}
        for c in self.constraints:
            try:
                ok = axis_expr.evaluate_constraint(c, env, tensors)
            except axis_expr.NeedsData:
                continue
            except axis_expr.ExprError as e:
                # A constraint may name a scalar input the workload does not bind; skip only then.
                plain, tnames = axis_expr.constraint_names(c)
                if any(n not in env for n in plain) or any(t not in tensors for t in tnames):
                    continue
                raise ValueError(f"constraint {c!r}: {e}") from None
            if not ok:
                plain, tnames = axis_expr.constraint_names(c)
                vals = {n: env[n] for n in sorted(plain) if n in env}
                vals.update({f"{t}.shape": tuple(tensors[t]) for t in sorted(tnames)
                             if isinstance(tensors.get(t), (tuple, list))})
                raise ValueError(f"constraint {c!r} does not hold for {vals}")

    def shape_of(self, spec: TensorSpec, env: dict[str, int]) -> Optional[tuple[int, ...]]:
        if spec.shape is None:
            return None
        return tuple(d if isinstance(d, int) else env[d] for d in spec.shape)

    def input_shapes(self, env: dict[str, int]) -> dict[str, Optional[tuple[int, ...]]]:
        return {k: self.shape_of(t, env) for k, t in self.inputs.items()}

    def output_shapes(self, env: dict[str, int]) -> dict[str, Optional[tuple[int, ...]]]:
        return {k: self.shape_of(t, env) for k, t in self.outputs.items()}

    def outputs_by_name(self, result: dict) -> list:
        """A reference's dict return value as its outputs in the definition's order (other keys
        ignored); the evaluator and the compiler's trace read a returned dict this one way."""
        missing = [k for k in self.outputs if k not in result]
        if missing:
            raise ValueError(f"reference returned a dict without {missing}")
        return [result[k] for k in self.outputs]

    @cached_property
    def reference_functions(self) -> set[str]:
        return set(_top_level_functions(self.reference))


_CO_OPTIMIZED = 0x0001  # set on function code objects, not on class bodies (inspect.CO_OPTIMIZED)


@lru_cache(maxsize=1024)  # parsing a long reference is the costliest step of loading a definition
def _top_level_functions(source: str) -> frozenset[str]:
    """Functions the module defines at its top level. Compiled to bytecode (never run), which is
    ~2.5x faster than building an AST and also catches errors ast.parse lets through."""
    try:
        code = compile(source, "<reference>", "exec", dont_inherit=True)
    except SyntaxError as e:
        raise ValueError(f"reference: Python syntax error at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # e.g. a NUL byte
        raise ValueError(f"reference: {e}") from None
    except (RecursionError, MemoryError):
        raise ValueError("reference: nested too deeply to compile") from None
    return frozenset(c.co_name for c in code.co_consts if isinstance(c, types.CodeType)
                     and c.co_flags & _CO_OPTIMIZED and not c.co_name.startswith("<"))
