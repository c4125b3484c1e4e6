"""Trace a reference into the compiler's IR (JSON), in a child process.

`trace_definition(defn, workloads)` runs `python -m solforge.compiler.trace` with the definition and
up to two workloads on stdin and reads one JSON object back: {"ok": true, "ir": {...}} or
{"ok": false, "reason": "one line"}. The reference is user code: it only ever runs in that child
(`_run_child` is the one place to switch to a sandbox), under a timeout.

In the child, every tensor input is a fake tensor on the CPU with a symbolic size per dim (no duck
sizing: two axes that happen to be equal stay two symbols), int scalar inputs are SymInts, float
scalars are sentinel values (a graph constant equal to the sentinel is the scalar). make_fx with
torch's core ATen decompositions (plus softmax, norms, gelu...) gives a graph of a small op set; the
anchors (mm, bmm, addmm, convolution, scans, sort/topk, scatters) stay whole. The graph is traced at
two workloads; a structural difference (sizes specialised by the reference, a float scalar used in
Python arithmetic) is refused. Every size becomes an axis-expression string over the definition's
var axes and int scalar inputs.

IR (dict): {"inputs": [{"name", "kind": "tensor"|"int"|"float"|"bool", "dtype", "shape"}],
 "nodes": [{"name", "op", "args", "kwargs", "dtype", "shape", "outs"?}], "outputs": [ref...]}.
An argument is a number, string, None, a list, {"ref": node}, {"sym": "expr"}, {"scalar": name},
{"dtype": name}. A node with several results has "outs": [[dtype, shape], ...] and is read through
"getitem" nodes. Constants: op "constant" with "value" (nested list).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Optional

TRACE_TIMEOUT_S = 90
_SENTINELS = (0.8134765625, 0.6806640625)  # float scalars, first and second trace (exact in bf16)
_DT = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
       "torch.float64": "float64", "torch.int64": "int64", "torch.int32": "int32",
       "torch.int16": "int16", "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool",
       "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2",
       "torch.complex64": "complex64", "torch.float4_e2m1fn_x2": "float4_e2m1fn_x2"}


@dataclass
class TraceResult:
    ok: bool
    ir: Optional[dict] = None
    reason: str = ""


# ── parent side ──────────────────────────────────────────────────────────────────────────────────
def pick_workloads(defn, workloads: list) -> list[dict]:
    """Up to two workloads (axes + scalars) to trace at: no var axis equal to 0 or 1 (sizes that
    make_fx specialises), smallest first, the second one differing in some var axis."""
    var = list(defn.var_axes)
    rows = []
    for rw in workloads:
        axes = dict(getattr(rw, "axes", {}) or {})
        scal = _scalar_values(defn, rw)
        rows.append({"axes": axes, "scalars": scal})
    good = [r for r in rows if all(int(r["axes"].get(v, 2)) >= 2 for v in var)] or rows
    good.sort(key=lambda r: sum(int(r["axes"].get(v, 0)) for v in var))
    if not good:
        return []
    first = good[0]
    for r in good[1:]:
        if any(r["axes"].get(v) != first["axes"].get(v) for v in var) or \
                r["scalars"] != first["scalars"]:
            return [first, r]
    return [first]


def _scalar_values(defn, rw) -> dict:
    """The workload's scalar inputs; a custom-made scalar input (its value made by the custom
    inputs entrypoint) takes the workload axis of its name, which is what the entrypoint reads."""
    try:
        out = dict(rw.scalars())
    except Exception:  # noqa: BLE001 - a workload without scalars
        out = {}
    for k, v in (getattr(rw, "extra_axes", None) or {}).items():
        spec = defn.inputs.get(k)
        if spec is not None and spec.is_scalar and k not in out:
            out[k] = v
    return out


def trace_definition(defn, workloads: list, timeout_s: float = TRACE_TIMEOUT_S) -> TraceResult:
    if not workloads:
        return TraceResult(False, reason="no workloads to trace at")
    import torch  # noqa: F401 - imported once here, every trace child forks with it

    picked = pick_workloads(defn, workloads)
    extra = []
    for rw in workloads:  # every other distinct (sizes, scalars): to tell variants apart
        try:
            row = {"axes": dict(rw.axes), "scalars": _scalar_values(defn, rw)}
        except Exception:  # noqa: BLE001
            continue
        if row not in picked and row not in extra:
            extra.append(row)
    req = {"definition": defn.model_dump(mode="json"), "workloads": picked, "extra": extra[:64],
           # tracing variant after variant stops in time to answer before the sandbox's timeout
           "budget_s": max(10.0, float(timeout_s) - 20.0)}
    return _run_child(req, timeout_s)


def _run_child(req: dict, timeout_s: float) -> TraceResult:
    """The reference is a dataset's code: it runs only in the sandbox (solforge.sandbox: a fresh
    process with an allowlisted environment, no network, a read-only filesystem where bubblewrap is
    available, resource limits, killed as a group at the timeout), and the IR comes back as JSON."""
    from ..sandbox import SandboxError, run_python

    try:
        out = run_python("solforge.compiler.trace", "sandbox_entry", req, timeout_s=timeout_s)
    except SandboxError as e:
        if getattr(e, "kind", "") == "timeout":
            return TraceResult(False, reason=f"tracing the reference took over {timeout_s:.0f} s")
        return TraceResult(False, reason=f"trace failed in the sandbox: {e}"[:300])
    if not out.get("ok"):
        return TraceResult(False, reason=str(out.get("reason", "unknown"))[:300])
    return TraceResult(True, ir=out["ir"])


def sandbox_entry(payload: dict) -> dict:
    """The sandbox's entry point (run_python): one trace request, answered as the child prints it."""
    import io

    buf = io.StringIO()
    old_in, old_out = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO(json.dumps(payload)), buf
    try:
        child_main()
    finally:
        sys.stdin, sys.stdout = old_in, old_out
    lines = [l for l in buf.getvalue().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {"ok": False, "reason": "no trace output"}


# ── child side ───────────────────────────────────────────────────────────────────────────────────
def _with_custom_scalars(defn, axes: dict, scalars: dict) -> dict:
    """A scalar input the custom inputs entrypoint makes (a workload says only "custom") takes the
    value that entrypoint returns for these axes. It runs here, in the sandbox, on the meta device:
    its tensors cost nothing and its Python numbers come out as they are."""
    missing = [k for k, s in defn.inputs.items() if s.is_scalar and k not in scalars]
    if not missing or not defn.custom_inputs_entrypoint:
        return scalars
    import torch

    ns: dict[str, Any] = {"__name__": "_solforge_custom_inputs"}
    try:
        exec(compile(defn.reference, "<reference>", "exec"), ns)
        made = ns[defn.custom_inputs_entrypoint]({**axes, **scalars}, torch.device("meta"))
    except Exception:  # noqa: BLE001 - the trace then says which scalar has no value
        return scalars
    for k in missing:
        v = made.get(k) if isinstance(made, dict) else None
        if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_meta:
            v = v.item()
        if isinstance(v, (bool, int, float)):
            scalars[k] = v
    return scalars


from .guard_eval import _eval_guard, _f32, _values, parse_guard  # noqa: E402,F401 - used here and by tests
from .errors import TraceError  # noqa: E402 - defined there (errors.py), raised here


def _decomp_table():
    import torch
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    extra = [aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.native_group_norm,
             aten.gelu, aten.leaky_relu, aten.elu, aten.hardtanh, aten.native_batch_norm,
             aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit,
             aten._native_batch_norm_legit_functional, aten.slice_scatter,
             aten.linalg_vector_norm, aten._adaptive_avg_pool2d, aten.avg_pool2d,
             aten.native_dropout, aten.diagonal, aten.narrow, aten.native_layer_norm_backward,
             aten.native_group_norm_backward, aten.native_batch_norm_backward,
             aten._softmax_backward_data, aten._log_softmax_backward_data, aten.gelu_backward,
             aten.logsumexp, aten.std, aten.var, aten.var_mean, aten.std_mean, aten.hardswish,
             aten.hardsigmoid, aten.softplus, aten.mish, aten.silu, aten.glu, aten.rsub,
             aten.upsample_nearest2d, aten.upsample_bilinear2d, aten.repeat, aten.roll,
             aten.baddbmm, aten.addcmul, aten.addcdiv, aten.lerp, aten.triu, aten.tril,
             aten.masked_fill, aten.clamp_min, aten.clamp_max, aten.unbind, aten.stack,
             aten.split_with_sizes, aten.split, aten.chunk, aten.index_add, aten.select_scatter,
             aten.embedding_dense_backward, aten.threshold_backward, aten.sigmoid_backward,
             aten.tanh_backward, aten.silu_backward, aten.mse_loss, aten.nll_loss_forward,
             aten.cosine_similarity, aten.im2col, aten.pixel_shuffle, aten.reflection_pad1d,
             aten.reflection_pad2d, aten.replication_pad2d, aten.expand_as, aten.new_zeros,
             aten.new_ones, aten.new_full, aten.zeros_like, aten.ones_like, aten.full_like,
             aten.fill, aten._to_copy, aten.dot, aten.mv, aten.addmv, aten.outer, aten.einsum,
             aten.max_pool2d_with_indices_backward, aten.addmm]
    for op in extra:
        try:
            table.update(get_decompositions([op]))
        except Exception:  # noqa: BLE001 - an op without a decomposition stays whole
            pass
    keep = [aten.mm, aten.bmm, aten.convolution, aten.cumsum, aten.cumprod, aten.sort, aten.topk,
            aten.index_put, aten.scatter, aten.scatter_add, aten.scatter_reduce, aten.embedding,
            aten.index_select, aten.gather, aten.constant_pad_nd, aten.flip, aten._to_copy,
            aten.clone, aten.index, aten.argmax, aten.argmin, aten.max, aten.min,
            aten.addmm, aten.where, aten.clamp, aten.max_pool2d_with_indices,
            aten.prod, aten.mean, aten.amax, aten.amin, aten.sum]
    for op in keep:
        for ov in op.overloads():
            table.pop(getattr(op, ov), None)
    return table


def _dtype_name(dt) -> str:
    s = str(dt)
    if s not in _DT:
        raise TraceError(f"dtype {s} is not supported")
    return _DT[s]


class _Namer:
    """sympy symbol of the trace -> axis expression (sympy, over var axes and int scalars)."""

    def __init__(self):
        from .dynamic_trace import Tracker

        self.map: dict = {}
        self.float_names: set = set()
        self.dyn = Tracker()    # data-dependent sizes (nonzero's count): names and bounds

    def expr(self, e, shape_env) -> str:
        import sympy

        from . import symexpr

        e = sympy.sympify(e)
        if shape_env is not None:
            e = shape_env.replace(e)
        free = [s for s in e.free_symbols]
        bad = [s for s in free if s not in self.map]
        if bad:
            if any(symexpr.is_read_back(s) for s in bad):
                raise TraceError("data-dependent size (a shape that depends on tensor values)")
            raise TraceError(f"size symbol {bad[0]} is not tied to any input dim")
        e = e.xreplace({s: self.map[s] for s in free})
        return symexpr.to_axis(sympy.expand(e) if e.is_Add or e.is_Mul else e)


def _float_expr(self, e, shape_env) -> dict:
    """A SymFloat (1/sqrt(head_dim), 1/N) as a C double expression over size params z_<axis>."""
    import sympy

    from . import symexpr

    e = sympy.sympify(e)
    if shape_env is not None:
        e = shape_env.replace(e)
    bad = [s for s in e.free_symbols if s not in self.map]
    if bad:
        raise TraceError("data-dependent float value")
    e = e.xreplace({s: self.map[s] for s in e.free_symbols})
    names = sorted(str(s) for s in e.free_symbols)
    if not names:
        return float(e)
    fl = self.float_names
    return {"symf": symexpr.to_c_float(e, lambda n: ("f_" if n in fl else "z_") + n),
            "names": [n for n in names if n not in fl], "fnames": [n for n in names if n in fl]}


_Namer.float_expr = _float_expr


def _axis_sym(defn, name_or_int):
    import sympy

    from . import symexpr

    if isinstance(name_or_int, int):
        return sympy.Integer(name_or_int)
    ax = defn.axes.get(name_or_int)
    if ax is None:
        return symexpr.sym(name_or_int)
    if getattr(ax, "type", "") == "const":
        return sympy.Integer(ax.value)
    if getattr(ax, "type", "") == "expr":
        e = symexpr.parse(ax.expression)
        return e.xreplace({s: _axis_sym(defn, s.name) for s in e.free_symbols})
    return symexpr.sym(name_or_int)


def _trace_once(defn, wl: dict, sentinel: float, symfloat: bool = True, short_loops="all",
                flag_policy: Optional[list] = None, batch_loops: bool = True, symint: bool = False,
                baked: bool = False) -> dict:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    from ..problem.dtypes import to_torch

    axes = dict(wl["axes"])
    try:
        axes.update(defn.resolve_axes({k: axes[k] for k in defn.var_axes}))
    except (KeyError, ValueError):
        pass
    scalars = _with_custom_scalars(defn, axes, dict(wl.get("scalars", {})))
    from .rolling import LoopIndexSteered, ShortLoops, extrapolate

    # a long `for i in range(n)` runs a few iterations, then rolls into a loop of n (rolling.py)
    loops = ShortLoops(short_loops).activate()
    ns: dict[str, Any] = {"__name__": "_solforge_traced_reference", "int": _symint_preserving_int(),
                          "range": loops.range, "len": _symint_preserving_len,
                          "min": _symbolic_min, "max": _symbolic_max}
    from ..evaluate.reference import Fp4Shim, needs_fp4_dequant

    if needs_fp4_dequant(defn) and not isinstance(torch._scaled_mm, Fp4Shim):
        # the evaluator's own substitution on Hopper (FP4 _scaled_mm needs sm_100): trace what runs
        Fp4Shim().install()
    from .loop_batching import LoopBatching

    batching = LoopBatching()
    if batch_loops:
        # a loop over a symbolic size: one batched body; other loops as ShortLoops has them
        ns["range"] = batching.range(fallback=loops.range)
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    fn = ns.get("run")
    if fn is None:
        raise TraceError("the reference defines no run()")
    # no duck sizing (two axes equal in this workload stay two symbols); a var axis of size 1 stays
    # symbolic too, constant dims are static
    from . import dynamic_trace

    # a guard on a data-dependent size (nonzero's count) is decided size-obliviously (dynamic_trace.py)
    shape_env = dynamic_trace.make_shape_env(duck_shape=False, specialize_zero_one=False)
    shape_env.flag_policy = list(flag_policy or [])   # `if flag.item():` sides (flags.py)
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    namer = _Namer()
    names = list(defn.inputs)
    args, inputs_ir = [], []
    pins: dict = {}   # baked: scalar -> the value this trace is valid for
    for k in names:
        spec = defn.inputs[k]
        if spec.is_scalar:
            kind = {"float": "float", "int": "int", "bool": "bool"}.get(
                __import__("solforge.problem.dtypes", fromlist=["kind"]).kind(spec.dtype), "float")
            if baked:
                # value specialisation: the workload's own value in the graph, and a guard that
                # the scalar is this value (as the kernel sees it: a float32 argument)
                v = scalars.get(k)
                if not isinstance(v, (int, float, bool)):
                    raise TraceError(f"scalar input {k} has no value in the workload")
                v = {"float": float, "int": int, "bool": bool}[kind](v)
                args.append(v)
                pins[k] = _f32(v) if kind == "float" else int(v)
                inputs_ir.append({"name": k, "kind": kind, "dtype": spec.dtype, "shape": None})
                continue
            if kind == "float" and symfloat:
                # a SymFloat: Python arithmetic on it (1 / (1 - p)) stays an expression of p
                from torch._dynamo.source import ConstantSource

                hint = float(scalars.get(k, sentinel)) if isinstance(scalars.get(k), (int, float)) \
                    else sentinel
                src = ConstantSource(f"scalar_{k}")
                fsym = shape_env.create_unspecified_symbol(hint, source=src,
                                                           dynamic_dim=DimDynamic.DYNAMIC)
                from . import symexpr
                namer.map[fsym] = symexpr.sym(k)
                namer.float_names.add(k)
                args.append(shape_env.create_symfloatnode(fsym, hint=hint, source=src))
            elif kind == "float":
                args.append(sentinel + 0.0078125 * len(inputs_ir))
            elif kind == "int":
                v = scalars.get(k)
                if v is None:
                    raise TraceError(f"int scalar input {k} has no value in the workload")
                if not symint:
                    args.append(int(v))
                else:
                    # an int steering the Python code (a mode or index): a symbol, so a branch on
                    # it becomes a guard the variants are selected by at run time
                    from torch._dynamo.source import ConstantSource

                    from . import symexpr
                    src = ConstantSource(f"scalar_{k}")
                    isym = shape_env.create_unspecified_symbol(int(v), source=src,
                                                               dynamic_dim=DimDynamic.DYNAMIC)
                    namer.map[isym] = symexpr.sym(k)
                    args.append(shape_env.create_symintnode(isym, hint=int(v), source=src))
            elif not symfloat:  # the fallback trace: the workload's value, baked in
                args.append(bool(scalars.get(k, False)))
            else:
                # a bool steering the reference's Python code: an int (0/1) symbol, so the branch
                # becomes a guard the plan can test at run time
                from torch._dynamo.source import ConstantSource

                from . import symexpr
                hint = int(bool(scalars.get(k, False)))
                src = ConstantSource(f"scalar_{k}")
                isym = shape_env.create_unspecified_symbol(hint, source=src,
                                                           dynamic_dim=DimDynamic.DYNAMIC)
                namer.map[isym] = symexpr.sym(k)
                args.append(shape_env.create_symintnode(isym, hint=hint, source=src))
            inputs_ir.append({"name": k, "kind": kind, "dtype": spec.dtype, "shape": None})
            continue
        shape = []
        for d in spec.shape:
            shape.append(int(d) if isinstance(d, int) else int(axes[d]))
        meta = torch.empty(shape, dtype=to_torch(spec.dtype), device="meta")
        dyn = [DimDynamic.STATIC if _axis_sym(defn, d).is_number else DimDynamic.DYNAMIC
               for d in spec.shape]
        fake = mode.from_tensor(meta, symbolic_context=StatelessSymbolicContext(
            dynamic_sizes=dyn, constraint_sizes=[None] * len(dyn)))
        fake.fake_device = torch.device("cpu")
        off = fake.storage_offset()
        if isinstance(off, torch.SymInt):  # inputs are contiguous tensors of their own
            import sympy
            namer.map[off.node.expr] = sympy.Integer(0)
        for d, (dim, ent) in enumerate(zip(fake.shape, spec.shape)):
            if isinstance(dim, torch.SymInt):
                namer.map[dim.node.expr] = _axis_sym(defn, ent)
        args.append(fake)
        from . import symexpr
        inputs_ir.append({"name": k, "kind": "tensor", "dtype": spec.dtype,
                          "shape": [symexpr.to_axis(_axis_sym(defn, d)) for d in spec.shape]})

    def call(*a):
        # the tensors the reference receives (make_fx's own): `flag.item()` names its input
        dynamic_trace.TRACE_INPUTS.clear()
        dynamic_trace.TRACE_INPUTS.update({id(t): k for k, t in zip(names, a) if isinstance(t, torch.Tensor)})
        with _CpuDevice(batching) as mode:
            out = fn(**dict(zip(names, a)))
            if isinstance(out, dict):
                # outputs returned by name ({"output": o, "lse": l}), read as the evaluator reads them
                try:
                    out = tuple(defn.outputs_by_name(out))
                except ValueError as e:
                    raise TraceError(str(e)) from None
            return mode.branches.poison(out)

    from torch.func import functionalize

    try:
        gm = make_fx(functionalize(call, remove="mutations"), tracing_mode="symbolic",
                     decomposition_table=_decomp_table())(*args)
    except LoopIndexSteered:
        return _trace_once(defn, wl, sentinel, symfloat, short_loops=False, flag_policy=flag_policy,
                           batch_loops=batch_loops, symint=symint, baked=baked)
    except Exception as e:  # noqa: BLE001 - the trace's own words, one line
        if loops.any_counted and short_loops:   # a loop of a symbolic count (counted_loops.py)
            return _trace_once(defn, wl, sentinel, symfloat, short_loops=_fewer_short(loops),
                               flag_policy=flag_policy, batch_loops=batch_loops,  # that failed
                               symint=symint, baked=baked)
        if batching.serial:  # a batched loop body that vmap cannot run: unrolled, as before
            return _trace_once(defn, wl, sentinel, symfloat, short_loops, flag_policy, batch_loops=False,
                               symint=symint, baked=baked)
        raise TraceError(_why(e)) from None
    # int scalar placeholders: their SymInt is the scalar itself
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, inp in zip(phs, inputs_ir):
        v = n.meta.get("val")
        if inp["kind"] == "int" and isinstance(v, torch.SymInt):
            from . import symexpr
            namer.map[v.node.expr] = symexpr.sym(inp["name"])
    ir = _to_ir(gm, inputs_ir, namer, shape_env, sentinel)
    ir["guards"] = _guards(shape_env, namer) + _pin_guards(pins, inputs_ir)
    if loops.counts:
        from . import counted_loops

        if shape_env.assumed:   # size equalities checked on the device (counted_loops.py)
            ir[counted_loops.ASSUMED] = counted_loops.assumed_ir(shape_env, namer)
        guards = {i: str(namer.dyn.names.get(u, "")) for i, u in loops.guards.items()}
        ir = extrapolate(ir, counted_loops.count_exprs(loops.counts, namer, shape_env), guards,
                         reads_back=loops.any_counted)
        if ir is None:  # the shortened iterations do not roll: trace (more of) them in full
            return _trace_once(defn, wl, sentinel, symfloat, short_loops=_fewer_short(loops),
                               flag_policy=flag_policy, batch_loops=batch_loops, symint=symint,
                               baked=baked)
    from . import flags

    ir = flags.record(ir, shape_env)
    if "flags" in ir and flag_policy is None:  # a branch on an input's value: trace every side
        return flags.fork(lambda sides: _trace_once(defn, wl, sentinel, symfloat, short_loops,
                                                    flag_policy=sides, batch_loops=batch_loops,
                                                    symint=symint, baked=baked), ir)
    return ir


def _fewer_short(loops):
    """What to shorten in the next trace after one whose shortened loops did not roll: only the
    loops of a symbolic count where constant-count loops were shortened beside them (a loop whose
    iterations differ, `attn[..., i, :i]` of growing sizes, then runs in full while a chunk loop of a
    symbolic count still rolls: otherwise every chunk count is a variant of its own), else none."""
    counted = [c for c in loops.counts if not isinstance(c, int)]
    if loops.constant and counted and len(counted) < len(loops.counts):
        return "counted"
    return False


def _symint_preserving_int():
    """`int(n)` on a SymInt or SymFloat would specialise the trace to this workload's value (a
    guard); in the reference's namespace it returns the SymInt itself (a SymFloat truncated
    symbolically), for everything else it is int."""
    import builtins

    import torch

    class Int(int):
        def __new__(cls, x=0, *a):
            if isinstance(x, torch.SymInt) and not a:
                return x
            if isinstance(x, torch.SymFloat) and not a:
                # int(n ** 0.5), int(n * 8 / 160 * 1.25) of sizes: a TruncToInt size expression
                return torch.sym_int(x)
            return builtins.int(x, *a)

        def __instancecheck__(self, obj):  # pragma: no cover - isinstance(x, int) keeps working
            return isinstance(obj, builtins.int)
    return Int


def _symint_preserving_len(x):
    """`len(t)` of a tensor is its first size: a SymInt (builtins.len would specialise it)."""
    import builtins

    import torch

    if isinstance(x, torch.Tensor) and x.dim() > 0 and isinstance(x.shape[0], torch.SymInt):
        return x.shape[0]
    return builtins.len(x)


def _symbolic_min(*a, **kw):
    """`min(n, cap)` with n a data-dependent size (`min(len(idx), 256)`): a size expression
    (torch.sym_min) instead of a guard on which side is smaller; builtins.min otherwise (a min of
    axes keeps its guard: variants by size)."""
    return _sym_extreme("sym_min", min, a, kw)


def _symbolic_max(*a, **kw):
    return _sym_extreme("sym_max", max, a, kw)


def _sym_extreme(name, builtin, a, kw):
    import torch

    from . import symexpr

    if not kw and len(a) == 2 and all(isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool)
                                      for x in a) and any(
            isinstance(x, torch.SymInt) and any(symexpr.is_read_back(u) for u in
                                                x.node.expr.free_symbols) for x in a):
        return getattr(torch, name)(*a)
    return builtin(*a, **kw)


