"""What the GQA attention families (attention_decode, attention_prefill, attention_ragged) share:
the matcher's checks of the definition's tensors, and their kernel source with the warp-level
helpers (kernels_cuda/common/attention_mma.cuh) in front."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Union

from ..problem.definition import Definition
from .base import const_value, read_source, reference_code, shape_dims


class GqaShapes(NamedTuple):
    q: list[Union[str, int]]      # q's dims: [tokens, H_qo, D]
    k: list[Union[str, int]]      # k's (= v's) dims: [tokens, H_kv, D] or [pages, 1, H_kv, D]
    h_qo: int
    h_kv: int
    head_dim: int


def match_gqa(defn: Definition, qkv: tuple[str, str, str], indices: tuple[str, ...],
              ref_patterns: tuple[str, ...], kv_rank: int) -> Optional[GqaShapes]:
    """The checks every GQA attention matcher makes, or None where one fails: the inputs are exactly
    q, k, v (named `qkv`, bf16), the int32 `indices` and a scalar sm_scale; the outputs `output`
    (bf16, q's shape) and `lse` (fp32, q's first two dims); every reference pattern is in the
    reference's code; q is [tokens, H_qo, D] and k, v alike [tokens, H_kv, D] (kv_rank 3) or
    [pages, 1, H_kv, D] (kv_rank 4, page size 1) with constant heads, D = 128 and H_kv dividing H_qo."""
    if set(defn.inputs) != {*qkv, *indices, "sm_scale"} or set(defn.outputs) != {"output", "lse"}:
        return None
    code = reference_code(defn)
    if not all(re.search(p, code) for p in ref_patterns):
        return None
    if not defn.inputs["sm_scale"].is_scalar:
        return None
    if any(defn.inputs[n].dtype != "bfloat16" for n in qkv) or defn.outputs["output"].dtype != "bfloat16":
        return None
    if defn.outputs["lse"].dtype != "float32" or any(defn.inputs[n].dtype != "int32" for n in indices):
        return None
    qs, ks, vs = (shape_dims(defn, n) for n in qkv)
    os_, ls = shape_dims(defn, "output"), shape_dims(defn, "lse")
    if len(qs) != 3 or len(ks) != kv_rank or ks != vs or os_ != qs or ls != qs[:2]:
        return None
    h_qo, d = const_value(defn, qs[1]), const_value(defn, qs[2])
    h_kv, dk = const_value(defn, ks[-2]), const_value(defn, ks[-1])
    page = const_value(defn, ks[1]) if kv_rank == 4 else 1
    if None in (h_qo, d, page, h_kv, dk) or page != 1 or d != 128 or dk != d or h_kv <= 0 or h_qo % h_kv:
        return None
    return GqaShapes(qs, ks, h_qo, h_kv, d)


def kernel_source(family_dir: str, filename: str) -> str:
    """kernels_cuda/<family_dir>/<filename> with common/attention_mma.cuh (swz, cp.async, ldmatrix,
    mma.sync, ex2, pack_bf16) prepended: the one source unit of the candidate."""
    return read_source("common", "attention_mma.cuh") + "\n" + read_source(family_dir, filename)
