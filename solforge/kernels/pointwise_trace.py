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
from .trace_guard import call_budget, quiet_fake_tensor_logs

FLOAT_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
_TORCH_NAME = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
               "torch.bool": "bool"}
INPUT_TYPES = {**FLOAT_TYPES, "bool": "bool"}
_SIZES = ([3, 5, 7, 11, 13, 17, 19, 23], [29, 31, 37, 41, 43, 47, 53, 59])  # var axes, two traces
_SENTINEL = (0.8134765625, 0.6806640625)  # scalar inputs, two traces (exact in bf16 and fp32)

last_reason = ""


@dataclass
class Node:
    name: str
    op: str            # aten overload name, "input", "scalar"
    args: list         # node names, python numbers
    dtype: str         # float32 / float16 / bfloat16 / bool
    kwargs: dict = field(default_factory=dict)
    numel: int = 0     # at the first trace's sizes (1: a scalar value)


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
    # Sums over the leading dims (or all) of full-shape values: each output element i adds into
    # reduction slot i % kept; outputs computed from the sums (post nodes) come from a second
    # kernel over the `kept` slots. Empty when the graph has no reduction.
    reductions: list[str] = field(default_factory=list)   # sum node names
    kept: int = 1                                          # trailing elements kept by the sums
    post: list[str] = field(default_factory=list)          # nodes evaluated after the sums
    reduced_outputs: list[tuple[str, str, str]] = field(default_factory=list)

    def invariant_nodes(self, const_inputs: set) -> list[str]:
        """Computed nodes (not inputs) whose value is the same at every element: they depend only
        on inputs read at one place (indices in const_inputs: 0-d tensors), scalar inputs and
        numbers. A kernel computes them once (pw_pre) instead of per element."""
        inv: set[str] = set()
        for n in self.nodes:
            if n.name in self.post or n.name in self.reductions:
                continue
            if n.op == "input":
                ok = int(str(n.args[0])[1:]) in const_inputs
            else:
                ok = all(not isinstance(a, str) or a in inv for a in n.args)
            if ok:
                inv.add(n.name)
        return [n.name for n in self.nodes if n.name in inv and n.op != "input"]

    def cuda_pre(self, hoisted: list[str]) -> str:
        """`pw_pre(x0.., s0.., h_<node>&..)`: the hoisted nodes (invariant_nodes), once."""
        need = set(hoisted)
        by = {n.name: n for n in self.nodes}
        for name in hoisted:  # their inputs too
            need.update(a for a in by[name].args if isinstance(a, str))
        params = ([f"float x{i}" for i in range(len(self.inputs))]
                  + [f"float s{i}" for i in range(len(self.scalars))]
                  + [f"float& h_{h}" for h in hoisted])
        lines = ["__device__ __forceinline__ void pw_pre(" + ", ".join(params) + ") {"]
        for n in self.nodes:
            if n.name in need:
                lines.append(f"    const float v_{n.name} = {_expr(n, self)};")
        lines += [f"    h_{h} = v_{h};" for h in hoisted] + ["}"]
        return "\n".join(lines)

    def cuda_eval(self, hoisted: Optional[list] = None) -> str:
        """`pw_eval(x0.., s0.., [v_<hoisted>..,] y0&.., r0&..)`: the graph at one element, all in
        float; r are the values each sum adds up. Hoisted nodes (cuda_pre) arrive as arguments."""
        hoisted = list(hoisted or [])
        pre = [n for n in self.nodes if n.name not in self.post and n.name not in self.reductions
               and n.name not in hoisted]
        by = {n.name: n for n in self.nodes}
        params = ([f"float x{i}" for i in range(len(self.inputs))]
                  + [f"float s{i}" for i in range(len(self.scalars))]
                  + [f"float v_{h}" for h in hoisted]
                  + [f"float& y{i}" for i in range(len(self.outputs))]
                  + [f"float& r{i}" for i in range(len(self.reductions))])
        lines = ["__device__ __forceinline__ void pw_eval(" + ", ".join(params) + ") {"]
        for n in pre:
            lines.append(f"    const float v_{n.name} = {_expr(n, self)};")
        for i, (_, node, _) in enumerate(self.outputs):
            lines.append(f"    y{i} = v_{node};")
        for i, r in enumerate(self.reductions):
            lines.append(f"    r{i} = {_opnd(by[r].args[0], by[r], self)};")
        lines.append("}")
        return "\n".join(lines)

    def cuda_post(self) -> str:
        """`pw_post(x0.., s0.., red0.., z0&..)`: the outputs computed from the sums; scalar-valued
        nodes before the sums are recomputed here from scalar-valued inputs."""
        by = {n.name: n for n in self.nodes}
        need: set[str] = set()

        def visit(name):
            if name in need:
                return
            need.add(name)
            n = by[name]
            if n.name in self.reductions or n.op == "input":
                return
            for a in n.args:
                if isinstance(a, str):
                    visit(a)
        for _, node, _ in self.reduced_outputs:
            visit(node)
        params = ([f"float x{i}" for i in range(len(self.inputs))]
                  + [f"float s{i}" for i in range(len(self.scalars))]
                  + [f"float red{i}" for i in range(len(self.reductions))]
                  + [f"float& z{i}" for i in range(len(self.reduced_outputs))])
        lines = ["__device__ __forceinline__ void pw_post(" + ", ".join(params) + ") {"]
        for n in self.nodes:
            if n.name not in need:
                continue
            if n.name in self.reductions:
                val = _round(f"red{self.reductions.index(n.name)}", n.dtype)
            else:
                val = _expr(n, self)
            lines.append(f"    const float v_{n.name} = {val};")
        for i, (_, node, _) in enumerate(self.reduced_outputs):
            lines.append(f"    z{i} = v_{node};")
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
_COMPARE = {"aten.gt": ">", "aten.lt": "<", "aten.ge": ">=", "aten.le": "<=", "aten.eq": "==",
            "aten.ne": "!="}