def _cpu(dev):
    return "cpu" if dev is not None and str(dev).startswith("cuda") else dev


class _CpuDeviceBase:
    pass


def _make_cpu_device_mode(batching=None):
    import torch
    from torch.overrides import TorchFunctionMode

    from . import counted_loops, symint_index
    from .assumed_branches import NOT_HANDLED, AssumedBranches
    from .dynamic_trace import MISS, DataDependentHooks

    dyn_hooks = DataDependentHooks()

    class CpuDevice(TorchFunctionMode):
        """References that place tensors on "cuda" trace on the CPU (fake tensors): the device
        moves are identities here."""

        def __init__(self):
            super().__init__()
            self.branches = AssumedBranches()  # `if t == 0.0:` on a device value

        def __torch_function__(self, func, types, args=(), kwargs=None):
            r = self._call(func, types, args, kwargs)
            counted_loops.tag_iteration(r)   # a counted loop's iteration made it (counted_stack)
            return r

        def _call(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            hit = counted_loops.counted_stack(func, args, kwargs)  # a recurrence's stacked steps
            if hit is not None:
                return hit
            hit = dyn_hooks.handle(func, args, kwargs)  # mask.any(), a loop over data-dependent rows
            if hit is not MISS:
                return hit
            r = self.branches.intercept(func, args, kwargs)
            if r is not NOT_HANDLED:
                return r
            if func is torch._C._nn.linear:
                return _linear(*args, **kwargs)
            if func in (torch.bincount, torch.Tensor.bincount):
                hit = _bincount(self.branches, *args, **kwargs)
                if hit is not None:
                    return hit
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            if func in (torch.Tensor.cuda,):
                return args[0]
            if func in (torch.tensor, torch.as_tensor, torch.scalar_tensor) and args and \
                    isinstance(args[0], (torch.SymFloat, torch.SymInt)):
                # a tensor made from a scalar input stays symbolic (torch.tensor would bake it in)
                dt = kwargs.get("dtype") or (torch.float32 if isinstance(args[0], torch.SymFloat)
                                             else torch.int64)
                return torch.full((), args[0], dtype=dt, device="cpu")
            if func is torch.Tensor.__setitem__ and len(args) == 3 and isinstance(args[1], torch.Tensor) \
                    and args[1].dtype == torch.bool and args[1].shape == args[0].shape and (
                        not isinstance(args[2], torch.Tensor) or args[2].dim() == 0):
                # t[mask] = v with a full-shape mask is t = where(mask, v, t): no data-dependent size
                t, mask, v = args
                t.copy_(torch.where(mask, torch.as_tensor(v, dtype=t.dtype, device=t.device)
                                    if not isinstance(v, torch.Tensor) else v.to(t.dtype), t))
                return None
            if func is torch.Tensor.item and args[0].is_floating_point() and args[0].numel() == 1:
                # a float read back from the device (a global scale): kept as a 0-d tensor, so
                # the graph multiplies by it instead of baking this trace's value in
                return args[0].reshape(())
            if func is torch.Tensor.to:
                args = tuple(_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
            if func is torch.Tensor.numpy:
                if not args[0].is_floating_point() and not args[0].is_complex() and args[0].dim() <= 1:
                    # counts read to the host (`n = int(counts.cpu().numpy()[e])`): each element read
                    # is the tensor's own `.item()`, as `.tolist()` reads them (a size on the device)
                    from .counted_splits import HostReads

                    return HostReads(args[0])
                # a fake tensor has no values: numpy would hand back uninitialised memory as data
                raise TraceError("the reference reads a tensor's values into numpy (.numpy())")
            if func is torch.Tensor.__getitem__ and len(args) == 2 and not kwargs:
                r = symint_index.getitem(*args)   # t[:, i] with i symbolic: stays symbolic
                if r is not symint_index.NOT_HANDLED:
                    return r
            return func(*args, **kwargs)
    # loop_batching: `x[..., i]` / `out[..., i] = v` of a loop over a symbolic size
    return batching.wrap_mode(CpuDevice)() if batching is not None else CpuDevice()


def _bincount(branches, x, weights=None, minlength=0):
    """`torch.bincount(ids, minlength=m)` of a 1-D integer tensor: m bins counted by index_add (a
    static length; torch's is max(m, ids.max() + 1), a size read back). Ids outside 0..m-1 are
    assumed absent (they index past the bins a model has) and checked: the outputs are NaN where
    one occurs (assumed_branches.py), never a count folded into the wrong bin. None otherwise."""
    import torch

    if weights is not None or isinstance(minlength, bool) or not isinstance(minlength, int) or \
            minlength <= 0 or not isinstance(x, torch.Tensor) or x.dim() != 1 or \
            x.is_floating_point() or x.dtype == torch.bool:
        return None
    branches.held.append(torch.logical_and(x >= 0, x < minlength).all().reshape(()))
    ones = torch.ones_like(x, dtype=torch.int64)
    return torch.zeros(minlength, dtype=torch.int64, device=x.device).index_add_(
        0, x.clamp(0, minlength - 1), ones)


def _linear(x, weight, bias=None):
    """F.linear as ATen computes it, written with symbolic sizes: its C++ path for a 3-D input with
    a bias reads concrete sizes and would specialise the trace. 2-D, or 3-D contiguous, with a bias:
    addmm (bias added in fp32 before the one rounding); otherwise matmul, then the bias added."""
    import torch

    if bias is not None and (x.dim() == 2 or (x.dim() == 3 and x.is_contiguous())):
        if x.dim() == 2:
            return torch.addmm(bias, x, weight.t())
        out = torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight.t())
        return out.view(x.shape[0], x.shape[1], out.shape[-1])
    out = torch.matmul(x, weight.t())
    return out + bias if bias is not None else out


def _CpuDevice(batching=None):
    return _make_cpu_device_mode(batching)


def _why(e: Exception) -> str:
    s = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    low = s.lower()
    # .tolist() / a Python loop over a fake tensor's values ends in numel() of symbolic sizes
    if "data-dependent" in low or "guardondatadependent" in low or "unbacked" in low or \
            "cannot call numel() on tensor with symbolic" in low:
        return "stopped at a data-dependent size or branch (nonzero / boolean mask / .item() / " \
               "a Python loop over tensor values): " + s[:160]
    return s[:300]


def _to_ir(gm, inputs_ir, namer: _Namer, shape_env, sentinel: float) -> dict:
    import torch

    sent = {sentinel + 0.0078125 * i: inp["name"] for i, inp in enumerate(inputs_ir)
            if inp["kind"] == "float"}
    nodes: list[dict] = []
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph_name = {n.name: inp["name"] for n, inp in zip(phs, inputs_ir)}
    skip: set[str] = set()

    def enc(a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, (torch.SymInt,)):
                return {"sym": namer.expr(v.node.expr, shape_env)}
            if isinstance(v, torch.SymFloat):
                return namer.float_expr(v.node.expr, shape_env)
            if isinstance(v, torch.SymBool):
                raise TraceError(f"symbolic bool argument ({a.name})")
            if a.op == "placeholder":
                inp = next(i for i in inputs_ir if i["name"] == ph_name[a.name])
                if inp["kind"] == "float":
                    return {"scalar": inp["name"]}
                if inp["kind"] == "int":
                    return {"sym": inp["name"]}
                if inp["kind"] == "bool":
                    return {"sym": inp["name"]}
                return {"ref": inp["name"]}
            return {"ref": a.name}
        if isinstance(a, torch.SymInt):
            return {"sym": namer.expr(a.node.expr, shape_env)}
        if isinstance(a, torch.SymFloat):
            return namer.float_expr(a.node.expr, shape_env)
        if isinstance(a, bool) or a is None or isinstance(a, str):
            return a
        if isinstance(a, int):
            return a
        if isinstance(a, float):
            if a in sent:
                return {"scalar": sent[a]}
            return a if a == a and abs(a) != float("inf") else {"float": str(a)}
        if isinstance(a, complex):  # a complex Python number (x * 1j): lower_fft reads it
            return {"complex": [a.real, a.imag]}
        if isinstance(a, (list, tuple)):
            return [enc(x) for x in a]
        if isinstance(a, torch.dtype):
            return {"dtype": _dtype_name(a)}
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return None
        raise TraceError(f"argument of type {type(a).__name__} not supported")

    def meta(v):
        if isinstance(v, torch.Tensor):
            return _dtype_name(v.dtype), [namer.expr(getattr(s, "node", None).expr if isinstance(
                s, torch.SymInt) else s, shape_env) for s in v.shape]
        raise TraceError(f"value of type {type(v).__name__}")

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":
            t = getattr(gm, n.target)
            if not isinstance(t, torch.Tensor) or t.numel() > 65536:
                raise TraceError(f"a constant tensor of {getattr(t, 'numel', lambda: '?')()} elements")
            dt = _dtype_name(t.dtype)
            nodes.append({"name": n.name, "op": "constant", "args": [], "kwargs": {},
                          "value": t.detach().to("cpu").tolist() if t.dim() else t.item(),
                          "dtype": dt, "shape": [str(s) for s in t.shape]})
            continue
        if n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
            ir = {"inputs": inputs_ir, "nodes": nodes, "outputs": [enc(o) for o in outs]}
            if namer.dyn.bounds:
                ir["dynamic"] = namer.dyn.ir_entry(shape_env)
            return _canonical(ir)
        if n.op != "call_function":
            raise TraceError(f"graph node kind {n.op}")
        v = n.meta.get("val")
        namer.dyn.bind_node(n, namer, shape_env)  # names and bounds a data-dependent output size
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) \
                and not isinstance(v, torch.Tensor):
            rec = namer.dyn.bind_value(n, namer, shape_env, enc)  # an int .item(): read on device
            if rec is not None:
                nodes.append(rec)
            skip.add(n.name)  # size arithmetic: its uses read the SymInt's expression directly
            continue
        target = n.target
        op = "getitem" if target is __import__("operator").getitem else str(target)
        rec = {"name": n.name, "op": op, "args": [enc(a) for a in n.args],
               "kwargs": {k: enc(x) for k, x in n.kwargs.items()}}
        if isinstance(v, torch.Tensor):
            rec["dtype"], rec["shape"] = meta(v)
        elif isinstance(v, (list, tuple)):
            rec["dtype"], rec["shape"] = None, None
            rec["outs"] = [list(meta(x)) if isinstance(x, torch.Tensor) else None for x in v]
        elif v is None:
            rec["dtype"], rec["shape"] = None, None
        else:
            raise TraceError(f"{op} gives {type(v).__name__}")
        nodes.append(rec)
    raise TraceError("graph without output")


