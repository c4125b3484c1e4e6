"""Read a reference as a graph of elementwise ATen ops and write it as one CUDA expression.

`trace_pointwise(defn)` runs the reference under torch's make_fx on fake (meta) tensors, twice,
with different sizes for the var axes and different values for the scalar inputs. It returns a
`PointwiseGraph` when every op is elementwise (with broadcasting) over the output's shape, the two
traces have the same ops and constants (so neither sizes nor scalar values change the function),
and each input broadcasts to the output as one contiguous block of its dims; else None with the
reason in `last_reason`.

`PointwiseGraph.cuda_eval()` writes the body: every op computed in float32 (PyTorch's opmath), its
operands first rounded to the op's result dtype (TensorIterator casts them to the common dtype) and
its result rounded to that dtype again; Python scalars stay in float32. No FMA contraction (the
family compiles with -fmad=false), so fp32 chains match eager PyTorch's separate kernels bit for bit
except for the library functions (sin, exp, tanh: the same CUDA libm that PyTorch calls).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from ..problem import axis_expr
from ..problem.definition import Definition

FLOAT_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
_TORCH_NAME = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}
_SIZES = ([3, 5, 7, 11, 13, 17, 19, 23], [29, 31, 37, 41, 43, 47, 53, 59])  # var axes, two traces
_SENTINEL = (0.8134765625, 0.6806640625)  # scalar inputs, two traces (exact in bf16 and fp32)

last_reason = ""


@dataclass
class Node:
    name: str
    op: str            # aten overload name, "input", "scalar"
    args: list         # node names, python numbers
    dtype: str         # float32 / float16 / bfloat16
    kwargs: dict = field(default_factory=dict)


@dataclass
class InputMap:
    """How a tensor input is read at output element i: in[(i / div) % mod] (div, mod: expressions)."""
    name: str
    dtype: str
    direct: bool       # same shape as the output: vector loads
    div: str = "1"
    mod: str = "1"


@dataclass
class PointwiseGraph:
    inputs: list[InputMap]
    scalars: list[str]            # scalar input names, kernel args in this order
    nodes: list[Node]
    outputs: list[tuple[str, str, str]]   # (output name, node name, dtype)
    numel: str                    # the output's element count, an expression over axes
    ops: list[str]

    def cuda_eval(self) -> str:
        """`pw_eval(x0.., s0.., y0&..)`: the graph at one element, all in float."""
        params = ([f"float x{i}" for i in range(len(self.inputs))]
                  + [f"float s{i}" for i in range(len(self.scalars))]
                  + [f"float& y{i}" for i in range(len(self.outputs))])
        lines = ["__device__ __forceinline__ void pw_eval(" + ", ".join(params) + ") {"]
        for n in self.nodes:
            lines.append(f"    const float v_{n.name} = {_expr(n, self)};")
        for i, (_, node, _) in enumerate(self.outputs):
            lines.append(f"    y{i} = v_{node};")
        lines.append("}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
_UNARY = {  # aten op -> C expression over `a` (float), as PyTorch's CUDA kernels compute it
    "aten.neg.default": "(-{a})", "aten.sin.default": "sinf({a})", "aten.cos.default": "cosf({a})",
    "aten.exp.default": "expf({a})", "aten.tanh.default": "tanhf({a})",
    "aten.sigmoid.default": "(1.0f / (1.0f + expf(-{a})))",
    "aten.silu.default": "({a} / (1.0f + expf(-{a})))",
    "aten.sqrt.default": "sqrtf({a})", "aten.rsqrt.default": "rsqrtf({a})",
    "aten.reciprocal.default": "(1.0f / {a})", "aten.abs.default": "fabsf({a})",
    "aten.relu.default": "fmaxf({a}, 0.0f)", "aten.erf.default": "erff({a})",
    "aten.log.default": "logf({a})", "aten.exp2.default": "exp2f({a})",
    "aten.clone.default": "{a}", "aten._to_copy.default": "{a}", "aten.alias.default": "{a}",
}
_BINARY = {"aten.add.Tensor": "({a} + {b})", "aten.sub.Tensor": "({a} - {b})",
           "aten.mul.Tensor": "({a} * {b})", "aten.div.Tensor": "({a} / {b})",
           "aten.maximum.default": "fmaxf({a}, {b})", "aten.minimum.default": "fminf({a}, {b})"}
SUPPORTED = set(_UNARY) | set(_BINARY) | {"aten.rsub.Scalar", "aten.pow.Tensor_Scalar",
                                          "aten.gelu.default", "aten.clamp.default"}


def _lit(v: float) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"unsupported constant {v!r}")
    return f"((float){float(v)!r})"


def _round(expr: str, dtype: str) -> str:
    return {"float32": expr, "float16": f"rnd_f16({expr})", "bfloat16": f"rnd_bf16({expr})"}[dtype]


def _expr(n: Node, g: PointwiseGraph) -> str:
    if n.op == "input":
        return n.args[0]
    dt = n.dtype

    def opnd(a) -> str:  # a tensor operand is cast to the op's dtype first; scalars stay float
        if isinstance(a, str):
            src = next(m for m in g.nodes if m.name == a)
            return _round("v_" + a, dt) if src.dtype != dt else "v_" + a
        if isinstance(a, tuple) and a[0] == "scalar":
            return a[1]
        return _lit(a)

    op, args = n.op, n.args
    if op in _UNARY:
        body = _UNARY[op].format(a=opnd(args[0]))
    elif op in _BINARY:
        a, b = opnd(args[0]), opnd(args[1])
        alpha = n.kwargs.get("alpha", 1)
        if alpha != 1 and op in ("aten.add.Tensor", "aten.sub.Tensor"):
            b = f"({_lit(alpha)} * {b})"
        if op == "aten.div.Tensor" and not isinstance(args[1], str):
            body = f"({a} * (1.0f / {b}))"  # PyTorch multiplies by the scalar's reciprocal
        else:
            body = _BINARY[op].format(a=a, b=b)
    elif op == "aten.rsub.Scalar":
        alpha = n.kwargs.get("alpha", 1)
        a = opnd(args[0]) if alpha == 1 else f"({_lit(alpha)} * {opnd(args[0])})"
        body = f"({opnd(args[1])} - {a})"
    elif op == "aten.pow.Tensor_Scalar":
        a, e = opnd(args[0]), args[1]
        body = {2: f"({a} * {a})", 3: f"({a} * {a} * {a})", 0.5: f"sqrtf({a})", -1: f"(1.0f / {a})",
                -2: f"(1.0f / ({a} * {a}))", 1: a}.get(e, f"powf({a}, {opnd(e)})")
    elif op == "aten.gelu.default":
        a = opnd(args[0])
        if n.kwargs.get("approximate", "none") == "tanh":
            body = (f"(0.5f * {a} * (1.0f + tanhf(0.7978845608028654f * ({a} + 0.044715f * "
                    f"({a} * {a} * {a})))))")
        else:
            body = f"({a} * 0.5f * (1.0f + erff({a} * 0.7071067811865476f)))"
    elif op == "aten.clamp.default":
        a = opnd(args[0])
        lo = args[1] if len(args) > 1 else n.kwargs.get("min")
        hi = args[2] if len(args) > 2 else n.kwargs.get("max")
        body = a
        if lo is not None:
            body = f"fmaxf({body}, {opnd(lo)})"
        if hi is not None:
            body = f"fminf({body}, {opnd(hi)})"
    else:
        raise ValueError(f"unsupported op {op}")
    return _round(body, dt)


# ----------------------------------------------------------------------------------------------
def _axis_values(defn: Definition, sizes: list[int]) -> dict[str, int]:
    vals = dict(defn.const_axes)
    var = [k for k, a in defn.axes.items() if getattr(a, "type", "") == "var"]
    for k, v in zip(var, sizes):
        vals[k] = v
    for _ in range(len(defn.axes)):  # expr axes may refer to each other
        for k, a in defn.axes.items():
            expr = getattr(a, "expression", None)
            if expr and k not in vals:
                try:
                    vals[k] = int(axis_expr.evaluate(expr, vals))
                except axis_expr.ExprError:
                    pass
    return vals


def _shape(defn: Definition, dims, vals) -> list[int]:
    return [d if isinstance(d, int) else int(vals[d]) if d in vals else int(d) for d in dims or []]


def _run_trace(defn: Definition, sizes: list[int], sentinel: float):
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..problem.dtypes import to_torch

    vals = _axis_values(defn, sizes)
    ns: dict[str, Any] = {}
    exec(compile(defn.reference, f"<reference {defn.name}>", "exec"), ns)
    fn = ns["run"]
    names = list(defn.inputs)
    args = []
    for k in names:
        spec = defn.inputs[k]
        if spec.is_scalar:
            if spec.dtype not in FLOAT_TYPES:
                raise ValueError(f"non-float scalar input {k}")
            args.append(sentinel + 0.0078125 * len(args))
        else:
            args.append(torch.empty(_shape(defn, spec.shape, vals), dtype=to_torch(spec.dtype),
                                    device="meta"))

    def call(*a):
        return fn(**dict(zip(names, a)))
    gm = make_fx(call, tracing_mode="fake")(*args)
    return gm, vals, args


def _graph_of(defn: Definition, gm, args) -> tuple[list[Node], list, list]:
    """(nodes, output node names, placeholder names) with python-number args kept as numbers and
    scalar inputs' sentinel values replaced by ('scalar', 'sK')."""
    sentinels = {}
    scalar_names = [k for k in defn.inputs if defn.inputs[k].is_scalar]
    for i, k in enumerate(defn.inputs):
        if defn.inputs[k].is_scalar:
            sentinels[args[i]] = ("scalar", f"s{scalar_names.index(k)}")
    nodes, outs, ph = [], [], []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = list(defn.inputs)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            idx = placeholders.index(n)
            k = input_names[idx]
            if defn.inputs[k].is_scalar:
                continue
            ph.append(n.name)
            dt = _TORCH_NAME.get(str(n.meta["val"].dtype))
            if dt is None:
                raise ValueError(f"input {k}: dtype {n.meta['val'].dtype} not supported")
            tensors = [x for x in input_names if not defn.inputs[x].is_scalar]
            nodes.append(Node(n.name, "input", [f"x{tensors.index(k)}"], dt))
        elif n.op == "call_function":
            target = str(n.target)
            if target not in SUPPORTED:
                raise ValueError(f"op {target} is not elementwise (or not supported)")
            val = n.meta.get("val")
            dt = _TORCH_NAME.get(str(getattr(val, "dtype", "")))
            if dt is None:
                raise ValueError(f"{target} gives dtype {getattr(val, 'dtype', None)}")
            kw = {k: v for k, v in n.kwargs.items() if k not in ("dtype", "layout", "device",
                                                                 "memory_format", "pin_memory")}
            if target == "aten._to_copy.default" and set(n.kwargs) - {"dtype"}:
                raise ValueError("_to_copy with more than a dtype")

            def arg(a):
                if hasattr(a, "op"):
                    return a.name
                if isinstance(a, float) and a in sentinels:
                    return sentinels[a]
                if isinstance(a, (int, float)) and not isinstance(a, bool):
                    return a
                raise ValueError(f"{target}: unsupported argument {a!r}")
            nodes.append(Node(n.name, target, [arg(a) for a in n.args], dt,
                              {k: arg(v) if k in ("alpha", "min", "max") else v for k, v in kw.items()}))
        elif n.op == "output":
            res = n.args[0]
            res = res if isinstance(res, (tuple, list)) else [res]
            outs = [r.name if hasattr(r, "name") else None for r in res]
    return nodes, outs, ph


