"""Softmax-backward family: grad of a row softmax (last dim), with an attention mask and dropout.

Serves a float32 reference of the form

    gs = g * dropout_mask.float() / (1.0 - p_dropout)   (inside `if p_dropout > 0.0:`, else gs = g)
    s = (p * gs).sum(dim=-1, keepdim=True)
    out = (p * (gs - s)).masked_fill(~mask, 0.0)

(the dropout part optional) where g, p, the dropout mask and the output share a shape
[B, H, S, n] and the boolean mask is that shape or [B, 1, S, n]. The row length n may vary per
workload. kernels_cuda/softmax_backward/softmax_backward.cu holds the kernel.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, product_expr, read_source, reference_code, shape_dims

_W = r"(\w+)"
_DROP = re.compile(rf"^\s*if\s+{_W}\s*>\s*0(?:\.0)?\s*:\s*\n\s*{_W}\s*=\s*{_W}\s*\*\s*{_W}\.float\(\)"
                   rf"\s*/\s*\(\s*1\.0\s*-\s*{_W}\s*\)\s*\n\s*else\s*:\s*\n\s*{_W}\s*=\s*{_W}\s*$", re.M)
_SUM = re.compile(rf"^\s*{_W}\s*=\s*\(\s*{_W}\s*\*\s*{_W}\s*\)\.sum\(\s*dim\s*=\s*-1\s*,\s*"
                  rf"keepdim\s*=\s*True\s*\)\s*$", re.M)
_GRAD = re.compile(rf"^\s*{_W}\s*=\s*{_W}\s*\*\s*\(\s*{_W}\s*-\s*{_W}\s*\)\s*$", re.M)
_MASK = re.compile(rf"^\s*{_W}\s*=\s*{_W}\.masked_fill\(\s*~\s*{_W}\s*,\s*0(?:\.0)?\s*\)\s*$", re.M)
_RET = re.compile(rf"^\s*return\s+{_W}\s*$", re.M)


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
        code = reference_code(defn)
        body = "\n".join(l for l in code.splitlines()
                         if l.strip() and not re.match(r"\s*(import|from|def|\)|[\w\s:.,\[\]]*,\s*$)", l))
        s, gr, mk, rt = _SUM.findall(body), _GRAD.findall(body), _MASK.findall(body), _RET.findall(body)
        if len(s) != 1 or len(gr) != 1 or len(mk) != 1 or len(rt) != 1:
            return None
        (sum_name, p, gs), (res, p2, gs2, sum2), (out_v, res2, mask) = s[0], gr[0], mk[0]
        if p2 != p or gs2 != gs or sum2 != sum_name or res2 != res or rt[0] != out_v:
            return None
        d = _DROP.findall(body)
        drop = None
        if d:
            pd, gs_a, g, keep, pd2, gs_b, g2 = d[0]
            if pd != pd2 or gs_a != gs or gs_b != gs or g2 != g:
                return None
            drop = (pd, keep)
            n_lines = 8
        else:
            alias = re.findall(rf"^\s*{re.escape(gs)}\s*=\s*(\w+)\s*$", body, re.M)
            g, n_lines = (alias[0], 5) if len(alias) == 1 else (gs, 4)
        if len([l for l in body.splitlines() if l.strip()]) != n_lines:
            return None  # anything else in the reference is not ours
        names = [g, p, mask] + ([drop[1]] if drop else [])
        if any(k not in defn.inputs for k in names) or len(defn.outputs) != 1:
            return None
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
        if drop and not (defn.inputs.get(drop[0]) and defn.inputs[drop[0]].is_scalar):
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