_NOOP_END = 2**62


def _canonical(ir: dict) -> dict:
    """Drop no-op views (a full slice, which the tracer records or elides depending on what it can
    prove about a size) and name nodes by position, so two traces compare structurally."""
    alias: dict[str, Any] = {}
    names: dict[str, str] = {}

    def fix(a):
        if isinstance(a, dict) and "ref" in a:
            if a["ref"] in alias:
                return alias[a["ref"]]
            return {"ref": names.get(a["ref"], a["ref"])}
        if isinstance(a, list):
            return [fix(x) for x in a]
        if isinstance(a, dict):
            return {k: fix(v) for k, v in a.items()}
        return a
    out = []
    for n in ir["nodes"]:
        args = n["args"]
        if n["op"] == "aten.slice.Tensor" and len(args) >= 1:
            start = args[2] if len(args) > 2 else 0
            end = args[3] if len(args) > 3 else None
            step = args[4] if len(args) > 4 else 1
            if start in (0, None) and step == 1 and (end is None or (isinstance(end, int) and end >= _NOOP_END)):
                if isinstance(args[0], dict) and "ref" in args[0]:
                    alias[n["name"]] = fix(args[0])
                    continue
        if n["op"] in ("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default") \
                and isinstance(args[0], dict) and "ref" in args[0]:
            alias[n["name"]] = fix(args[0])
            continue
        m = dict(n, args=fix(n["args"]), kwargs=fix(n["kwargs"]))
        names[n["name"]] = f"n{len(out)}"
        m["name"] = names[n["name"]]
        out.append(m)
    return {**{k: v for k, v in ir.items() if k not in ("nodes", "outputs")}, "nodes": out,
            "outputs": [fix(o) for o in ir["outputs"]]}


