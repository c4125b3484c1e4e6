"""Softmax-backward family: grad of a row softmax (last dim), with an attention mask and dropout.

Serves a float32 reference whose trace (solforge/kernels/structure.py) is

    gs = g * dropout_mask.float() / (1.0 - p_dropout)   (inside `if p_dropout > 0.0:`, else gs = g)
    s = (p * gs).sum(dim=-1, keepdim=True)
    out = (p * (gs - s)).masked_fill(~mask, 0.0)

(the dropout part optional; traced once with p_dropout > 0 and once with 0, which must give the
plain g) where g, p, the dropout mask and the output share a shape
[B, H, S, n] and the boolean mask is that shape or [B, 1, S, n]. The row length n may vary per
workload. Roles come from the trace (what is cast and scaled, what is inverted, what multiplies
twice), never from names. kernels_cuda/softmax_backward/softmax_backward.cu holds the kernel.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, product_expr, read_source, shape_dims
from .structure import In, Ref, Traced, chain, trace

class SoftmaxBackwardFamily(Family):
    name = "softmax_backward"
    description = ("softmax backward over the last dim (p * (g - sum(p * g))) with a boolean "
                   "attention mask and optional dropout scaling; one row per warp or block, "
                   "float32, 16-byte loads where the row allows")
    ops = ("softmax_backward", "masked_softmax_dropout_backward")
    source_dir = "softmax_backward"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        if len(defn.outputs) != 1:
            return None
        scalars = [k for k, v in defn.inputs.items() if v.is_scalar]
        g1 = trace(defn)
        m = _softmax_bwd(g1) if g1 is not None else None
        if m is None:
            return None
        g, p, mask, gs = m
        drop = None
        if gs is not None:
            # dropout: gs = g * keep.float() / (1 - p_drop), and with p_drop = 0 the plain g
            keep, p_drop = gs
            if p_drop not in scalars:
                return None
            g0 = trace(defn, {p_drop: 0.0})
            m0 = _softmax_bwd(g0) if g0 is not None else None
            if m0 is None or m0[:3] != (g, p, mask) or m0[3] is not None:
                return None
            drop = (p_drop, keep)
        elif scalars:
            return None
        names = [g, p, mask] + ([drop[1]] if drop else [])
        (out, ospec), = defn.outputs.items()
        tensors = {k for k, v in defn.inputs.items() if not v.is_scalar}
        if tensors != set(names):
            return None
        full = shape_dims(defn, g)
        if len(full) != 4 or shape_dims(defn, p) != full or shape_dims(defn, out) != full:
            return None
        if any(defn.inputs[k].dtype != "float32" for k in (g, p)) or ospec.dtype != "float32":
            return None
        if defn.inputs[mask].dtype != "bool" or (drop and defn.inputs[drop[1]].dtype != "bool"):
            return None
        if drop and shape_dims(defn, drop[1]) != full:
            return None
        ms = shape_dims(defn, mask)
        if ms == full:
            per_head = 1
        elif len(ms) == 4 and ms[0] == full[0] and str(ms[1]) == "1" and ms[2:] == full[2:]:
            per_head = 0
        else:
            return None
        return Spec(fixed={"MASK_PER_HEAD": per_head},
                    info={"g": g, "p": p, "mask": mask, "keep": drop[1] if drop else g,
                          "p_drop": drop[0] if drop else None, "out": out,
                          "rows": product_expr(full[:-1]), "n": str(full[-1]),
                          "seq": str(full[2]), "heads": str(full[1])})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        n_axis = spec.info["n"]
        ns = sorted(int(w.axes[n_axis]) for w in workloads if n_axis in getattr(w, "axes", {}))
        n_med = ns[len(ns) // 2] if ns else 1024
        out = []
        for tpr, rows in ((32, 8), (32, 4), (64, 4), (128, 2), (128, 1), (256, 1), (512, 1),
                          (32, 16), (1024, 1)):
            out.append({"TPR": tpr, "ROWS": rows})
        # best guess: about 4-8 float4 chunks per thread on the median row
        out.sort(key=lambda p: (abs(n_med / (4 * p["TPR"]) - 6), p["TPR"] * p["ROWS"] != 256))
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"TPR", "ROWS"} - set(params):
            raise FamilyError("softmax_backward params: TPR, ROWS")
        tpr, rows = params["TPR"], params["ROWS"]
        if tpr < 32 or tpr % 32 or rows < 1 or tpr * rows > 1024:
            raise FamilyError(f"TPR={tpr}, ROWS={rows}: TPR a multiple of 32, TPR * ROWS <= 1024")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        i = spec.info
        pd = i["p_drop"]
        args = [i["g"], i["p"], i["mask"], i["keep"], i["out"], f"int64:{i['rows']}",
                f"int32:{i['n']}", f"int32:{i['seq']}", f"int32:{i['heads']}",
                f"float32:{pd}" if pd else "float32:0", f"float32:1.0 - {pd}" if pd else "float32:1"]
        launch = Launch(kernel="softmax_backward_kernel", grid=[f"ceil_div({i['rows']}, ROWS)"],
                        block=["TPR * ROWS"], args=args)
        return Candidate(problem=defn.name, language="cuda",
                         sources={"softmax_backward.cu": read_source("softmax_backward", "softmax_backward.cu")},
                         params={**spec.fixed, **params}, launches=[launch],
                         options=["--fmad=false"], notes=f"family=softmax_backward {params}")


_ALLOWED = {"_to_copy", "mul", "div", "sum", "sub", "bitwise_not", "masked_fill", "alias", "view",
            "_unsafe_view", "expand", "clone", "detach", "lift_fresh_copy"}
_PASS = {"alias", "view", "_unsafe_view", "expand", "clone", "detach", "lift_fresh_copy"}


def _other(op, ref):
    """The operand of a binary op that is not `ref` (None if `ref` is not one of exactly two)."""
    args = [a for a in op.args[:2]]
    if len(args) != 2 or ref not in args:
        return None
    return args[1] if args[0] == ref else args[0]


def _softmax_bwd(g: Traced):
    """(g, p, mask, dropout) for out = (p * (gs - sum(p * gs, -1, keepdim))).masked_fill(~mask, 0),
    gs = g or g * keep.float() / (1 - p_drop) (dropout = (keep, p_drop)); None otherwise."""
    if set(g.names()) - _ALLOWED or len(g.outputs) != 1:
        return None
    (out,) = g.outputs.values()
    out, _ = chain(g, out, _PASS)
    if not isinstance(out, Ref) or g.ops[out.i].name != "masked_fill" or g.ops[out.i].args[2:] != (0.0,):
        return None
    res, notm = g.ops[out.i].args[:2]
    notm, _ = chain(g, notm, _PASS)
    if not isinstance(notm, Ref) or g.ops[notm.i].name != "bitwise_not":
        return None
    mask, _ = chain(g, g.ops[notm.i].args[0], _PASS)
    res, _ = chain(g, res, _PASS)
    if not isinstance(mask, In) or not isinstance(res, Ref) or g.ops[res.i].name != "mul":
        return None
    # res = p * sub(gs, s)
    subs = [a for a in g.ops[res.i].args[:2] if isinstance(a, Ref) and g.ops[a.i].name == "sub"]
    if len(subs) != 1:
        return None
    p = _other(g.ops[res.i], subs[0])
    gs, s = g.ops[subs[0].i].args[:2]
    if not isinstance(p, In) or not isinstance(s, Ref) or g.ops[s.i].name != "sum":
        return None
    sm = g.ops[s.i]
    keep_dim = sm.args[2] if len(sm.args) > 2 else sm.kwargs.get("keepdim")
    if tuple(sm.args[1]) not in ((-1,), (3,)) or keep_dim is not True or not isinstance(sm.args[0], Ref):
        return None
    pg = g.ops[sm.args[0].i]
    if pg.name != "mul" or _other(pg, p) != gs:
        return None
    if isinstance(gs, In):
        return gs.name, p.name, mask.name, None
    # gs = div(mul(g, keep.float()), 1 - p_drop)
    dv = g.ops[gs.i] if isinstance(gs, Ref) else None
    if dv is None or dv.name != "div" or len(dv.constants()) != 1 or not isinstance(dv.args[0], Ref):
        return None
    mk = g.ops[dv.args[0].i]
    if mk.name != "mul":
        return None
    gi = [a for a in mk.args[:2] if isinstance(a, In)]
    kf = [a for a in mk.args[:2] if isinstance(a, Ref) and g.ops[a.i].name == "_to_copy"]
    if len(gi) != 1 or len(kf) != 1 or not isinstance(g.ops[kf[0].i].args[0], In):
        return None
    keep = g.ops[kf[0].i].args[0].name
    p_drop = next((k for k, v in g.scalars.items() if abs((1.0 - v) - dv.constants()[0]) < 1e-12), None)
    if p_drop is None:
        return None
    return gi[0].name, p.name, mask.name, (keep, p_drop)
