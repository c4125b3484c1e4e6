"""The structure of a reference as the family matchers read it: its traced ATen graph.

`trace(defn)` runs the reference's `run` under make_fx on fake tensors (no memory, no time) with
the definition's inputs at small sizes, and returns the ops it ran in order: each op's ATen target,
its arguments (a definition input, an earlier op, or a python constant), and its output's shape and
dtype. Inputs are passed by the definition's input names (as the evaluator does), so what a family
learns from the trace is independent of how the reference names its variables, orders independent
statements or words its description. A reference that make_fx cannot trace on fake tensors
(data-dependent control flow: `.item()`, loops over index values) gives None.

Only torch, stdlib and the problem models are imported; the trace is cached per definition content.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..problem.definition import Definition
from .pointwise_trace import _axis_values, _shape
from .trace_guard import call_budget, quiet_fake_tensor_logs

# variable axes get these sizes (distinct primes-ish, and > 1 so broadcasting is visible)
VAR_SIZES = (3, 5, 7, 11, 13, 17)
_cache: dict[str, Optional["Traced"]] = {}


@dataclass(frozen=True)
class In:
    """A definition input (by its definition name)."""
    name: str


@dataclass(frozen=True)
class Ref:
    """The output of op number `i` (item `item` of a multi-output op)."""
    i: int
    item: int = 0


Arg = Union[In, Ref, int, float, bool, str, None, tuple]


@dataclass
class Op:
    target: str                     # "aten.mm.default"
    args: tuple                     # positional args (In / Ref / constants / tuples of them)
    kwargs: dict
    shape: Optional[tuple]          # of the (first) output
    dtype: Optional[str]            # "bfloat16", "float8_e4m3fn", ...

    @property
    def name(self) -> str:
        """The op without namespace and overload: "mm", "_to_copy", "amax"."""
        parts = self.target.split(".")
        return parts[1] if len(parts) >= 2 else self.target

    def refs(self) -> list:
        out = []

        def walk(a):
            if isinstance(a, (In, Ref)):
                out.append(a)
            elif isinstance(a, (tuple, list)):
                for x in a:
                    walk(x)
        walk(self.args)
        walk(tuple(self.kwargs.values()))
        return out

    def constants(self) -> list:
        out = []

        def walk(a):
            if isinstance(a, bool):
                return
            if isinstance(a, (int, float)):
                out.append(a)
            elif isinstance(a, (tuple, list)):
                for x in a:
                    walk(x)
        walk(self.args)
        walk(tuple(v for k, v in self.kwargs.items() if k in ("min", "max", "other", "alpha")))
        return out


@dataclass
class Traced:
    ops: list[Op]
    outputs: dict[str, Any]             # definition output name -> In / Ref
    sizes: dict[str, int]               # the axis values the trace ran at
    input_shapes: dict[str, tuple] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)   # scalar input -> the value it ran with

    def scalar_named(self, value) -> Optional[str]:
        """The scalar input a constant of the trace came from, None for a literal of the reference."""
        return next((k for k, v in self.scalars.items() if v == value and not isinstance(value, bool)), None)

    def names(self) -> Counter:
        return Counter(o.name for o in self.ops)

    def find(self, *names: str) -> list[int]:
        return [i for i, o in enumerate(self.ops) if o.name in names]

    def users(self, ref) -> list[int]:
        return [i for i, o in enumerate(self.ops) if ref in o.refs()]

    def sources(self, ref) -> set[str]:
        """The definition inputs `ref` (an In or a Ref) depends on."""
        seen, todo, out = set(), [ref], set()
        while todo:
            r = todo.pop()
            if isinstance(r, In):
                out.add(r.name)
            elif isinstance(r, Ref) and r.i not in seen:
                seen.add(r.i)
                todo += self.ops[r.i].refs()
        return out

    def shape_of(self, ref) -> Optional[tuple]:
        if isinstance(ref, In):
            return self.input_shapes.get(ref.name)
        return self.ops[ref.i].shape if isinstance(ref, Ref) else None


def chain(g: Traced, ref, through: set) -> tuple:
    """Follow `ref` back through single-input ops named in `through` (their first tensor argument):
    (where it starts, the names of the ops passed, last first)."""
    passed = []
    while isinstance(ref, Ref) and g.ops[ref.i].name in through:
        passed.append(g.ops[ref.i].name)
        op = g.ops[ref.i]
        ref = next((a for a in op.args if isinstance(a, (In, Ref))), None)
    return ref, passed


def definition_key(defn: Definition) -> str:
    """A hash of what a definition computes on (reference, tensors, axes): the trace cache key."""
    blob = json.dumps([defn.reference, {k: [v.dtype, v.shape] for k, v in defn.inputs.items()},
                       {k: [v.dtype, v.shape] for k, v in defn.outputs.items()},
                       {k: [getattr(a, "type", ""), getattr(a, "value", None), getattr(a, "expression", None)]
                        for k, a in defn.axes.items()}], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def trace(defn: Definition, scalars: Optional[dict] = None) -> Optional[Traced]:
    """The reference's ATen ops on fake tensors, or None where make_fx cannot trace it. `scalars`
    overrides the values scalar inputs run with (a branch on a scalar, `if p > 0:`, shows the path
    that value takes)."""
    key = definition_key(defn) + json.dumps(scalars or {}, sort_keys=True)
    if key not in _cache:
        _cache[key] = _trace_in_sandbox(defn, scalars or {})
    return _cache[key]


TRACE_TIMEOUT_S = 120.0


def _trace_in_sandbox(defn: Definition, scalars: dict) -> Optional[Traced]:
    """The reference is a dataset's code: _trace runs in the sandbox (solforge.sandbox) and the ops
    come back as tagged JSON of these dataclasses only; any failure means "no structure"."""
    from ..sandbox import SandboxError
    from ..sandbox.jsonable import decode
    from .trace_cache import sandboxed_trace

    try:
        out = sandboxed_trace(__name__, "trace_entry", {"definition": defn.model_dump(mode="json"),
                                                         "scalars": scalars},
                              timeout_s=TRACE_TIMEOUT_S, code=(__name__,))
        return decode(out["traced"], (Traced, Op, In, Ref)) if out.get("traced") is not None else None
    except (SandboxError, KeyError, ValueError, TypeError):
        return None


def trace_entry(payload: dict) -> dict:
    """Sandbox entry point: {"traced": tagged JSON of a Traced, or None}."""
    from ..sandbox.jsonable import encode

    defn = Definition.model_validate(payload["definition"])
    try:
        with quiet_fake_tensor_logs():
            g = _trace(defn, payload.get("scalars") or {})
    except Exception:  # noqa: BLE001 - a foreign reference failing to trace means "no structure"
        g = None
    return {"traced": encode(g) if g is not None else None}


def _dtype_name(dt) -> Optional[str]:
    return str(dt).replace("torch.", "") if dt is not None else None


def _trace(defn: Definition, overrides: dict) -> Optional[Traced]:
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..problem.dtypes import to_torch

    vals = _axis_values(defn, list(VAR_SIZES))
    ns: dict[str, Any] = {}
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    fn = ns["run"]
    names = list(defn.inputs)
    tensors, scalars, shapes = [], {}, {}
    for i, k in enumerate(names):
        spec = defn.inputs[k]
        if spec.is_scalar:
            # a scalar input: a distinct value, so a matcher can tell which constant came from it
            scalars[k] = (0.5 + 0.0078125 * i) if "float" in spec.dtype else (i + 2)
            scalars[k] = overrides.get(k, scalars[k])
        else:
            shape = tuple(_shape(defn, spec.shape, vals))
            shapes[k] = shape
            tensors.append((k, torch.empty(shape, dtype=to_torch(spec.dtype), device="meta")))
    tnames = [k for k, _ in tensors]

    def call(*a):
        with call_budget():
            return fn(**{**scalars, **dict(zip(tnames, a))})
    gm = make_fx(call, tracing_mode="fake")(*[t for _, t in tensors])

    index: dict[str, Any] = {}
    ops: list[Op] = []
    placeholders = iter(tnames)

    def conv(a):
        if hasattr(a, "op") and hasattr(a, "name") and a.__class__.__name__ == "Node":
            return index.get(a.name)
        if isinstance(a, (list, tuple)):
            return tuple(conv(x) for x in a)
        if isinstance(a, torch.dtype):
            return _dtype_name(a)
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return None
        if isinstance(a, float) and math.isnan(a):
            return "nan"
        return a

    outputs: dict[str, Any] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            index[n.name] = In(next(placeholders))
        elif n.op == "call_function":
            target = str(n.target)
            if target == "<built-in function getitem>":
                src = conv(n.args[0])
                index[n.name] = Ref(src.i, n.args[1]) if isinstance(src, Ref) else src
                continue
            val = n.meta.get("val")
            first = val[0] if isinstance(val, (list, tuple)) and val else val
            shape = tuple(int(s) for s in first.shape) if hasattr(first, "shape") else None
            ops.append(Op(target, conv(tuple(n.args)), {k: conv(v) for k, v in n.kwargs.items()},
                          shape, _dtype_name(getattr(first, "dtype", None))))
            index[n.name] = Ref(len(ops) - 1)
        elif n.op == "output":
            res = n.args[0]
            res = list(res) if isinstance(res, (list, tuple)) else [res]
            if len(res) == 1 and isinstance(res[0], (list, tuple)):
                res = list(res[0])
            if len(res) != len(defn.outputs):
                return None
            outputs = {k: conv(r) for k, r in zip(defn.outputs, res)}
    return Traced(ops, outputs, vals, shapes, scalars)