def _structure(ir: dict) -> str:
    return json.dumps({k: v for k, v in ir.items() if k != "guards"}, sort_keys=True)


def _guards(shape_env, namer) -> list[str]:
    """The trace's guards over scalar inputs and var axes, as sympy source strings."""
    import sympy

    out = []
    for g in getattr(shape_env, "guards", []):
        e = shape_env.replace(g.expr) if hasattr(shape_env, "replace") else g.expr
        free = e.free_symbols
        if not free or any(s not in namer.map for s in free):
            continue
        e = e.xreplace({s_: namer.map[s_] for s_ in free})
        if e in (sympy.true, sympy.false):
            continue
        out.append(sympy.srepr(e))
    # an Eq guard that pins a symbol to a number is kept as a replacement, not a guard
    for s_, v in getattr(shape_env, "replacements", {}).items():
        if s_ in namer.map and getattr(v, "is_number", False):
            out.append(sympy.srepr(sympy.Eq(namer.map[s_], v)))
    return sorted(set(out))


def _pin_guards(pins: dict, inputs_ir: list) -> list[str]:
    """Eq(scalar, value) per baked scalar: a float one over a plain symbol (an integer symbol
    would make sympy decide Eq(n, 0.2) false on the spot)."""
    import sympy

    from . import symexpr

    floats = {i["name"] for i in inputs_ir if i["kind"] == "float"}
    return [sympy.srepr(sympy.Eq(sympy.Symbol(k) if k in floats else symexpr.sym(k),
                                 sympy.Float(v) if k in floats else sympy.Integer(v)))
            for k, v in sorted(pins.items())]


