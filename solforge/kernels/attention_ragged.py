"""Ragged GQA causal prefill attention family (contiguous kv rows per request).

Serves a problem whose reference computes a ragged causal prefill: q [total_q, H_qo, D], k/v
[total_kv, H_kv, D] with request b's kv in rows [kv_indptr[b], kv_indptr[b+1]), qo_indptr, a scalar
sm_scale; outputs `output` (bf16) and `lse` (fp32, base 2); causal mask aligned to the end of the kv
sequence. The kernel is attention_prefill's (kernels_cuda/attention_prefill/attention_prefill.cu)
compiled with RAGGED=1: the K/V row of kv token n is kv_start + n instead of kv_indices[kv_start + n]
(page size 1 makes the two layouts the same but for that gather), so the launch plan, scheduler and
param space are attention_prefill's; kv_indptr is passed in the unused kv_indices slot.

One difference from the reference, outside what the evaluator generates: a request with q_len >
kv_len has rows that see no kv; the reference's softmax gives NaN there, the kernel 0 (lse -inf in
both). The evaluator's synthesized indptrs keep q_len <= kv_len (solforge/evaluate/inputs.py).
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate
from ..problem.definition import Definition
from .attention_common import RAGGED_PREFILL, match_gqa
from .attention_prefill import AttentionPrefillFamily
from .base import FamilyError, Spec, shape_dims
from .gate import OfferedByFamilyJson

class AttentionRaggedFamily(OfferedByFamilyJson, AttentionPrefillFamily):
    name = "attention_ragged"
    description = ("ragged GQA causal prefill attention: attention_prefill's FlashAttention-2 kernel "
                   "(mma.sync bf16, cp.async K/V tiles, online softmax, base-2 lse) with RAGGED=1 "
                   "(contiguous kv rows per request instead of a page gather)")
    ops = ("gqa_ragged_prefill_causal",)
    # family.json (the family-wide GPU gate); the source is attention_prefill's
    source_dir = "attention_ragged"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        m = match_gqa(defn, RAGGED_PREFILL)
        if m is None:
            return None
        # kv_indptr goes in the (unread with RAGGED=1) kv_indices slot of the prefill kernel
        names = {**m.names, "kv_indices": m.names["kv_indptr"]}
        return Spec(fixed={"NUM_QO_HEADS": m.h_qo, "NUM_KV_HEADS": m.h_kv, "HEAD_DIM": m.head_dim, "RAGGED": 1},
                    info={"total_q": str(m.q[0]), "len_indptr": str(shape_dims(defn, names["qo_indptr"])[0]),
                          "num_kv_indices": str(m.k[0]), "names": names})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # attention_prefill's GPU-checked points (not checked on 016/017 yet: "offered": false)
        return super()._space(defn, spec, workloads)

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if params.get("ZFUSE", 0):
            raise FamilyError("attention_ragged: ZFUSE=1 is not offered")
        super()._check_params(defn, spec, params)

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        cand = super()._build(defn, spec, params)
        return cand.model_copy(update={"notes": f"family=attention_ragged {params}"})
