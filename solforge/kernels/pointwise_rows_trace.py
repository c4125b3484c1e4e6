"""Read a reference as elementwise ops plus reductions over the last dim (row statistics that are
broadcast back: mean, sum, var, std with keepdim), for the pointwise_rows family.

`trace_rows(defn)` runs the reference under make_fx on fake tensors twice (different var-axis sizes
and scalar values, as pointwise_trace does) and returns a `RowGraph`, or None with the reason in
`last_reason`. Every output has the full shape [..., R]; every node is one of
  const  a value that is the same everywhere (0-d inputs, float scalar inputs, numbers),
  row    one value per row ([..., 1]: a row statistic or a [..., 1] input),
  elem   one value per element (computed per element from inputs read with broadcasting).
A reduction turns an elem value into a row value. mean = sum * (1/R) (ATen's MeanOps factor);
var/std (correction c) are lowered to two sums, sum(x) and sum((x - mean)^2), divided by R - c.

Branch-free tracing: a reference may compute a value of the scalar inputs with Python control
flow on tensors (053's inverse normal CDF: `if mask.any(): result[mask] = f(p[mask])`). While
tracing, `bool(tensor)` is True (every branch is taken), `t[mask]` is `t`, and `t[mask] = v` is
`t.copy_(where(mask, v, t))`. That is the same function only when each mask a branch tests is the
mask of a masked assignment (checked), so that the branch's values land exactly where the mask
holds; the GPU check against the reference (on every workload) confirms it. `torch.tensor(number)`
becomes `torch.full((), number)` so that its value is seen (a float scalar input's sentinel there
becomes that input).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Optional

from ..problem.definition import Definition
from .trace_guard import call_budget, quiet_fake_tensor_logs
from . import pointwise_trace as pt
from .pointwise_trace import FLOAT_TYPES, INPUT_TYPES, InputMap, Node

last_reason = ""
_GUARDS: Optional[list] = None  # while a reference runs: Python comparisons of scalar inputs


class _Scalar(float):
    """A float scalar input's sentinel that records Python comparisons made on it (053:
    `if target_sparsity == 0.0: return inputs`): the trace follows one side of such a branch, so
    the kernel checks at its start that the call's value takes the same side, and traps if not."""

    def _cmp(self, op: str, other, result: bool) -> bool:
        if _GUARDS is not None and isinstance(other, (int, float)) and not isinstance(other, bool):
            _GUARDS.append((self.index, op, float(other), bool(result)))
        return result

    __hash__ = float.__hash__

    @classmethod
    def at(cls, value: float, index: int) -> "_Scalar":
        """The sentinel of the index-th scalar input (the kernel's guard names it by that index)."""
        sc = cls(value)
        sc.index = index
        return sc

    def __eq__(self, o): return self._cmp("==", o, float(self) == o)
    def __ne__(self, o): return self._cmp("!=", o, float(self) != o)
    def __lt__(self, o): return self._cmp("<", o, float(self) < o)
    def __le__(self, o): return self._cmp("<=", o, float(self) <= o)
    def __gt__(self, o): return self._cmp(">", o, float(self) > o)
    def __ge__(self, o): return self._cmp(">=", o, float(self) >= o)

_ALIAS = {"aten.lift_fresh_copy.default", "aten.alias.default", "aten.detach.default",
          "aten.clone.default"}
_REDUCE = {"aten.mean.dim", "aten.sum.dim_IntList", "aten.var.correction", "aten.std.correction"}
_EXTRA = {"aten.where.self", "aten.full.default", "aten.zeros_like.default", "aten.ones_like.default",
          "aten.copy_.default", "aten.any.default"} | _ALIAS | _REDUCE
_ELEMENTWISE = (pt.SUPPORTED - {"aten.sum.default", "aten.sum.dim_IntList"})