def _covers(ir: dict, wl: dict) -> bool:
    """Whether a trace is valid at this workload too (all its guards hold there)."""
    v = _values(wl)
    try:
        return all(_eval_guard(src, v) for src in ir.get("guards", []))
    except Exception:  # noqa: BLE001 - a guard we cannot evaluate: trace the workload itself
        return False


VARIANT_BUDGET_S = 70   # of TRACE_TIMEOUT_S: tracing workloads one by one stops here (default)


def _trace_variants(defn, req: dict, irs: list, t0: float) -> dict:
    """The reference takes different graphs at different workloads: trace each workload that no
    trace so far covers (its guards), then select among the structures by guards (_variants).
    Tried with int scalars as symbols, then baked in, then with every scalar's value baked in and
    pinned by a guard (value specialisation: a float flag or mode that steers the code)."""
    import time

    ints = any(i.is_scalar and "int" in str(i.dtype) for i in defn.inputs.values())
    scal = any(i.is_scalar for i in defn.inputs.values())
    # int scalars as symbols first: baked in, each value is a graph of its own and a trace of the
    # budget (an expert offset taking 7 values used it all before the symbols were tried)
    modes = ([{"symint": True}] if ints else []) + [{}] + \
        ([{"baked": True, "symfloat": False}] if scal else [])
    pool: list = []
    for w in list(req["workloads"][:2]) + list(req.get("extra", [])):
        if w not in pool:
            pool.append(w)
    budget = float(req.get("budget_s", VARIANT_BUDGET_S))
    last = TraceError("the graph differs between workloads")
    for mode in modes:
        try:
            traced, tirs = [], []
            for i, w in enumerate(pool):
                cover = [t for t in tirs if _covers(t, w)]
                if i < 2 and not mode:
                    ir = irs[i]
                elif cover:
                    ir = cover[0]   # the same graph: a member of that structure's group
                else:
                    if time.monotonic() - t0 > budget:
                        raise TraceError(f"tracing each graph the workloads take took over "
                                         f"{budget:.0f} s")
                    ir = _trace_once(defn, w, _SENTINELS[0], **mode)
                traced.append(w)
                tirs.append(ir)
            return _variants(defn, traced, tirs)
        except TraceError as e:
            last = e
    raise last