SUPPORTED = set(_UNARY) | set(_BINARY) | {"aten.rsub.Scalar", "aten.pow.Tensor_Scalar",
                                          "aten.gelu.default", "aten.clamp.default",
                                          "aten.sum.default", "aten.sum.dim_IntList",
                                          "aten.bitwise_and.Tensor", "aten.logical_and.default",
                                          "aten.bitwise_or.Tensor", "aten.logical_or.default",
                                          "aten.bitwise_not.default", "aten.logical_not.default"} | {
    f"{c}.{k}" for c in _COMPARE for k in ("Scalar", "Tensor")}


def _lit(v: float) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"unsupported constant {v!r}")
    return f"((float){float(v)!r})"


def _round(expr: str, dtype: str) -> str:
    return {"float32": expr, "float16": f"rnd_f16({expr})", "bfloat16": f"rnd_bf16({expr})",
            "bool": expr}[dtype]


def _opnd(a, n: Node, g: PointwiseGraph, cast: bool = True) -> str:
    """A tensor operand is cast to the op's dtype first (TensorIterator's common dtype); Python
    numbers and scalar inputs stay float (PyTorch's opmath)."""
    if isinstance(a, str):
        src = next(m for m in g.nodes if m.name == a)
        return _round("v_" + a, n.dtype) if cast and src.dtype != n.dtype and n.dtype != "bool" \
            else "v_" + a
    if isinstance(a, tuple) and a[0] == "scalar":
        return a[1]
    return _lit(a)




def _expr(n: Node, g: PointwiseGraph) -> str:
    if n.op == "input":
        return n.args[0]
    dt = n.dtype

    def opnd(a) -> str:
        return _opnd(a, n, g)

    op, args = n.op, n.args
    cmp = _COMPARE.get(op.rsplit(".", 1)[0])
    if cmp and op.rsplit(".", 1)[1] in ("Scalar", "Tensor"):
        # compared in the operands' dtype (no rounding: they already are in it), result 0/1
        return f"(({_opnd(args[0], n, g, False)} {cmp} {_opnd(args[1], n, g, False)}) ? 1.0f : 0.0f)"
    if op in ("aten.bitwise_and.Tensor", "aten.logical_and.default", "aten.bitwise_or.Tensor",
              "aten.logical_or.default"):
        if any(next(m for m in g.nodes if m.name == a).dtype != "bool" for a in args if isinstance(a, str)):
            raise ValueError(f"{op} on non-bool tensors")
        j = "&&" if "and" in op else "||"
        return f"((v_{args[0]} != 0.0f {j} v_{args[1]} != 0.0f) ? 1.0f : 0.0f)"
    if op in ("aten.bitwise_not.default", "aten.logical_not.default"):
        return f"((v_{args[0]} == 0.0f) ? 1.0f : 0.0f)"
    if op == "aten._to_copy.default" and dt != "bool":
        src = next(m for m in g.nodes if m.name == args[0])
        return _round("v_" + src.name, dt)
    if dt == "bool":
        raise ValueError(f"{op} giving bool")
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