@dataclass
class RowGraph:
    inputs: list[InputMap]
    kinds: list[str]                 # per input: "direct", "elem" (broadcast per element), "row", "const"
    scalars: list[str]
    nodes: list[Node]                # in evaluation order; op "const", "row.*" are internal
    klass: dict[str, str]            # node -> const / row / elem
    level: dict[str, int]            # node -> the pass after which it is known (0: before any)
    sums: list[str]                  # row.sum nodes, each a block reduction
    outputs: list[tuple[str, str, str]]
    numel: str                       # elements of the output
    rlen: str                        # R, the last dim (an expression)
    passes: int = 1                  # reduction passes (the output pass comes after them)
    ops: list[str] = field(default_factory=list)
    guards: list = field(default_factory=list)  # (scalar index, op, number, result) the trace assumed

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def expr(self, n: Node) -> str:
        """C expression of one node in float (operands v_<arg>), rounded to its dtype."""
        if n.op == "const":
            v = n.args[0]
            return v[1] if isinstance(v, tuple) else pt._lit(float(v))
        if n.op == "row.sum":
            return "pw_red_" + n.name  # filled in by the kernel after the block reduction
        if n.op == "row.mean":
            return pt._round(f"(v_{n.args[0]} * pw_rinv)", n.dtype)
        if n.op == "row.dev2":
            return f"((v_{n.args[0]} - v_{n.args[1]}) * (v_{n.args[0]} - v_{n.args[1]}))"
        if n.op == "row.var":
            c = pt._lit(float(n.kwargs["correction"]))
            body = f"(v_{n.args[0]} / fmaxf(pw_rlen - {c}, 0.0f))"
            return pt._round(f"sqrtf({body})" if n.kwargs.get("std") else body, n.dtype)
        if n.op == "aten.where.self":
            a = pt._opnd(n.args[1], n, self)
            b = pt._opnd(n.args[2], n, self)
            return pt._round(f"((v_{n.args[0]} != 0.0f) ? {a} : {b})", n.dtype)
        if n.op in ("aten.zeros_like.default", "aten.ones_like.default"):
            return "0.0f" if "zeros" in n.op else "1.0f"
        return pt._expr(n, self)


class _BranchFree:
    """The TorchFunctionMode described in the module doc (built lazily: torch imports late)."""

    def __new__(cls):
        import torch
        from torch.overrides import TorchFunctionMode

        class Mode(TorchFunctionMode):
            def __init__(self):
                super().__init__()
                self.tested: list = []     # tensors a branch tested (bool())
                self.assigned: list = []   # masks of masked assignments

            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                is_mask = lambda a: isinstance(a, torch.Tensor) and a.dtype == torch.bool
                if func is torch.Tensor.__bool__:
                    self.tested.append(args[0])
                    return True
                if func is torch.Tensor.__getitem__ and is_mask(args[1]):
                    if tuple(args[1].shape) != tuple(args[0].shape):
                        raise ValueError("a boolean index of another shape")
                    return args[0]
                if func is torch.Tensor.__setitem__ and is_mask(args[1]):
                    if tuple(args[1].shape) != tuple(args[0].shape):
                        raise ValueError("a boolean index of another shape")
                    self.assigned.append(args[1])
                    args[0].copy_(torch.where(args[1], args[2], args[0]))
                    return None
                return func(*args, **kwargs)
        return Mode()


def _run(defn: Definition, sizes: list[int], sentinel: float):
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    fn, names, vals, args = pt.reference_and_meta_args(defn, sizes, sentinel, _Scalar.at)
    orig_tensor = torch.tensor
    modes = []

    def number_tensor(data, *a, **kw):  # torch.tensor(3.5) -> full((), 3.5): the value is traced
        if isinstance(data, (int, float)) and not isinstance(data, bool) and not a:
            dt = kw.get("dtype") or (torch.get_default_dtype() if isinstance(data, float) else torch.int64)
            return torch.full((), data, dtype=dt, device=kw.get("device"))
        return orig_tensor(data, *a, **kw)

    def call(*a):
        mode = _BranchFree()
        modes.append(mode)
        global _GUARDS
        _GUARDS = guards = []
        modes.append(guards)
        try:
            with mode, call_budget():
                return fn(**dict(zip(names, a)))
        finally:
            _GUARDS = None
    torch.tensor = number_tensor
    try:
        with quiet_fake_tensor_logs():
            gm = make_fx(call, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)
    finally:
        torch.tensor = orig_tensor
    gm.pw_guards = sorted(set(modes[-1]))
    modes.pop()
    m = modes[-1]
    # every branch taken must be followed by a masked assignment (its mask's any() was tested)
    if len(m.tested) > len(m.assigned):
        raise ValueError("a branch on a tensor value that no masked assignment follows")
    return gm, vals, args