def _variants(defn, workloads: list, irs: list, untraced: list = ()) -> dict:
    """Workloads whose traces differ (a scalar or size steering the reference's Python code): one
    IR per structure, each with the predicate (its guards that other structures break) that picks
    it at run time. Refused when the guards do not tell the structures apart."""
    groups: list[list] = []   # [structure, ir, [values...]]
    for wl, ir in zip(workloads, irs):
        vals = _values(wl)
        st = _structure(ir)
        for g in groups:
            if g[0] == st:
                g[2].append(vals)
                break
        else:
            groups.append([st, ir, [vals]])
    merged = _merge_specialised(groups)
    if len(merged) < len(groups):
        if len(merged) == 1:
            # one graph serves every workload, at the sizes the others were specialised to too:
            # no variants; of its guards, those that hold at every workload it now serves
            ir, vals = merged[0][1], merged[0][2]
            return {**ir, "guards": [g for g in ir.get("guards", []) if _holds_at_all(g, vals)]}
        try:
            return _select(merged, irs, untraced)
        except TraceError:
            pass   # the merged structures' guards cannot tell them apart: the structures as traced
    return _select(groups, irs, untraced)


def _select(groups: list, irs: list, untraced: list) -> dict:
    """The IR of one structure, or the variants of several, each with the predicate (its guards
    that hold at all its workloads and fail elsewhere) that picks it at run time."""
    import sympy

    from . import symexpr

    if len(groups) == 1:
        return groups[0][1]   # every workload retraced to the same graph: no variants
    if len(groups) > 16:
        raise TraceError(f"{len(groups)} different graphs over the workloads")
    all_vals = [v for g in groups for v in g[2]]
    out = []
    float_names = {i["name"] for i in irs[0]["inputs"] if i["kind"] == "float"}
    for st, ir, vals in groups:
        keep = []
        for src in ir.get("guards", []):
            # a selecting guard holds at every workload of this structure and fails somewhere
            # else (one that only held at the traced sizes, batch < 16, would drop members)
            try:
                if all(_eval_guard(src, v) for v in vals) and \
                        not all(_eval_guard(src, v) for v in all_vals):
                    keep.append(src)
            except Exception:  # noqa: BLE001 - a guard we cannot evaluate does not select
                continue
        others = [v for g in groups if g[0] != st for v in g[2]]
        if not keep or any(all(_eval_guard(src, v) for src in keep) for v in others):
            raise TraceError("the graph differs between workloads and no guard on the scalar "
                             "inputs or sizes tells the variants apart")
        exprs = [parse_guard(src) for src in keep]
        names = sorted({str(x) for e in exprs for x in e.free_symbols})
        c = " && ".join("(" + symexpr.to_c_bool(e, lambda n: ("f_" if n in float_names else "z_") + n)
                        + ")" for e in exprs)
        v = {"pred": c, "names": [n for n in names if n not in float_names],
             "fnames": [n for n in names if n in float_names], "ir": ir, "keep": keep}
        pins = _pins(exprs)
        if pins:
            v["pins"] = pins
        if not v["fnames"]:
            # the same test for the host, over sizes and int scalars only (a float scalar is a
            # float32 argument in the kernels, a double here): its launches carry it as `when`
            try:
                v["when"] = symexpr.to_axis_bool(sympy.And(*exprs))
            except ValueError:
                pass
        out.append(v)
    # workloads not traced (a size of 1): exactly one variant must take each
    for wl in untraced:
        v = _values(wl)
        hits = sum(all(_eval_guard(src, v) for src in o["keep"]) for o in out)
        if hits != 1:
            raise TraceError("a workload matches no variant (or several)")
    for o in out:
        o.pop("keep")
    return {"variants": out, "inputs": irs[0]["inputs"]}


