"""RoPE family: rotate-half rotary embedding applied to Q/K tensors, optionally appended to a cache.

Serves a reference that only computes `x * cos + rotate_half(x) * sin` (rotate_half =
`cat((-x2, x1), dim=-1)` over the two halves of the last dimension) for one or more tensors, and
optionally `torch.cat([cache, rotated], dim=2)` / `torch.cat([cache, x], dim=2)` (a KV-cache
update). cos/sin are inputs named cos and sin, either [seq, D] (shared by the batch) or
[batch, 1, seq, D]. Everything in one float dtype; the head dim is a constant.

The reference's names are read from its code: which tensor is rotated (`NAME = x * cos + ...`),
which output is which cat (`NAME = torch.cat([cache, y], dim=2)`), and the order of `return`.
kernels_cuda/rope/rope.cu holds the kernels (one launch per output).
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import (DTYPE_BYTES, DTYPE_CODE, Family, FamilyError, Spec, const_value, product_expr,
                   read_source, reference_code, shape_dims)

_FOREIGN = re.compile(r"\b(?:matmul|linear|einsum|bmm|conv\w*|softmax|\w*norm\w*|mean|sum|exp|"
                      r"sigmoid|tanh|gelu|silu|relu|sqrt|rsqrt|topk|sort|gather|scatter\w*|"
                      r"index\w*|where|masked_fill|arange|sin|cos|pow|\w*attention\w*|repeat\w*|"
                      r"transpose|permute|view|reshape|clone|to|float|half|bfloat16)\s*\(|@|\bfor\b")
_ROT_HALF = re.compile(r"cat\(\s*[\(\[]\s*-\s*(\w+)\s*,\s*(\w+)\s*[\)\]]\s*,\s*(?:dim\s*=\s*)?-1\s*\)")
_ROPE_LINE = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(\w+)\s*\*\s*cos\b.*\*\s*sin\b", re.M)
_CAT_LINE = re.compile(r"^\s*(\w+)\s*=\s*torch\.cat\(\s*[\[\(]\s*(\w+)\s*,\s*(\w+)\s*[\]\)]\s*,\s*"
                       r"(?:dim\s*=\s*)?(-?\d+)\s*\)\s*$", re.M)
_RETURN = re.compile(r"^\s*return\s+\(?\s*([\w\s,]+?)\s*\)?\s*$", re.M)


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
        code = reference_code(defn)
        body = "\n".join(l for l in code.splitlines() if not re.match(r"\s*(import|from|def)\b", l))
        if _FOREIGN.search(body.replace(".unsqueeze(", ".")) or not _ROT_HALF.search(body):
            return None
        cos = [k for k in defn.inputs if k.lower() == "cos"]
        sin = [k for k in defn.inputs if k.lower() == "sin"]
        if len(cos) != 1 or len(sin) != 1:
            return None
        dtypes = {s.dtype for s in defn.inputs.values()} | {s.dtype for s in defn.outputs.values()}
        if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPE_CODE:
            return None
        dtype = next(iter(dtypes))
        if any(s.is_scalar for s in defn.inputs.values()):
            return None
        cshape = shape_dims(defn, cos[0])
        if shape_dims(defn, sin[0]) != cshape or len(cshape) not in (2, 4):
            return None
        head_dim = const_value(defn, cshape[-1])
        if head_dim is None or head_dim % 2:
            return None
        rotated = {m.group(1): m.group(2) for m in _ROPE_LINE.finditer(body)}
        cats = {m.group(1): (m.group(2), m.group(3), int(m.group(4))) for m in _CAT_LINE.finditer(body)}
        ret = _RETURN.findall(body)
        if not rotated or len(ret) != 1:
            return None
        names = [n.strip() for n in ret[0].split(",") if n.strip()]
        if len(names) != len(defn.outputs):
            return None
        launches = []
        per_batch = None
        for out, name in zip(defn.outputs, names):
            oshape = shape_dims(defn, out)
            if name in rotated:
                x, cache = rotated[name], None
            elif name in cats:
                cache, y, dim = cats[name]
                if dim not in (2, -2) or cache not in defn.inputs:
                    return None
                x = rotated.get(y, y)
                if y not in rotated and y not in defn.inputs:
                    return None
                if y not in rotated:
                    launches.append(("cat", x, cache, out))
                    continue
            else:
                return None
            if x not in defn.inputs or x in cos + sin:
                return None
            xshape = shape_dims(defn, x)
            if len(xshape) != 4 or xshape[-1] != cshape[-1]:
                return None
            if cache is None and xshape != oshape:
                return None
            # cos/sin: [seq, D] shared, or [batch, 1, seq, D]
            if len(cshape) == 2:
                pb = 0 if cshape[0] == xshape[2] else None
            else:
                pb = 1 if (cshape[0] == xshape[0] and str(cshape[1]) == "1"
                           and cshape[2] == xshape[2]) else None
            if pb is None or (per_batch is not None and pb != per_batch):
                return None
            per_batch = pb
            launches.append(("rope", x, cache, out))
        for kind, x, cache, out in launches:
            xs, os_ = shape_dims(defn, x), shape_dims(defn, out)
            if cache is not None:
                cs = shape_dims(defn, cache)
                if len(cs) != 4 or cs[:2] != xs[:2] or os_[:2] != xs[:2] or cs[3] != xs[3] or os_[3] != xs[3]:
                    return None
        return Spec(fixed={"DTYPE": DTYPE_CODE[dtype], "HEAD_DIM": head_dim,
                           "COS_PER_BATCH": per_batch or 0},
                    info={"launches": launches, "cos": cos[0], "sin": sin[0], "dtype": dtype})

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