def _broadcast(defn: Definition, name: str, out_dims: list) -> InputMap:
    """The input's dims right-aligned on the output's: equal dims form one contiguous block, the
    others are 1 (or absent)."""
    spec = defn.inputs[name]
    dims = list(spec.shape or [])
    if dims == out_dims:
        return InputMap(name, spec.dtype, True, "1", _prod(out_dims))
    if len(dims) > len(out_dims):
        raise ValueError(f"input {name} has more dims than the output")
    pad = [1] * (len(out_dims) - len(dims)) + dims
    same = [i for i, (a, b) in enumerate(zip(pad, out_dims)) if a == b and a != 1]
    for i, (a, b) in enumerate(zip(pad, out_dims)):
        if a != b and a not in (1, "1"):
            raise ValueError(f"input {name}: dim {a} does not broadcast to {b}")
    if not same:
        return InputMap(name, spec.dtype, False, "1", "1")
    if same != list(range(same[0], same[-1] + 1)):
        raise ValueError(f"input {name}: broadcast dims are not one block")
    return InputMap(name, spec.dtype, False, _prod(out_dims[same[-1] + 1:]),
                    _prod(out_dims[same[0]:same[-1] + 1]))


def _prod(dims: list) -> str:
    parts = [str(d) for d in dims if str(d) != "1"]
    return "*".join(parts) if parts else "1"


