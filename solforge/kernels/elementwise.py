"""Elementwise activation family: GELU (tanh form), and the gated GeGLU / SwiGLU over the two
halves of the last dimension (`x.chunk(2, dim=-1)`).

Serves a reference with one floating input and one output whose trace (solforge/kernels/structure.py)
computes only that activation: gelu(approximate='tanh') or its tanh formula (0.044715), silu or
x * sigmoid(x); gated when the input is split into its two halves along the last dim, the activation
of the first half times the second (no matmul, norm or reduction).
kernels_cuda/elementwise/activation.cu holds the kernel.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, const_value, product_expr,
                   read_source, shape_dims)
from .structure import In, Ref, Traced, trace

_ALLOWED = {"mul", "add", "tanh", "gelu", "silu", "sigmoid", "split", "pow", "view", "_unsafe_view",
            "reshape", "alias", "detach", "clone", "_to_copy", "lift_fresh_copy"}
GELU_TANH_COEF = 0.044715


def _activation(g: Traced, x: str) -> Optional[tuple[str, bool]]:
    """(gelu_tanh | silu, gated) read from the trace, or None."""
    names = set(g.names())
    if names - _ALLOWED:
        return None
    (out,) = g.outputs.values()
    splits = g.find("split")
    gated = bool(splits)
    if gated:
        if len(splits) != 1:
            return None
        sp = g.ops[splits[0]]
        rank = len(g.shape_of(In(x)) or ())
        if sp.args[0] != In(x) or len(sp.args) < 3 or sp.args[2] not in (-1, rank - 1) or \
                sp.args[1] * 2 != (g.shape_of(In(x)) or (0,))[-1]:
            return None
        first, second = Ref(splits[0], 0), Ref(splits[0], 1)
        # out = act(first) * second: the second half only multiplies, at the end
        if not isinstance(out, Ref) or g.ops[out.i].name != "mul" or second not in g.ops[out.i].args or \
                g.users(second) != [out.i]:
            return None
        act = [a for a in g.ops[out.i].args if a != second]
        if len(act) != 1 or second in [r for r in act] or not isinstance(act[0], Ref):
            return None
        if g.sources(act[0]) != {x} or first not in _refs_upstream(g, act[0]):
            return None
    elif g.sources(out) != {x}:
        return None
    gelu = ("gelu" in names and all(g.ops[i].kwargs.get("approximate") == "tanh" for i in g.find("gelu"))) or \
        ("tanh" in names and "gelu" not in names and any(GELU_TANH_COEF in o.constants() for o in g.ops))
    silu = bool(names & {"silu", "sigmoid"})
    if gelu and not silu:
        return "gelu_tanh", gated
    if silu and not gelu and "tanh" not in names and "gelu" not in names and gated:
        return "silu", gated
    return None


def _refs_upstream(g: Traced, ref) -> set:
    seen, todo = set(), [ref]
    while todo:
        r = todo.pop()
        if r in seen:
            continue
        seen.add(r)
        if isinstance(r, Ref):
            todo += g.ops[r.i].refs()
    return seen


OPS = {"gelu_tanh": 0, "geglu": 1, "swiglu": 2}


class ActivationFamily(Family):
    name = "activation"
    description = "GELU (tanh), GeGLU and SwiGLU: 16-byte vector loads, several in flight per thread"
    ops = tuple(OPS)
    source_dir = "elementwise"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        if len(defn.inputs) != 1 or len(defn.outputs) != 1:
            return None
        (xn, xs), (yn, ys) = next(iter(defn.inputs.items())), next(iter(defn.outputs.items()))
        if xs.is_scalar or xs.dtype != ys.dtype or xs.dtype not in DTYPE_CODE:
            return None
        sx, sy = shape_dims(defn, xn), shape_dims(defn, yn)
        g = trace(defn)
        found = _activation(g, xn) if g is not None else None
        if found is None:
            return None
        act, gated = found
        op = ("geglu" if gated else "gelu_tanh") if act == "gelu_tanh" else "swiglu"
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