def _holds_at_all(src: str, vals: list) -> bool:
    try:
        return all(_eval_guard(src, v) for v in vals)
    except Exception:  # noqa: BLE001 - a guard we cannot evaluate is not claimed to hold
        return False


def _merge_specialised(groups: list) -> list:
    """Fold a structure traced at a size torch specialised (its guard `batch_size == 1`: a size of
    one takes its own graph) into another structure whose graph, at those sizes, is the same graph:
    that graph then serves both groups of workloads, and the plan needs one variant fewer (each
    variant renders its kernels and templates anew: source size, compile time, and the template
    plan's size limit). Equality is checked on the graphs themselves with those sizes substituted,
    so a merge never changes what any workload computes."""
    out = [[g[0], g[1], list(g[2])] for g in groups]
    i = 0
    while i < len(out):
        b = out[i]
        exprs = []
        for src in b[1].get("guards", []):
            try:
                exprs.append(parse_guard(src))
            except Exception:  # noqa: BLE001 - a guard we cannot read pins nothing
                continue
        pins = {k: v for k, v in _pins(exprs).items() if all(val.get(k) == v for val in b[2])}
        target = None
        if pins:
            want = _structure(_substituted(b[1], pins))
            target = next((a for a in out if a is not b and
                           _structure(_substituted(a[1], pins)) == want), None)
        if target is not None:
            target[2].extend(b[2])
            out.pop(i)
            i = 0          # the merged group may now take another
        else:
            i += 1
    return out


