"""Analytic counts for references that loop per sequence, per query token and per head.

FlashInfer-Bench's paged / ragged attention references (gqa_paged_decode, gqa_paged_prefill_causal,
gqa_ragged_prefill_causal, mla_paged_decode, mla_paged_prefill_causal) run a Python loop over every
(sequence, query token, head): up to 16384 x 32 iterations of ~10 aten ops, far too many to trace in
the time budget. Their work has a closed form, which is what the trace would add up to:

- sequences: the same synthetic batch the tracer would build (inputs.synth_safetensor): len_indptr - 1
  sequences splitting total_q (prefill) and the KV tokens (num_kv_indices, or total_kv) evenly;
- attended (query, key) pairs per sequence: q_len * kv_len for decode and non-causal; causal with the
  queries aligned to the end of the KV (FlashInfer's convention): sum_i min(i + 1 + kv_len - q_len, kv_len);
- FLOPs: 2 * H_qo * (D_qk + D_v) * pairs on the tensor cores of the q dtype (QK^T and PV), plus
  5 SIMT FLOPs per score (scale, max, exp, sum, divide);
- bytes: q, output, lse in full; K/V caches only for the pages the indices name (each page once).
"""

from __future__ import annotations

import math
import re
from typing import Optional

from ..problem.dtypes import itemsize
from ..problem.workload import ResolvedWorkload
from .estimate import CountStatus, WorkloadCount
from .flops import SIMT, tc_unit
from .inputs import _even_indptr
from .trace import nbytes

FAMILY = re.compile(r"(?:^|_)(gqa|mla)_(paged|ragged)_(decode|prefill)(_causal)?(?:_|$)")


def family(name: str) -> Optional[tuple[str, str, str, bool]]:
    m = FAMILY.search(name)
    if not m:
        return None
    return m.group(1), m.group(2), m.group(3), bool(m.group(4))


def _segments(n_seq: int, total: int) -> list[int]:
    ptr = _even_indptr(n_seq, total).tolist()
    return [b - a for a, b in zip(ptr[:-1], ptr[1:])]


def attention_pairs(q_lens: list[int], kv_lens: list[int], causal: bool) -> int:
    total = 0
    for q, kv in zip(q_lens, kv_lens):
        if q <= 0 or kv <= 0:
            continue
        if not causal:
            total += q * kv
            continue
        delta = kv - q
        # sum over i in [0, q) of clamp(i + 1 + delta, 0, kv)
        for i in range(q):  # q <= total_q; a plain loop is fast enough (16k iterations at most)
            total += max(0, min(i + 1 + delta, kv))
    return total


def count_attention(wl: ResolvedWorkload, index: int) -> Optional[WorkloadCount]:
    """The count for a FlashInfer paged/ragged attention workload, or None if it is not one."""
    defn = wl.definition
    fam = family(defn.name)
    if fam is None:
        return None
    kind, layout, phase, causal = fam
    ax = wl.axes
    n_seq = int(ax.get("len_indptr", ax.get("batch_size", 1) + 1)) - 1
    if layout == "paged":
        kv_total = int(ax["num_kv_indices"])
    else:
        kv_total = int(ax["total_kv"])
    kv_lens = _segments(n_seq, kv_total)
    if phase == "decode":
        q_lens = [1] * n_seq
    else:
        q_lens = _segments(n_seq, int(ax["total_q"]))
    pairs = attention_pairs(q_lens, kv_lens, causal)
    h = int(ax["num_qo_heads"])
    if kind == "mla":
        d_qk = int(ax["head_dim_ckv"]) + int(ax["head_dim_kpe"])
        d_v = int(ax["head_dim_ckv"])
        q_dtype = defn.inputs["q_nope"].dtype
        caches = ("ckv_cache", "kpe_cache")
    else:
        d_qk = d_v = int(ax["head_dim"])
        q_dtype = defn.inputs["q"].dtype
        caches = ("k_cache", "v_cache") if layout == "paged" else ("k", "v")
    from ..problem.dtypes import to_torch

    flops = {tc_unit(to_torch(q_dtype)): 2.0 * h * (d_qk + d_v) * pairs, SIMT: 5.0 * h * pairs}
    in_bytes = 0.0
    declared = 0.0
    for k, spec in defn.inputs.items():
        if spec.is_scalar:
            continue
        full = nbytes(wl.input_shapes[k], itemsize(spec.dtype))
        declared += full
        if k in caches and layout == "paged":
            shape = wl.input_shapes[k]
            per_page = full / max(1, shape[0])
            in_bytes += per_page * min(shape[0], kv_total)
        else:
            in_bytes += full
    out_bytes = sum(nbytes(wl.output_shapes[k], itemsize(s.dtype)) for k, s in defn.outputs.items()
                    if not s.is_scalar)
    return WorkloadCount(wl.uuid, index, CountStatus.OK, flops, in_bytes, out_bytes, declared,
                         ops=0, seconds=0.0, reason=f"analytic: {kind} {layout} {phase}"
                                                    f"{' causal' if causal else ''}")


def analytic_count(wl: ResolvedWorkload, index: int) -> Optional[WorkloadCount]:
    return count_attention(wl, index)


__all__ = ["analytic_count", "attention_pairs", "family", "math"]