def _graph(defn: Definition, gm, args, full: list[int]) -> tuple[list[Node], list, dict]:
    """Nodes (aliases folded, reductions lowered), output node names, node -> shape."""
    sentinels = {}
    scalar_names = [k for k in defn.inputs if defn.inputs[k].is_scalar]
    for i, k in enumerate(defn.inputs):
        if defn.inputs[k].is_scalar:
            sentinels[args[i]] = ("scalar", f"s{scalar_names.index(k)}")
    tensors = [k for k in defn.inputs if not defn.inputs[k].is_scalar]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = list(defn.inputs)
    alias: dict[str, str] = {}
    nodes: list[Node] = []
    shapes: dict[str, tuple] = {}
    sums: dict[str, str] = {}  # arg -> row.sum node (one reduction per summed value)
    outs: list = []

    def ref(a):
        if hasattr(a, "op"):
            return alias.get(a.name, a.name)
        if isinstance(a, float) and a in sentinels:
            return sentinels[a]
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return a
        raise ValueError(f"unsupported argument {a!r}")

    def add(n: Node, shape) -> str:
        nodes.append(n)
        shapes[n.name] = tuple(shape)
        return n.name

    def row_sum(x: str) -> str:
        if x not in sums:
            sums[x] = add(Node(f"rs{len(sums)}", "row.sum", [x], "float32"), shapes[x][:-1] + (1,))
        return sums[x]

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            k = input_names[placeholders.index(n)]
            if defn.inputs[k].is_scalar:
                continue
            dt = pt._TORCH_NAME.get(str(n.meta["val"].dtype))
            if dt is None:
                raise ValueError(f"input {k}: dtype {n.meta['val'].dtype} not supported")
            add(Node(n.name, "input", [f"x{tensors.index(k)}"], dt), n.meta["val"].shape)
            continue
        if n.op == "output":
            res = n.args[0] if isinstance(n.args[0], (tuple, list)) else [n.args[0]]
            outs = [alias.get(r.name, r.name) if hasattr(r, "name") else None for r in res]
            continue
        if n.op != "call_function":
            raise ValueError(f"graph node {n.op} {n.target}")
        target = str(n.target)
        val = n.meta.get("val")
        dt = pt._TORCH_NAME.get(str(getattr(val, "dtype", "")))
        if dt is None:
            raise ValueError(f"{target} gives dtype {getattr(val, 'dtype', None)}")
        shape = tuple(val.shape)
        if target not in _ELEMENTWISE and target not in _EXTRA:
            raise ValueError(f"op {target} is neither elementwise nor a row reduction")
        if target in _ALIAS or target == "aten.any.default":
            src = ref(n.args[0])
            if target == "aten.any.default" and math.prod(shapes[src]) != 1:
                raise ValueError("any() over more than one element")
            alias[n.name] = src
            continue
        if target == "aten.copy_.default":  # dst now holds src (same shape and dtype: else refuse)
            dst, src = ref(n.args[0]), ref(n.args[1])
            if not isinstance(src, str) or shapes[src] != shapes[dst] or \
                    next(m for m in nodes if m.name == src).dtype != dt:
                raise ValueError("copy_ between different shapes or dtypes")
            alias[n.name] = src
            continue
        if target == "aten.full.default":
            if list(n.args[0]) != []:
                raise ValueError("full() of more than one element")
            add(Node(n.name, "const", [ref(n.args[1])], dt), ())
            continue
        if target in _REDUCE:
            x = ref(n.args[0])
            dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
            keep = n.args[2] if len(n.args) > 2 and target in ("aten.mean.dim", "aten.sum.dim_IntList") \
                else n.kwargs.get("keepdim", False)
            nd = len(shapes[x])
            if nd != len(full) or [d % nd for d in (dims or [])] != [nd - 1] or not keep or \
                    n.kwargs.get("dtype") is not None:
                raise ValueError(f"{target} over dims {dims} (keepdim={keep}), not the last one kept")
            if target == "aten.sum.dim_IntList":
                add(Node(n.name, "aten._to_copy.default" if dt != "float32" else "aten.alias.default",
                         [row_sum(x)], dt), shape)
                continue
            if target == "aten.mean.dim":
                add(Node(n.name, "row.mean", [row_sum(x)], dt), shape)
                continue
            m = add(Node(f"{n.name}_m", "row.mean", [row_sum(x)], "float32"), shape)
            d2 = add(Node(f"{n.name}_d2", "row.dev2", [x, m], "float32"), shapes[x])
            add(Node(n.name, "row.var", [row_sum(d2)], dt,
                     {"correction": 1 if n.kwargs.get("correction") is None else n.kwargs["correction"],
                      "std": target == "aten.std.correction"}), shape)
            continue
        kw = {k: v for k, v in n.kwargs.items() if k not in ("dtype", "layout", "device",
                                                             "memory_format", "pin_memory")}
        if target == "aten._to_copy.default" and set(n.kwargs) - {"dtype"}:
            raise ValueError("_to_copy with more than a dtype")
        add(Node(n.name, target, [ref(a) for a in n.args], dt,
                 {k: ref(v) if k in ("alpha", "min", "max") else v for k, v in kw.items()}), shape)
    return nodes, outs, shapes


_CACHE: dict[str, Optional[RowGraph]] = {}


def trace_rows(defn: Definition) -> Optional[RowGraph]:
    key = hashlib.sha256(json.dumps([defn.reference, defn.model_dump(mode="json", exclude={"description"})],
                                    sort_keys=True, default=str).encode()).hexdigest()
    if key not in _CACHE:
        global last_reason
        # the trace runs the problem's reference: in the sandbox (pointwise_trace.trace_in_sandbox)
        g, why = pt.trace_in_sandbox(__name__, defn, (RowGraph, Node, InputMap))
        if g is None:
            last_reason = why
        _CACHE[key] = g
    return _CACHE[key]


