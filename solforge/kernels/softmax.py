"""Row softmax family: softmax over the last dimension, optionally after a Gemma-style soft-cap.

Serves a problem when its reference is only `softmax(x, dim=-1)` on one float32/float16/bfloat16
tensor (output of the same shape and dtype), optionally preceded by the soft-cap
`tanh(x / c) * c` with a literal c. The row length may vary per workload (it is a kernel
argument). What the kernel reproduces, read from the reference: whether the cap's steps run on the
dtype tensor (each step rounded, SOFTCAP_ROUND=1) or in float32; the softmax itself always
accumulates in float32 and rounds once, which is what PyTorch does for
`F.softmax(x, -1, dtype=torch.float32).to(dtype)` and for a plain half/bf16 softmax alike.

Offered to the search only when kernels_cuda/softmax/family.json says `"offered": true` (set after
a GPU run finds it correct); `get_family("softmax")` works either way.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, product_expr,
                   read_source, reference_code, shape_dims)
from .gate import family_offered

# Anything beyond the cap and the softmax means another family (or an agent) should take it.
_FOREIGN = re.compile(r"\b(?:matmul|linear|einsum|bmm|conv\w*|\w*dropout|masked_fill|topk|sort|"
                      r"scatter\w*|gather|index\w*|backward|grad|sqrt|rsqrt|mean|sum|\w*log\w*|exp|"
                      r"sigmoid|gelu|silu|relu|cat|where|tril|triu|transpose|permute|view|reshape|"
                      r"clamp|\w*norm\w*|max|min|abs|pow|square)\s*\(|"
                      r"\+|\w\s*-\s*\w|@|\bfor\b|\bif\b|\[")
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_SOFTMAX = re.compile(r"softmax\(")
MAX_CACHE = 64  # registers per thread the single-pass path may hold (floats)


def offered() -> bool:
    return family_offered("softmax")


def _softmax_dim_ok(code: str, ndim: int) -> bool:
    """Every softmax call reduces over the last dimension (dim=-1 or dim=ndim-1)."""
    calls = re.findall(r"softmax\(([^\n]*)\)", code)
    if len(calls) != 1:
        return False
    m = re.search(r"(?:dim\s*=\s*|,\s*|^\s*)(-?\d+)\b", calls[0])  # x.softmax(-1) too
    return m is not None and int(m.group(1)) in (-1, ndim - 1)


def _softcap(code: str) -> Optional[tuple[float, bool]]:
    """(c, computed_in_float) for `tanh(x / c) * c`, None when there is no tanh."""
    if "tanh" not in code:
        return None
    consts = {k: float(v) for k, v in re.findall(rf"^\s*(\w+)\s*=\s*{_NUM}\s*$", code, re.M)}
    divs = [consts.get(a, None) if a in consts else _float(a)
            for a in re.findall(r"/\s*([A-Za-z_]\w*|[0-9.eE+-]+)", code)]
    muls = [consts.get(a, None) if a in consts else _float(a)
            for a in re.findall(r"\*\s*([A-Za-z_]\w*|[0-9.eE+-]+)", code)]
    if len(divs) != 1 or len(muls) != 1 or divs[0] is None or divs[0] != muls[0] or divs[0] <= 0:
        raise FamilyError("tanh without a recognizable soft-cap tanh(x / c) * c")
    in_float = re.search(r"\.float\(\)|to\(\s*(torch\.)?float32", code.split("softmax(")[0]) is not None
    return divs[0], in_float


def _float(s: str) -> Optional[float]:
    try:
        return float(s)
    except ValueError:
        return None


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
        code = reference_code(defn)
        low = code.lower()
        if not _SOFTMAX.search(low):
            return None
        body = "\n".join(l for l in low.splitlines()
                         if not re.match(r"\s*(import|from|def|return\s*$)", l))
        if _FOREIGN.search(body.replace("softmax", "")):
            return None
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
        if not _softmax_dim_ok(low, len(shape)):
            return None
        try:
            cap = _softcap(low)
        except FamilyError:
            return None
        if cap is None and re.search(r"[*/]", body.replace("**", "")):
            return None  # a scale we do not model
        if cap is not None and low.index("tanh") > low.index("softmax("):
            return None
        c, in_float = cap if cap else (0.0, True)
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
