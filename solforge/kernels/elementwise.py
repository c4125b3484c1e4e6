"""Elementwise activation family: GELU (tanh form), and the gated GeGLU / SwiGLU over the two
halves of the last dimension (`x.chunk(2, dim=-1)`).

Serves a reference with one floating input and one output that computes only that activation (no
matmul, norm or reduction). kernels_cuda/elementwise/activation.cu holds the kernel.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, const_value, product_expr,
                   read_source, reference_code, shape_dims)

_FOREIGN = re.compile(r"matmul|\blinear\(|softmax|conv|@|einsum|bmm|norm|mean\(|sum\(|rsqrt|cat\(|"
                      r"backward|grad|topk|sort|scatter|gather|index|dropout|relu\b")
_GELU_TANH = re.compile(r"gelu\([^)]*approximate\s*=\s*['\"]tanh['\"]|0\.044715")
_SILU = re.compile(r"silu\(|sigmoid\(")
_CHUNK = re.compile(r"\.chunk\(\s*2\s*,\s*dim\s*=\s*-1\s*\)|\.chunk\(\s*2\s*,\s*-1\s*\)")

OPS = {"gelu_tanh": 0, "geglu": 1, "swiglu": 2}


class ActivationFamily(Family):
    name = "activation"
    description = "GELU (tanh), GeGLU and SwiGLU: 16-byte vector loads, several in flight per thread"
    ops = tuple(OPS)
    source_dir = "elementwise"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        code = reference_code(defn)
        low = code.lower()
        if _FOREIGN.search(low) or len(defn.inputs) != 1 or len(defn.outputs) != 1:
            return None
        (xn, xs), (yn, ys) = next(iter(defn.inputs.items())), next(iter(defn.outputs.items()))
        if xs.is_scalar or xs.dtype != ys.dtype or xs.dtype not in DTYPE_CODE:
            return None
        sx, sy = shape_dims(defn, xn), shape_dims(defn, yn)
        gated = _CHUNK.search(low) is not None
        if _GELU_TANH.search(low) and not _SILU.search(low):
            op = "geglu" if gated else "gelu_tanh"
        elif _SILU.search(low) and "tanh" not in low and "gelu" not in low and gated:
            op = "swiglu"
        else:
            return None
        last_x, last_y = const_value(defn, sx[-1]) if sx else None, const_value(defn, sy[-1]) if sy else None
        if last_x is None or last_y is None or sx[:-1] != sy[:-1]:
            return None
        if gated != (last_x == 2 * last_y) or (not gated and sx != sy):
            return None
        return Spec(fixed={"DTYPE": DTYPE_CODE[xs.dtype], "OP": OPS[op], "INNER": last_y},
                    info={"x": xn, "y": yn, "n_out": product_expr(sy), "dtype": xs.dtype,
                          "last": last_y})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        esize = DTYPE_BYTES[spec.info["dtype"]]
        vecs = [v for v in (16 // esize, 8 // esize) if spec.info["last"] % v == 0] or [1]
        out = []
        for vec in vecs:
            for block in (256, 512, 128):
                for unroll in (2, 4, 1):
                    out.append({"VEC": vec, "BLOCK": block, "UNROLL": unroll})
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK", "UNROLL"} - set(params):
            raise FamilyError("activation params: VEC, BLOCK, UNROLL")
        if spec.info["last"] % params["VEC"] or params["VEC"] * DTYPE_BYTES[spec.info["dtype"]] > 16:
            raise FamilyError(f"VEC={params['VEC']} must divide the last dimension, <= 16 bytes")
        if not 32 <= params["BLOCK"] <= 1024 or params["BLOCK"] % 32 or not 1 <= params["UNROLL"] <= 8:
            raise FamilyError("BLOCK: multiple of 32 up to 1024; UNROLL 1..8")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        n = spec.info["n_out"]
        src = read_source("common", "dtype.cuh") + "\n" + read_source("elementwise", "activation.cu")
        launch = Launch(kernel="activation_kernel",
                        grid=[f"max(1, ceil_div({n}, VEC * BLOCK * UNROLL))"], block=["BLOCK"],
                        args=[spec.info["x"], spec.info["y"], f"int64:{n}"])
        return Candidate(problem=defn.name, language="cuda", sources={"activation.cu": src},
                         params={**spec.fixed, **params}, launches=[launch], notes="family=activation")