def _trace(defn: Definition) -> RowGraph:
    shapes_out = [list(s.shape or []) for s in defn.outputs.values()]
    if not shapes_out or any(s != shapes_out[0] for s in shapes_out) or not shapes_out[0]:
        raise ValueError("outputs are not all of one (non-scalar) shape")
    full_dims = shapes_out[0]
    if any(s.dtype not in FLOAT_TYPES for s in defn.outputs.values()):
        raise ValueError("non-float output")
    tensors = [k for k in defn.inputs if not defn.inputs[k].is_scalar]
    if not tensors or any(defn.inputs[k].dtype not in INPUT_TYPES for k in tensors):
        raise ValueError("no tensor inputs, or one of a dtype other than float/bool")
    traced = []
    guards = []
    for sizes, sentinel in zip(pt._SIZES, pt._SENTINEL):
        gm, vals, args = _run(defn, sizes, sentinel)
        full = pt._shape(defn, full_dims, vals)
        traced.append((*_graph(defn, gm, args, full), full))
        guards.append(gm.pw_guards)
    (n1, o1, shp1, full), (n2, o2, _, _) = traced
    if guards[0] != guards[1]:
        raise ValueError("Python branches on a scalar input go different ways for the two traces")
    sig = lambda ns: [(n.op, n.args, n.dtype, sorted(n.kwargs.items())) for n in ns]
    if sig(n1) != sig(n2) or o1 != o2:
        raise ValueError("the graph depends on the sizes or the scalar values")
    if len(o1) != len(defn.outputs) or any(o is None for o in o1):
        raise ValueError("outputs are not graph nodes")
    by = {n.name: n for n in n1}
    used = set(o1)
    for n in reversed(n1):  # dead nodes (branch tests, unused values) are dropped
        if n.name in used:
            used.update(a for a in n.args if isinstance(a, str))
    nodes = [n for n in n1 if n.name in used]
    sums = [n.name for n in nodes if n.op == "row.sum"]
    if not sums:
        raise ValueError("no reduction over the last dim (the pointwise family's case)")
    maps = [pt._broadcast(defn, k, full_dims) for k in tensors]
    kinds = []
    for k, m in zip(tensors, maps):
        pad = [1] * (len(full_dims) - len(defn.inputs[k].shape or [])) + list(defn.inputs[k].shape or [])
        kinds.append("direct" if m.direct else "const" if m.mod == "1"
                     else "row" if str(pad[-1]) == "1" else "elem")
    klass: dict[str, str] = {}
    level: dict[str, int] = {}
    full_n, row_n = math.prod(full), math.prod(full[:-1])
    for n in nodes:
        if n.op == "input":
            kind = kinds[int(n.args[0][1:])]
            klass[n.name] = {"direct": "elem", "elem": "elem"}.get(kind, kind)
            level[n.name] = 0
            continue
        srcs = [a for a in n.args if isinstance(a, str)]
        level[n.name] = max([level[a] for a in srcs], default=0) + (n.op == "row.sum")
        if n.op == "row.sum":
            if klass[n.args[0]] != "elem" or math.prod(shp1[n.args[0]]) != full_n:
                raise ValueError("a reduction of a value that is not one per element")
            klass[n.name] = "row"
            continue
        ks = {klass[a] for a in srcs}
        klass[n.name] = "elem" if "elem" in ks else "row" if "row" in ks else "const"
        numel = math.prod(shp1[n.name])
        if klass[n.name] == "row" and (numel != row_n or list(shp1[n.name])[-1:] != [1]):
            raise ValueError(f"{n.op} gives a per-row value of shape {shp1[n.name]}")
        if klass[n.name] == "const" and numel != 1:
            raise ValueError(f"{n.op} gives {numel} equal values (an expand)")
        if klass[n.name] == "elem" and full_n % max(numel, 1):
            raise ValueError(f"{n.op} gives {numel} elements, not a broadcast of {full}")
        if n.op == "aten.sum.default":
            raise ValueError("a sum over everything")
    outputs = []
    for (name, spec), o in zip(defn.outputs.items(), o1):
        if by[o].op == "input" or klass[o] != "elem" or math.prod(shp1[o]) != full_n:
            raise ValueError(f"output {name} is not a per-element value of the full shape")
        outputs.append((name, o, spec.dtype))
    g = RowGraph(maps, kinds, [k for k in defn.inputs if defn.inputs[k].is_scalar], nodes, klass,
                 level, sums, outputs, pt._prod(full_dims), str(full_dims[-1]),
                 passes=max(level[s] for s in sums), ops=sorted({n.op for n in nodes if n.op != "input"}),
                 guards=guards[0])
    for n in nodes:  # every expression must be writable (unsupported forms raise here)
        if n.op not in ("input", "row.sum"):
            g.expr(n)
    return g
