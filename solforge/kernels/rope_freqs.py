"""RoPE frequency-table family: cos/sin tables from position ids, per axis (Flux multi-axis RoPE).

Serves a reference whose trace (solforge/kernels/structure.py) builds, for each axis i, frequencies
`1.0 / (theta ** (arange(half_i) / half_i))`, multiplies them by that axis's position ids
(ids[:, i]), takes cos and sin, repeats each frequency twice along the last dim and concatenates
the axes: inputs ids [seq, n_axes] float32 and a float scalar theta; outputs the cos table and the
sin table [seq, total] float32 (which is which: the op that made it, not its name). The axis widths
are the traced pieces' widths. kernels_cuda/rope_freqs/rope_freqs.cu holds the kernel and the rounding order.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, const_value, read_source, shape_dims
from .structure import In, Ref, Traced, trace

class RopeFreqsFamily(Family):
    name = "rope_freqs"
    description = ("multi-axis RoPE cos/sin tables from position ids (Flux style: per-axis "
                   "1/theta^(k/half), repeat_interleave, cat) in one pass, float32")
    ops = ("rope_frequency_tables",)
    source_dir = "rope_freqs"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        tensors = {k: v for k, v in defn.inputs.items() if not v.is_scalar}
        scalars = {k: v for k, v in defn.inputs.items() if v.is_scalar}
        if len(tensors) != 1 or len(scalars) != 1 or len(defn.outputs) != 2:
            return None
        (ids, ispec), = tensors.items()
        (theta, tspec), = scalars.items()
        if ispec.dtype != "float32" or tspec.dtype not in ("float32", "float64"):
            return None
        ishape = shape_dims(defn, ids)
        if len(ishape) != 2:
            return None
        g = trace(defn)
        if g is None or set(g.names()) - _ALLOWED:
            return None
        tables = {}
        for out, ref in g.outputs.items():
            t = _table(g, ref, ids, g.scalars[theta])
            if t is None:
                return None
            tables[out] = t
        kinds = {kind for kind, _ in tables.values()}
        axes_seen = {tuple(axes) for _, axes in tables.values()}
        if kinds != {"cos", "sin"} or len(axes_seen) != 1:
            return None
        axes = list(axes_seen.pop())
        cos = next(o for o, (k, _) in tables.items() if k == "cos")
        sin = next(o for o, (k, _) in tables.items() if k == "sin")
        if not 1 <= len(axes) <= 4 or any(a <= 0 or a % 2 for a in axes) or \
                const_value(defn, ishape[1]) != len(axes):
            return None
        for o in defn.outputs:
            s = shape_dims(defn, o)
            if (defn.outputs[o].dtype != "float32" or len(s) != 2 or s[0] != ishape[0]
                    or const_value(defn, s[1]) != sum(axes)):
                return None
        fixed = {"N_AXES": len(axes), "TOTAL": sum(axes)}
        fixed.update({f"AXIS{i}": a for i, a in enumerate(axes)})
        return Spec(fixed=fixed, info={"ids": ids, "theta": theta, "cos": cos, "sin": sin,
                                       "seq": str(ishape[0]), "axes": axes})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        vecs = [v for v in (4, 2, 1) if all(a % v == 0 for a in spec.info["axes"])]
        return [{"VEC": v, "BLOCK": b} for v in vecs for b in (128, 256, 64)]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK"} - set(params):
            raise FamilyError("rope_freqs params: VEC, BLOCK")
        if params["VEC"] not in (1, 2, 4) or any(a % params["VEC"] for a in spec.info["axes"]):
            raise FamilyError(f"VEC={params['VEC']}: 1, 2 or 4, dividing every axis")
        if not 32 <= params["BLOCK"] <= 1024 or params["BLOCK"] % 32:
            raise FamilyError("BLOCK: a multiple of 32 up to 1024")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        seq = spec.info["seq"]
        launch = Launch(kernel="rope_freqs_kernel",
                        grid=[f"max(1, ceil_div({seq} * TOTAL, VEC * BLOCK))"], block=["BLOCK"],
                        args=[spec.info["ids"], spec.info["cos"], spec.info["sin"], f"int64:{seq}",
                              f"float32:{spec.info['theta']}"])
        return Candidate(problem=defn.name, language="cuda",
                         sources={"rope_freqs.cu": read_source("rope_freqs", "rope_freqs.cu")},
                         params={**spec.fixed, **params}, launches=[launch],
                         options=["--fmad=false"], notes=f"family=rope_freqs {params}")


_ALLOWED = {"select", "slice", "unsqueeze", "arange", "div", "pow", "reciprocal", "mul", "cos", "sin",
            "repeat_interleave", "cat", "view", "_unsafe_view", "reshape", "expand", "clone", "alias",
            "detach", "_to_copy", "lift_fresh_copy"}
_PASS = {"view", "_unsafe_view", "reshape", "clone", "alias", "detach", "lift_fresh_copy"}


def _skip(g: Traced, ref, names=_PASS):
    while isinstance(ref, Ref) and g.ops[ref.i].name in names:
        ref = g.ops[ref.i].args[0]
    return ref


def _interleaved(g: Traced, ref):
    """T where `ref` repeats each element of T's last dim twice (repeat_interleave(T, 2, -1), which
    the trace shows as unsqueeze(T, -1) -> expand(.., 2) -> clone -> view)."""
    ref = _skip(g, ref)
    if not isinstance(ref, Ref):
        return None
    op = g.ops[ref.i]
    if op.name == "repeat_interleave":
        return op.args[0] if tuple(op.args[1:2]) == (2,) else None
    if op.name != "expand" or not op.shape or op.shape[-1] != 2:
        return None
    un = op.args[0]
    if not isinstance(un, Ref) or g.ops[un.i].name != "unsqueeze" or g.ops[un.i].args[1] not in (-1, len(op.shape) - 1):
        return None
    return g.ops[un.i].args[0]


def _table(g: Traced, ref, ids: str, theta: float):
    """("cos" | "sin", the axis widths) when `ref` is cat over the axes i of
    repeat2(cos|sin(ids[:, i, None] * 1 / theta ** (arange(h) / h))) along the last dim."""
    ref = _skip(g, ref)
    if not isinstance(ref, Ref) or g.ops[ref.i].name != "cat":
        return None
    cat = g.ops[ref.i]
    if (cat.args[1] if len(cat.args) > 1 else 0) not in (-1, 1):
        return None
    kinds, axes = set(), []
    for i, piece in enumerate(cat.args[0]):
        t = _skip(g, _interleaved(g, piece))
        if not isinstance(t, Ref) or g.ops[t.i].name not in ("cos", "sin"):
            return None
        kinds.add(g.ops[t.i].name)
        ang = _skip(g, g.ops[t.i].args[0])
        if not isinstance(ang, Ref) or g.ops[ang.i].name != "mul":
            return None
        h = g.ops[ang.i].shape[-1] if g.ops[ang.i].shape else None
        pos, freq = None, None
        for a in g.ops[ang.i].args:
            b = _skip(g, a, _PASS | {"unsqueeze", "_to_copy"})
            if isinstance(b, Ref) and g.ops[b.i].name == "select" and g.ops[b.i].args[0] == In(ids):
                pos = g.ops[b.i].args[1:]
            else:
                freq = b
        if pos != (1, i) or freq is None or not _freqs(g, freq, h, theta):
            return None
        axes.append(2 * h)
    return (kinds.pop(), axes) if len(kinds) == 1 else None


def _freqs(g: Traced, ref, h: int, theta: float) -> bool:
    """Is `ref` 1 / theta ** (arange(h) / h): its ancestry is arange(h), a div by h, theta ** that,
    and a reciprocal (or 1.0 / ...), nothing else?"""
    seen, todo, names = set(), [ref], []
    while todo:
        r = todo.pop()
        if not isinstance(r, Ref) or r.i in seen:
            if isinstance(r, In):
                return False
            continue
        seen.add(r.i)
        op = g.ops[r.i]
        names.append((op.name, op.constants()))
        todo += op.refs()
    ops = [n for n, _ in names]
    if set(ops) - {"arange", "div", "pow", "reciprocal", "mul", "_to_copy", "unsqueeze"} or \
            ops.count("arange") != 1 or ops.count("pow") != 1:
        return False
    consts = {n: c for n, c in names}
    return consts["arange"] == [h] and theta in consts["pow"] and [h] in [c for n, c in names if n == "div"]