def _substituted(ir: dict, pins: dict) -> dict:
    """The IR with the pinned sizes as their values in every shape and size argument."""
    import sympy

    from . import symexpr

    subs = {symexpr.sym(k): sympy.Integer(v) for k, v in pins.items()}

    def expr(s: str):
        try:
            e = symexpr.parse(s)
        except Exception:  # noqa: BLE001 - not an axis expression: as it is
            return s
        if not (e.free_symbols & set(subs)):
            return s
        return symexpr.to_axis(e.subs(subs))

    def walk(x, key=None):
        if isinstance(x, dict):
            if set(x) == {"sym"} and isinstance(x["sym"], str):
                v = expr(x["sym"])
                return int(v) if v.lstrip("-").isdigit() else {"sym": v}
            return {k: walk(v, k) for k, v in x.items() if k != "guards"}
        if isinstance(x, list):
            if key == "shape":
                return [expr(v) if isinstance(v, str) else v for v in x]
            return [walk(v) for v in x]
        return x

    return walk(ir)


def _pins(exprs: list) -> dict:
    """The sizes a variant's selecting guards fix to a constant (`batch_size == 1`), by name: the
    variant runs only where they hold, so its lowering may take them as those constants (its graph
    already does: torch specialised them; only the inputs' shapes still name them)."""
    import sympy

    pins = {}
    for e in exprs:
        if isinstance(e, sympy.Eq):
            a, b = (e.lhs, e.rhs) if e.lhs.is_Symbol else (e.rhs, e.lhs)
            if a.is_Symbol and b.is_Integer:
                pins[str(a)] = int(b)
    return pins


def _symbolic_math() -> None:
    """math.sqrt of a size (1 / math.sqrt(head_dim)) stays symbolic instead of specialising."""
    import math

    import torch

    if getattr(math.sqrt, "_solforge", False):
        return
    orig = math.sqrt

    def sqrt(x):
        if isinstance(x, (torch.SymInt, torch.SymFloat)):
            return torch._sym_sqrt(x)
        return orig(x)
    sqrt._solforge = True
    math.sqrt = sqrt


def child_main() -> int:
    import time

    t0 = time.monotonic()
    req = json.loads(sys.stdin.read())
    try:
        _symbolic_math()
    except Exception:  # noqa: BLE001 - plain math then
        pass
    try:
        import torch  # noqa: F401

        from ..problem.definition import Definition

        defn = Definition.model_validate(req["definition"])
        irs = []
        for i, wl in enumerate(req["workloads"][:2]):
            try:
                irs.append(_trace_once(defn, wl, _SENTINELS[i]))
            except TraceError:
                if not any(i_.is_scalar for i_ in defn.inputs.values()):
                    raise
                irs.append(_trace_once(defn, wl, _SENTINELS[i], symfloat=False))
        pool = list(req["workloads"]) + list(req.get("extra", []))
        if len(irs) == 2 and _structure(irs[0]) == _structure(irs[1]) and \
                not all(_covers(irs[0], w) for w in pool):
            # the two traced workloads agree, but the graph's guards fail at another workload
            # (a padding branch both skipped): its own graph is traced, as variants
            out = _trace_variants(defn, req, irs, t0)
            if "variants" in out:
                print(json.dumps({"ok": True, "ir": out}))
                return 0
            irs = [out, out]
        if len(irs) == 2 and _structure(irs[0]) != _structure(irs[1]):
            try:
                print(json.dumps({"ok": True, "ir": _trace_variants(defn, req, irs, t0)}))
                return 0
            except TraceError as e:
                variants_why = str(e)
            a, b = irs
            why = "the graph differs between two workloads"
            for x, y in zip(a["nodes"], b["nodes"]):
                if x != y:
                    why += f" at {x['op']} ({x['name']})"
                    break
            else:
                if len(a["nodes"]) != len(b["nodes"]):
                    why += f" ({len(a['nodes'])} vs {len(b['nodes'])} nodes)"
            raise TraceError(why + ": sizes or scalar values steer the reference's Python code ("
                             + variants_why[:120] + ")")
        from . import float_sizes

        # every workload checked against the guards of a size truncated from float arithmetic
        ir = float_sizes.guard(irs[0], pool)
        print(json.dumps({"ok": True, "ir": ir}))
    except TraceError as e:
        print(json.dumps({"ok": False, "reason": str(e)}))
    except Exception as e:  # noqa: BLE001 - anything else the reference raises, as one line
        print(json.dumps({"ok": False, "reason": _why(e)}))
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
