"""Ragged GQA causal prefill attention family (FlashInfer-Bench gqa_ragged_prefill_causal_*).

Serves a problem whose reference is FlashInfer's ragged prefill: q [total_q, H_qo, D], k/v
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

import re
from typing import Optional

from ..candidate import Candidate
from ..problem.definition import Definition
from .attention_prefill import AttentionPrefillFamily
from .base import FamilyError, Spec, const_value, reference_code, shape_dims
from .base import definition_of
from .gate import family_offered, family_offered_for

_INPUTS = ("q", "k", "v", "qo_indptr", "kv_indptr", "sm_scale")
_OUTPUTS = ("output", "lse")
_REF_PATTERNS = (
    r"delta\s*=\s*num_kv_tokens\s*-\s*num_q_tokens",
    r"causal_mask\s*=\s*kv_positions\[\s*None\s*,\s*:\s*\]\s*<\s*\(\s*q_positions\[\s*:\s*,\s*None\s*\]\s*\+\s*1\s*\+\s*delta\s*\)",
    r"logsumexp\(\s*logits\s*,\s*dim\s*=\s*-1\s*\)\s*/\s*math\.log\(\s*2\.0\s*\)",
    r"repeat_interleave\(\s*gqa_ratio\s*,\s*dim\s*=\s*1\s*\)",
    r"k_f32\[\s*kv_start\s*:\s*kv_end\s*\]",
    r"\*\s*sm_scale",
    r"torch\.softmax\(\s*logits\s*,\s*dim\s*=\s*-1\s*\)",
)


class AttentionRaggedFamily(AttentionPrefillFamily):
    name = "attention_ragged"
    description = ("ragged GQA causal prefill attention: attention_prefill's FlashAttention-2 kernel "
                   "(mma.sync bf16, cp.async K/V tiles, online softmax, base-2 lse) with RAGGED=1 "
                   "(contiguous kv rows per request instead of a page gather)")
    ops = ("gqa_ragged_prefill_causal",)
    source_dir = "attention_ragged"   # family.json (the gate); the source is attention_prefill's

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def offered_for(self, problem) -> bool:
        # problem by problem: family.json "offered" and the problem in "offered_problems" (filed by
        # scripts/import_kernel_check.py --attn-new when every variant was correct on every workload)
        return self.offered and family_offered_for(self.source_dir, definition_of(problem).name)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        if set(defn.inputs) != set(_INPUTS) or set(defn.outputs) != set(_OUTPUTS):
            return None
        code = reference_code(defn)
        if not all(re.search(p, code) for p in _REF_PATTERNS):
            return None
        if not defn.inputs["sm_scale"].is_scalar:
            return None
        for n in ("q", "k", "v"):
            if defn.inputs[n].dtype != "bfloat16":
                return None
        if defn.outputs["output"].dtype != "bfloat16" or defn.outputs["lse"].dtype != "float32":
            return None
        for n in ("qo_indptr", "kv_indptr"):
            if defn.inputs[n].dtype != "int32":
                return None
        qs, ks, vs = (shape_dims(defn, n) for n in ("q", "k", "v"))
        os_, ls = shape_dims(defn, "output"), shape_dims(defn, "lse")
        if len(qs) != 3 or len(ks) != 3 or ks != vs or os_ != qs or ls != qs[:2]:
            return None
        h_qo, d = const_value(defn, qs[1]), const_value(defn, qs[2])
        h_kv, dk = const_value(defn, ks[1]), const_value(defn, ks[2])
        if None in (h_qo, d, h_kv, dk) or d != 128 or dk != d or h_kv <= 0 or h_qo % h_kv:
            return None
        if shape_dims(defn, "qo_indptr") != shape_dims(defn, "kv_indptr"):
            return None
        return Spec(fixed={"NUM_QO_HEADS": h_qo, "NUM_KV_HEADS": h_kv, "HEAD_DIM": d, "RAGGED": 1},
                    info={"total_q": str(qs[0]), "len_indptr": str(shape_dims(defn, "qo_indptr")[0]),
                          "num_kv_indices": str(ks[0])})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # attention_prefill's GPU-checked points (not checked on 016/017 yet: "offered": false)
        return super()._space(defn, spec, workloads)

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if params.get("ZFUSE", 0):
            raise FamilyError("attention_ragged: ZFUSE=1 is not offered")
        super()._check_params(defn, spec, params)

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        cand = super()._build(defn, spec, params)
        swap = {"k_cache": "k", "v_cache": "v", "kv_indices": "kv_indptr"}   # kv_indices: unread
        launches = [ln.model_copy(update={"args": [swap.get(a, a) for a in ln.args]}) for ln in cand.launches]
        return cand.model_copy(update={"launches": launches,
                                       "notes": f"family=attention_ragged {params}"})