def reference_and_meta_args(defn: Definition, sizes: list[int], sentinel: float,
                            scalar=lambda value, index: value):
    """(run, input names, axis values, arguments) to trace a reference with at these var-axis
    sizes: meta tensors, and each float scalar input as a distinct sentinel value (sentinel plus
    1/128 per argument before it) made by scalar(value, index among the scalar inputs), so that the
    traced graph shows where each one goes."""
    import torch

    from ..problem.dtypes import to_torch

    vals = _axis_values(defn, sizes)
    ns: dict[str, Any] = {}
    exec(compile(defn.reference, f"<reference {defn.name}>", "exec"), ns)
    names = list(defn.inputs)
    args, n_scalars = [], 0
    for k in names:
        spec = defn.inputs[k]
        if spec.is_scalar:
            if spec.dtype not in FLOAT_TYPES:
                raise ValueError(f"non-float scalar input {k}")
            args.append(scalar(sentinel + 0.0078125 * len(args), n_scalars))
            n_scalars += 1
        else:
            args.append(torch.empty(_shape(defn, spec.shape, vals), dtype=to_torch(spec.dtype),
                                    device="meta"))
    return ns["run"], names, vals, args


def _run_trace(defn: Definition, sizes: list[int], sentinel: float):
    from torch.fx.experimental.proxy_tensor import make_fx

    fn, names, vals, args = reference_and_meta_args(defn, sizes, sentinel)

    def call(*a):
        with call_budget():
            return fn(**dict(zip(names, a)))
    with quiet_fake_tensor_logs():
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
            nodes.append(Node(n.name, "input", [f"x{tensors.index(k)}"], dt,
                              numel=int(n.meta["val"].numel())))
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

            if target == "aten.sum.dim_IntList":
                x, dims = n.args[0], n.args[1]
                keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
                if keep or n.kwargs.get("dtype") is not None:
                    raise ValueError("sum with keepdim or a dtype")
                nd = len(x.meta["val"].shape)
                nodes.append(Node(n.name, target, [x.name], dt,
                                  {"dims": sorted(d % nd for d in dims), "ndim": nd},
                                  numel=int(val.numel())))
                continue
            if target == "aten.sum.default" and n.kwargs.get("dtype") is not None:
                raise ValueError("sum with a dtype")

            def arg(a):
                if hasattr(a, "op"):
                    return a.name
                if isinstance(a, float) and a in sentinels:
                    return sentinels[a]
                if isinstance(a, (int, float)) and not isinstance(a, bool):
                    return a
                raise ValueError(f"{target}: unsupported argument {a!r}")
            nodes.append(Node(n.name, target, [arg(a) for a in n.args], dt,
                              {k: arg(v) if k in ("alpha", "min", "max") else v for k, v in kw.items()},
                              numel=int(val.numel())))
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
        g, why = trace_in_sandbox(__name__, defn, (PointwiseGraph, Node, InputMap))
        if g is None:
            last_reason = why
        _CACHE[key] = g
    return _CACHE[key]


TRACE_TIMEOUT_S = 300.0


def trace_in_sandbox(module: str, defn: Definition, types: tuple) -> tuple[Optional[Any], str]:
    """(graph, "") or (None, reason): `module`._trace(defn) run in the sandbox, since it executes the
    problem's reference (a dataset's code); the graph comes back as tagged JSON of `types` only."""
    from ..sandbox import SandboxError
    from ..sandbox.jsonable import decode
    from .trace_cache import sandboxed_trace

    try:
        out = sandboxed_trace(__name__, "trace_entry", {"module": module,
                                                         "definition": defn.model_dump(mode="json")},
                              timeout_s=TRACE_TIMEOUT_S, code=(__name__, module))
    except SandboxError as e:
        return None, str(e)[:300]
    if out.get("reason") is not None or "graph" not in out:
        return None, str(out.get("reason", "no graph"))[:300]
    try:
        return decode(out["graph"], types), ""
    except (ValueError, TypeError) as e:
        return None, f"the traced graph did not decode: {e}"[:300]


# the tracers whose `_trace(defn)` the sandbox entry may call (a payload names one of them)
_TRACERS = ("solforge.kernels.pointwise_trace", "solforge.kernels.pointwise_rows_trace")


def trace_entry(payload: dict) -> dict:
    """Sandbox entry point of both pointwise tracers: {"graph": tagged JSON} or {"reason": why the
    problem is not one of theirs}."""
    import importlib

    from ..sandbox.jsonable import encode

    module = payload.get("module") or __name__
    if module not in _TRACERS:
        return {"reason": f"unknown tracer {module!r}"}
    defn = Definition.model_validate(payload["definition"])
    try:
        return {"graph": encode(importlib.import_module(module)._trace(defn))}
    except Exception as e:  # noqa: BLE001 - any failure means: not a problem of this tracer
        return {"reason": f"{type(e).__name__}: {e}"[:300]}


