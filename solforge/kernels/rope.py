"""RoPE family: rotate-half rotary embedding applied to Q/K tensors, optionally appended to a cache.

Serves a reference whose trace (solforge/kernels/structure.py) only computes, per output,
`x * cos + rotate_half(x) * sin` (rotate_half = `cat((-x2, x1), dim=-1)` over the two halves of the
last dimension), optionally appended to a cache along the sequence (`cat([cache, rotated], dim=2)`),
or `cat([cache, x], dim=2)` (a KV-cache update). The tables are the two inputs that multiply x and
its rotation (cos and sin by that role, not by name), either [seq, D] (shared by the batch) or
[batch, 1, seq, D]. Everything in one float dtype (no casts: the reference's per-op rounding); the
head dim is a constant. kernels_cuda/rope/rope.cu holds the kernels (one launch per output).
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, const_value, product_expr,
                   read_source, shape_dims)
from .structure import In, Ref, Traced, trace

class RopeFamily(Family):
    name = "rope"
    description = ("rotate-half RoPE (x*cos + rotate_half(x)*sin) on Q/K rows, optionally appended "
                   "to a KV cache along the sequence; each thread rotates VEC pairs, one read of "
                   "x/cos/sin, the reference's per-op rounding")
    ops = ("rope_rotate_half", "kv_cache_append_rope")
    source_dir = "rope"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        dtypes = {s.dtype for s in defn.inputs.values()} | {s.dtype for s in defn.outputs.values()}
        if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPE_CODE:
            return None
        dtype = next(iter(dtypes))
        if any(s.is_scalar for s in defn.inputs.values()):
            return None
        g = trace(defn)
        if g is None or set(g.names()) - _ALLOWED or "cat" not in g.names():
            return None
        launches, tables = [], set()
        for out, ref in g.outputs.items():
            if not isinstance(ref, Ref):
                return None
            op = g.ops[ref.i]
            if op.name == "cat" and len(op.args[0]) == 2 and _dim(op) in (2, -2):
                cache, y = (_base(g, a) for a in op.args[0])
                if not isinstance(cache, In):
                    return None
                if isinstance(y, In):
                    launches.append(("cat", y.name, cache.name, out))
                    continue
                rope = _rope_of(g, y)
                cache = cache.name
            else:
                rope, cache = _rope_of(g, ref), None
            if rope is None:
                return None
            x, cos, sin = rope
            tables.add((cos, sin))
            launches.append(("rope", x, cache, out))
        if len(tables) != 1:
            return None
        cos, sin = tables.pop()
        cshape = shape_dims(defn, cos)
        if cos == sin or shape_dims(defn, sin) != cshape or len(cshape) not in (2, 4):
            return None
        head_dim = const_value(defn, cshape[-1])
        if head_dim is None or head_dim % 2:
            return None
        per_batch = None
        for kind, x, cache, out in launches:
            xs, os_ = shape_dims(defn, x), shape_dims(defn, out)
            if len(xs) != 4 or xs[-1] != cshape[-1] or len(os_) != 4:
                return None
            if cache is None and xs != os_:
                return None
            if cache is not None:
                cs = shape_dims(defn, cache)
                if len(cs) != 4 or cs[:2] != xs[:2] or os_[:2] != xs[:2] or cs[3] != xs[3] or os_[3] != xs[3]:
                    return None
            if kind != "rope":
                continue
            # cos/sin: [seq, D] shared by the batch, or [batch, 1, seq, D]
            if len(cshape) == 2:
                pb = 0 if cshape[0] == xs[2] else None
            else:
                pb = 1 if (cshape[0] == xs[0] and str(cshape[1]) == "1" and cshape[2] == xs[2]) else None
            if pb is None or (per_batch is not None and pb != per_batch):
                return None
            per_batch = pb
        if per_batch is None:
            return None
        return Spec(fixed={"DTYPE": DTYPE_CODE[dtype], "HEAD_DIM": head_dim,
                           "COS_PER_BATCH": per_batch or 0},
                    info={"launches": launches, "cos": cos, "sin": sin, "dtype": dtype})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        half = spec.fixed["HEAD_DIM"] // 2
        esize = DTYPE_BYTES[spec.info["dtype"]]
        out = []
        for vec in (16 // esize, 8 // esize, 4 // esize):
            if vec < 1 or half % vec:
                continue
            for block in (256, 128, 512):
                if block % (half // vec) == 0:
                    out.append({"VEC": vec, "BLOCK": block})
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK"} - set(params):
            raise FamilyError("rope params: VEC, BLOCK")
        half = spec.fixed["HEAD_DIM"] // 2
        v, b = params["VEC"], params["BLOCK"]
        if v < 1 or half % v or v * DTYPE_BYTES[spec.info["dtype"]] > 16:
            raise FamilyError(f"VEC={v} must divide HEAD_DIM/2 = {half}, at most 16 bytes")
        if not 32 <= b <= 1024 or b % 32 or b % (half // v):
            raise FamilyError(f"BLOCK={b}: multiple of 32 and of the threads per row ({half // v})")
        if params.get("FUSE", 1) not in (0, 1, True, False):  # absent: 1
            raise FamilyError(f"FUSE={params['FUSE']!r} must be 0 or 1")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        src = read_source("common", "dtype.cuh") + "\n" + read_source("rope", "rope.cu")
        launches, fixed = [], dict(spec.fixed)
        parts = spec.info["launches"]
        if len(parts) == 2 and params.get("FUSE", 1):
            # both outputs in one launch (rope2_kernel): no wait between two chained kernels
            args, blocks = [spec.info["cos"], spec.info["sin"]], []
            for i, (kind, x, cache, out) in enumerate(parts):
                os_ = shape_dims(defn, out)
                rows = product_expr(os_[:-1])
                fixed[f"KIND{i}"] = 0 if kind == "rope" else 1
                args += [x, cache or x, out, f"int64:{rows}", f"int32:{os_[2]}",
                         f"int32:{shape_dims(defn, cache)[2] if cache else 0}",
                         f"int32:{shape_dims(defn, x)[1]}"]
                blocks.append(f"max(1, ceil_div(({rows}) * (HEAD_DIM // 2 // VEC), BLOCK))")
            launches.append(Launch(kernel="rope2_kernel", grid=[f"{blocks[0]} + {blocks[1]}"],
                                   block=["BLOCK"], args=args + [f"int32:{blocks[0]}"]))
        for kind, x, cache, out in (parts if not launches else []):
            os_ = shape_dims(defn, out)
            rows = product_expr(os_[:-1])
            s_tot = str(os_[2])
            s_cur = str(shape_dims(defn, cache)[2]) if cache else "0"
            grid = [f"max(1, ceil_div(({rows}) * (HEAD_DIM // 2 // VEC), BLOCK))"]
            if kind == "rope":
                args = [x, spec.info["cos"], spec.info["sin"], cache or x, out, f"int64:{rows}",
                        f"int32:{s_tot}", f"int32:{s_cur}", f"int32:{shape_dims(defn, x)[1]}"]
                launches.append(Launch(kernel="rope_kernel", grid=grid, block=["BLOCK"], args=args))
            else:
                args = [x, cache, out, f"int64:{rows}", f"int32:{s_tot}", f"int32:{s_cur}"]
                launches.append(Launch(kernel="cat_kernel", grid=grid, block=["BLOCK"], args=args))
        return Candidate(problem=defn.name, language="cuda", sources={"rope.cu": src},
                         params={**fixed, **params}, launches=launches, options=["--fmad=false"],
                         notes=f"family=rope {params}")


_ALLOWED = {"slice", "neg", "cat", "mul", "add", "unsqueeze", "view", "_unsafe_view", "reshape", "expand",
            "alias", "clone", "detach", "lift_fresh_copy"}
_PASS = {"unsqueeze", "view", "_unsafe_view", "reshape", "expand", "alias", "clone", "detach", "lift_fresh_copy"}
_END = 2 ** 62   # a slice to the end ends at INT64_MAX in the trace


def _base(g: Traced, ref):
    """The tensor a chain of views / broadcasts / copies starts from."""
    while isinstance(ref, Ref) and g.ops[ref.i].name in _PASS:
        ref = g.ops[ref.i].args[0]
    return ref


def _dim(op) -> Optional[int]:
    d = op.args[1] if len(op.args) > 1 else op.kwargs.get("dim", 0)
    return d if isinstance(d, int) else None


def _half(g: Traced, ref, x: In, first: bool) -> bool:
    """Is `ref` the first (or second) half of x's last dim?"""
    ref = _base(g, ref)
    if not isinstance(ref, Ref) or g.ops[ref.i].name != "slice":
        return False
    op = g.ops[ref.i]
    shape = g.shape_of(x) or ()
    if len(op.args) < 4 or _base(g, op.args[0]) != x or op.args[1] not in (-1, len(shape) - 1):
        return False
    half = shape[-1] // 2
    lo, hi = op.args[2], op.args[3]
    return (lo, hi) == (0, half) if first else (lo == half and hi >= shape[-1])