_CACHE: dict[str, Optional[PointwiseGraph]] = {}


def trace_pointwise(defn: Definition) -> Optional[PointwiseGraph]:
    key = hashlib.sha256(json.dumps([defn.reference, defn.model_dump(mode="json", exclude={"description"})],
                                    sort_keys=True, default=str).encode()).hexdigest()
    if key not in _CACHE:
        global last_reason
        try:
            _CACHE[key] = _trace(defn)
        except Exception as e:  # noqa: BLE001 - any failure means: not a pointwise problem
            last_reason = f"{type(e).__name__}: {e}"[:300]
            _CACHE[key] = None
    return _CACHE[key]


def _trace(defn: Definition) -> PointwiseGraph:
    if not defn.outputs:
        raise ValueError("no outputs")
    out_dims = [list(s.shape or []) for s in defn.outputs.values()]
    if any(d != out_dims[0] for d in out_dims) or not out_dims[0]:
        raise ValueError("outputs differ in shape (or are scalars)")
    if any(s.dtype not in FLOAT_TYPES for s in defn.outputs.values()):
        raise ValueError("non-float output")
    graphs = []
    for sizes, sentinel in zip(_SIZES, _SENTINEL):
        gm, vals, args = _run_trace(defn, sizes, sentinel)
        nodes, outs, _ = _graph_of(defn, gm, args)
        want = _shape(defn, out_dims[0], vals)
        for n in gm.graph.nodes:
            v = n.meta.get("val")
            if n.op == "call_function" and list(v.shape) != want and v.numel() != 1:
                # intermediates are the output's shape or broadcast from a smaller one
                if len(v.shape) > len(want) or any(a not in (1, b) for a, b in
                                                   zip(list(v.shape)[::-1], want[::-1])):
                    raise ValueError(f"{n.target} has shape {list(v.shape)}, output {want}")
        graphs.append((nodes, outs))
    (n1, o1), (n2, o2) = graphs
    sig = lambda ns: [(n.op, n.args, n.dtype, sorted(n.kwargs.items())) for n in ns]
    if sig(n1) != sig(n2) or o1 != o2:
        raise ValueError("the graph depends on the sizes or the scalar values")
    if len(o1) != len(defn.outputs) or any(o is None for o in o1):
        raise ValueError("outputs are not graph nodes")
    nodes = n1
    by = {n.name: n for n in nodes}
    for o in o1:
        if by[o].op == "input":
            raise ValueError("an output is an input, unchanged")
    tensors = [k for k in defn.inputs if not defn.inputs[k].is_scalar]
    if not tensors:
        raise ValueError("no tensor inputs")
    maps = [_broadcast(defn, k, out_dims[0]) for k in tensors]
    if not any(m.direct for m in maps):
        raise ValueError("no input has the output's shape")
    scalars = [k for k in defn.inputs if defn.inputs[k].is_scalar]
    outputs = [(name, o, spec.dtype) for (name, spec), o in zip(defn.outputs.items(), o1)]
    ops = sorted({n.op for n in nodes if n.op != "input"})
    return PointwiseGraph(maps, scalars, nodes, outputs, _prod(out_dims[0]), ops)