def _trace(defn: Definition) -> PointwiseGraph:
    if not defn.outputs:
        raise ValueError("no outputs")
    out_dims = {k: list(s.shape or []) for k, s in defn.outputs.items()}
    full = max(out_dims.values(), key=len)
    if not full:
        raise ValueError("only scalar outputs")
    reduced = {k: d for k, d in out_dims.items() if d != full}
    red_dims = next(iter(reduced.values())) if reduced else None
    if reduced and (any(d != red_dims for d in reduced.values()) or len(red_dims) >= len(full)
                    or full[len(full) - len(red_dims):] != red_dims):
        raise ValueError("outputs are neither the full shape nor one trailing block of it")
    if any(s.dtype not in FLOAT_TYPES for s in defn.outputs.values()):
        raise ValueError("non-float output")
    graphs = []
    for sizes, sentinel in zip(_SIZES, _SENTINEL):
        gm, vals, args = _run_trace(defn, sizes, sentinel)
        nodes, outs, _ = _graph_of(defn, gm, args)
        graphs.append((nodes, outs, _shape(defn, full, vals), gm))
    (n1, o1, want, gm1), (n2, o2, _, _) = graphs
    sig = lambda ns: [(n.op, n.args, n.dtype, sorted(n.kwargs.items())) for n in ns]
    if sig(n1) != sig(n2) or o1 != o2:
        raise ValueError("the graph depends on the sizes or the scalar values")
    if len(o1) != len(defn.outputs) or any(o is None for o in o1):
        raise ValueError("outputs are not graph nodes")
    nodes = n1
    by = {n.name: n for n in nodes}
    reds = [n.name for n in nodes if n.op.startswith("aten.sum.")]
    post: list[str] = []
    for n in nodes:  # in graph order: a node after a sum is evaluated from the sums
        if n.name in reds or any(isinstance(a, str) and a in post for a in n.args):
            post.append(n.name)
    post = [p for p in post if p not in reds]
    full_numel = math.prod(want)
    kept_dims = red_dims if red_dims is not None else []
    k = len(full) - len(kept_dims)
    for n in nodes:
        if n.op == "input":
            continue
        if n.name not in post and n.name not in reds and full_numel % max(n.numel, 1):
            raise ValueError(f"{n.op} gives {n.numel} elements, not a broadcast of {want}")
        if n.name in reds:
            src = by[n.args[0]]
            if src.numel != full_numel or src.name in post:
                raise ValueError("a sum over anything but a full-shape value")
            if n.op == "aten.sum.dim_IntList" and (n.kwargs["ndim"] != len(full)
                                                   or n.kwargs["dims"] != list(range(k))):
                raise ValueError(f"a sum over dims {n.kwargs['dims']}, not the leading {k}")
            if n.op == "aten.sum.default" and kept_dims:
                raise ValueError("a full sum next to a partial one")
    if reds and red_dims is None:
        raise ValueError("a sum that no output keeps")
    kept = 1
    for d in kept_dims:
        c = d if isinstance(d, int) else defn.const_axes.get(d)
        if c is None:
            raise ValueError(f"kept dim {d} is not a constant")
        kept *= int(c)
    if kept * len(reds) > 8192:
        raise ValueError("more than 8192 sums (32 KiB of shared memory)")
    for name in post:  # what the epilogue recomputes before the sums must be scalar-valued
        for a in by[name].args:
            if isinstance(a, str) and a not in post and a not in reds and by[a].numel != 1:
                raise ValueError("a value after the sums needs a full-shape value")
    outputs, reduced_outputs = [], []
    for (name, spec), o in zip(defn.outputs.items(), o1):
        if by[o].op == "input":
            raise ValueError("an output is an input, unchanged")
        if name in reduced:
            if o not in post and o not in reds:
                raise ValueError(f"output {name} has the reduced shape but no sum")
            reduced_outputs.append((name, o, spec.dtype))
        else:
            if o in post or o in reds or by[o].numel != full_numel:
                raise ValueError(f"output {name} has the full shape but not the full value")
            outputs.append((name, o, spec.dtype))
    tensors = [k_ for k_ in defn.inputs if not defn.inputs[k_].is_scalar]
    if not tensors:
        raise ValueError("no tensor inputs")
    for k_ in tensors:
        if defn.inputs[k_].dtype not in INPUT_TYPES:
            raise ValueError(f"input {k_}: dtype {defn.inputs[k_].dtype}")
    maps = [_broadcast(defn, k_, full) for k_ in tensors]
    if not any(m.direct for m in maps):
        raise ValueError("no input has the output's shape")
    scalars = [k_ for k_ in defn.inputs if defn.inputs[k_].is_scalar]
    ops = sorted({n.op for n in nodes if n.op != "input"})
    return PointwiseGraph(maps, scalars, nodes, outputs, _prod(full), ops, reds, kept, post,
                          reduced_outputs)