def _rope_of(g: Traced, ref) -> Optional[tuple[str, str, str]]:
    """(x, cos, sin) when `ref` is x * cos + cat(-x2, x1) * sin (either order of every operand)."""
    ref = _base(g, ref)
    if not isinstance(ref, Ref) or g.ops[ref.i].name != "add" or len(g.ops[ref.i].args) != 2:
        return None
    muls = [_base(g, a) for a in g.ops[ref.i].args]
    if not all(isinstance(m, Ref) and g.ops[m.i].name == "mul" and len(g.ops[m.i].args) == 2 for m in muls):
        return None
    direct, rotated = [], None
    for m in muls:
        a, b = (_base(g, x) for x in g.ops[m.i].args)
        if isinstance(a, In) and isinstance(b, In):
            direct = [(a, b), (b, a)]           # x * cos: which is x shows in the rotation
        for t, c in ((a, b), (b, a)):
            if isinstance(t, Ref) and g.ops[t.i].name == "cat" and isinstance(c, In):
                rotated = (t, c)
    if not direct or rotated is None:
        return None
    rot, sin = rotated
    cat = g.ops[rot.i]
    parts = cat.args[0]
    for x, cos in direct:
        if len(parts) != 2 or _dim(cat) not in (-1, len(g.shape_of(x) or ()) - 1):
            continue
        neg = _base(g, parts[0])
        if isinstance(neg, Ref) and g.ops[neg.i].name == "neg" and _half(g, g.ops[neg.i].args[0], x, False) \
                and _half(g, parts[1], x, True):
            return x.name, cos.name, sin.name
    return None
