"""RoPE frequency-table family: cos/sin tables from position ids, per axis (Flux multi-axis RoPE).

Serves a reference that builds, for each axis of a literal `axes_dim = [..]` list, frequencies
`1.0 / (theta ** (arange(half) / half))`, multiplies them by that axis's position ids, takes cos
and sin, repeats each frequency twice (`repeat_interleave(.., 2, dim=-1)`) and concatenates the
axes: inputs ids [seq, n_axes] float32 and a float scalar theta; outputs cos and sin [seq, total]
float32. kernels_cuda/rope_freqs/rope_freqs.cu holds the kernel and the rounding order.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, const_value, read_source, reference_code, shape_dims

_AXES = re.compile(r"axes_dim\s*=\s*\[\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*\]")
_NEEDED = [re.compile(p) for p in (
    r"repeat_interleave\(\s*\w+\s*,\s*2\s*,\s*dim\s*=\s*-1\s*\)",
    r"1\.0\s*/\s*\(\s*theta\s*\*\*\s*\(\s*\w+\s*/\s*half_dim\s*\)\s*\)",
    r"arange\(\s*half_dim\b", r"half_dim\s*=\s*dim\s*//\s*2", r"\bcos\(", r"\bsin\(")]
_FOREIGN = re.compile(r"\b(?:matmul|linear|einsum|bmm|conv\w*|softmax|\w*norm\w*|exp|sigmoid|tanh|"
                      r"scatter\w*|gather|index\w*|where|masked_fill)\s*\(|@")


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
        code = reference_code(defn)
        m = _AXES.search(code)
        if not m or _FOREIGN.search(code) or not all(p.search(code) for p in _NEEDED):
            return None
        axes = [int(x) for x in m.group(1).split(",")]
        if not 1 <= len(axes) <= 4 or any(a <= 0 or a % 2 for a in axes):
            return None
        tensors = {k: v for k, v in defn.inputs.items() if not v.is_scalar}
        scalars = {k: v for k, v in defn.inputs.items() if v.is_scalar}
        if len(tensors) != 1 or len(scalars) != 1 or len(defn.outputs) != 2:
            return None
        (ids, ispec), = tensors.items()
        (theta, tspec), = scalars.items()
        if ispec.dtype != "float32" or tspec.dtype not in ("float32", "float64"):
            return None
        ishape = shape_dims(defn, ids)
        if len(ishape) != 2 or const_value(defn, ishape[1]) != len(axes):
            return None
        outs = list(defn.outputs)
        cos = [o for o in outs if "cos" in o.lower()]
        sin = [o for o in outs if "sin" in o.lower()]
        if len(cos) != 1 or len(sin) != 1 or cos == sin:
            return None
        for o in outs:
            s = shape_dims(defn, o)
            if (defn.outputs[o].dtype != "float32" or len(s) != 2 or s[0] != ishape[0]
                    or const_value(defn, s[1]) != sum(axes)):
                return None
        fixed = {"N_AXES": len(axes), "TOTAL": sum(axes)}
        fixed.update({f"AXIS{i}": a for i, a in enumerate(axes)})
        return Spec(fixed=fixed, info={"ids": ids, "theta": theta, "cos": cos[0], "sin": sin[0],
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
