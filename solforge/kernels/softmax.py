"""Row softmax family: softmax over the last dimension, optionally after a Gemma-style soft-cap.

Serves a problem when its traced reference (solforge/kernels/structure.py) is only a softmax over
the last dim of one float32/float16/bfloat16 tensor (output of the same shape and dtype), with
casts around it, optionally preceded by the soft-cap `tanh(x / c) * c` with a constant c. The row
length may vary per workload (it is a kernel argument). What the kernel reproduces, read from the
trace: whether the cap's steps run on the dtype tensor (each step rounded, SOFTCAP_ROUND=1) or in
float32; the softmax itself always
accumulates in float32 and rounds once, which is what PyTorch does for
`F.softmax(x, -1, dtype=torch.float32).to(dtype)` and for a plain half/bf16 softmax alike.

Offered to the search only when kernels_cuda/softmax/family.json says `"offered": true` (set after
a GPU run finds it correct); `get_family("softmax")` works either way.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, product_expr,
                   read_source, shape_dims)
from .gate import family_offered
from .structure import In, Ref, Traced, chain, trace

_CASTS = {"_to_copy", "view", "_unsafe_view", "reshape", "alias", "detach", "clone", "lift_fresh_copy"}
MAX_CACHE = 64  # registers per thread the single-pass path may hold (floats)


def offered() -> bool:
    return family_offered("softmax")


def _softmax_of(g: Traced, x: str) -> Optional[tuple[float, bool]]:
    """(c, the cap computed in float32) for out = softmax(cap(x), last dim) with casts around it;
    c = 0.0 without a cap; None for anything else."""
    if set(g.names()) - _CASTS - {"_softmax", "div", "tanh", "mul"} or len(g.find("_softmax")) != 1:
        return None
    (out,) = g.outputs.values()
    sm, _ = chain(g, out, _CASTS)
    if not isinstance(sm, Ref) or g.ops[sm.i].name != "_softmax":
        return None
    op = g.ops[sm.i]
    if op.args[1] not in (-1, len(op.shape or ()) - 1):
        return None
    src, _ = chain(g, op.args[0], _CASTS)
    if src == In(x):
        return (0.0, True) if len(g.ops) == len(g.find(*_CASTS)) + 1 else None
    # the cap: mul(tanh(div(x', c)), c)
    mul = g.ops[src.i] if isinstance(src, Ref) else None
    if mul is None or mul.name != "mul" or len(mul.constants()) != 1:
        return None
    c = mul.constants()[0]
    th = next((a for a in mul.args if isinstance(a, Ref)), None)
    if th is None or g.ops[th.i].name != "tanh" or not isinstance(g.ops[th.i].args[0], Ref):
        return None
    div = g.ops[g.ops[th.i].args[0].i]
    if div.name != "div" or div.constants() != [c] or not isinstance(div.args[0], (In, Ref)) or c <= 0:
        return None
    if chain(g, div.args[0], _CASTS)[0] != In(x) or len(g.ops) != len(g.find(*_CASTS)) + 4:
        return None
    return float(c), div.dtype == "float32"


class SoftmaxFamily(Family):
    name = "softmax"
    description = ("row softmax over the last dimension (run-time length), optional soft-cap "
                   "tanh(x/c)*c first; float32 max/sum; row in registers when it fits, else two "
                   "passes; one row per warp, per TPR<32 threads or per block")
    ops = ("softmax", "softcap_softmax")
    source_dir = "softmax"

    @property
    def offered(self) -> bool:
        return offered()

    def analyze(self, defn: Definition) -> Optional[Spec]:
        tensors = {k: v for k, v in defn.inputs.items() if not v.is_scalar}
        if len(tensors) != 1 or len(defn.inputs) != 1 or len(defn.outputs) != 1:
            return None
        (x, xs), = tensors.items()
        (o, os_), = defn.outputs.items()
        if xs.dtype != os_.dtype or xs.dtype not in DTYPE_CODE:
            return None
        shape = shape_dims(defn, x)
        if not shape or shape != shape_dims(defn, o):
            return None
        g = trace(defn)
        found = _softmax_of(g, x) if g is not None else None
        if found is None:
            return None
        c, in_float = found
        fixed = {"DTYPE": DTYPE_CODE[xs.dtype], "SOFTCAP": float(c),
                 "SOFTCAP_ROUND": 0 if (in_float or xs.dtype == "float32") else 1}
        info = {"x": x, "out": o, "rows": product_expr(shape[:-1]), "n": str(shape[-1]),
                "dtype": xs.dtype}
        return Spec(fixed=fixed, info=info)

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        vec = 16 // DTYPE_BYTES[spec.info["dtype"]]
        n_axis = spec.info["n"]
        ns = sorted(int(w.axes[n_axis]) for w in workloads if n_axis in getattr(w, "axes", {}))
        if not ns:
            ns = [int(n_axis) if n_axis.isdigit() else 1024]
        n_med, n_max = ns[len(ns) // 2], ns[-1]
        out: list[dict] = []
        for tpr, rows in ((8, 32), (16, 16), (32, 4), (32, 8), (64, 4), (128, 2), (128, 1),
                          (256, 1), (512, 1), (1024, 1)):
            for npt in (1, 2, 4, 8):
                if npt * vec <= MAX_CACHE:
                    out.append({"TPR": tpr, "ROWS": rows, "VEC": vec, "NPT": npt})

        def key(p: dict) -> tuple:
            cover = p["TPR"] * p["VEC"] * p["NPT"]
            # best guess: the longest workload row fits in registers (single pass everywhere),
            # about 2 vectors per thread on the median row, 256 threads
            return (cover < n_max, abs(-(-n_med // (p["TPR"] * p["VEC"])) - 2),
                    p["TPR"] * p["ROWS"] != 256, cover)
        out.sort(key=key)
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        missing = {"TPR", "ROWS", "VEC", "NPT"} - set(params)
        if missing:
            raise FamilyError(f"softmax params missing: {sorted(missing)}")
        tpr, rows, vec, npt = (params[k] for k in ("TPR", "ROWS", "VEC", "NPT"))
        if any(not isinstance(v, int) or v < 1 for v in (tpr, rows, vec, npt)):
            raise FamilyError("TPR, ROWS, VEC, NPT must be positive integers")
        if (tpr < 32 and tpr & (tpr - 1)) or (tpr >= 32 and tpr % 32) or tpr * rows > 1024:
            raise FamilyError(f"TPR={tpr}, ROWS={rows}: bad block shape")
        if vec & (vec - 1) or vec * DTYPE_BYTES[spec.info["dtype"]] > 16:
            raise FamilyError(f"VEC={vec}: a power of two of at most 16 bytes")
        if npt * vec > MAX_CACHE:
            raise FamilyError(f"NPT*VEC={npt * vec} registers per thread exceeds {MAX_CACHE}")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        src = read_source("common", "dtype.cuh") + "\n" + read_source("softmax", "softmax.cu")
        rows, n = spec.info["rows"], spec.info["n"]
        launch = Launch(kernel="softmax_kernel", grid=[f"ceil_div({rows}, ROWS)"],
                        block=["TPR * ROWS"],
                        args=[spec.info["x"], spec.info["out"], f"int32:{rows}", f"int32:{n}"])
        return Candidate(problem=defn.name, language="cuda", sources={"softmax.cu": src},
                         params={**spec.fixed, **params}, launches=[launch],
                         notes=f"family=softmax {params}")
