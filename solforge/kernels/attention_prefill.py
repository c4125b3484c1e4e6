"""Paged GQA causal prefill attention family (page size 1).

Serves a problem whose reference computes a paged causal prefill with page size 1: q [total_q, H_qo, D],
k_cache/v_cache [num_pages, 1, H_kv, D], qo_indptr/kv_indptr (batch + 1), kv_indices, a scalar
sm_scale; outputs `output` [total_q, H_qo, D] (bf16) and `lse` [total_q, H_qo] (fp32, base 2);
causal mask aligned to the end of the kv sequence (delta = kv_len - q_len), rows that see no kv
give 0 / -inf. The matcher (attention_common.match_gqa) reads these facts from the definition's
dtypes and shapes and from what the reference computes on small requests, never from names.

Two launches (kernels_cuda/attention_prefill/attention_prefill.cu): gqa_prefill_zero_rows writes
0 / -inf for the tokens that see no kv (one warp per token); gqa_paged_prefill_causal tiles the
others, grid.x = tiles of BLOCK_M rows (BLOCK_M / GROUP tokens x GROUP q heads) over all requests,
found on the device from the indptrs without a workspace (see the .cu header), grid.y = kv heads. Tunables: BLOCK_M (rows per CTA,
16 per warp), BLOCK_N (kv tokens per step), STAGES (cp.async ring depth).
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .attention_common import PAGED_PREFILL, kernel_source, match_gqa
from .base import Family, FamilyError, Spec, shape_dims
from .gate import family_offered

SMEM_LIMIT = 227 * 1024  # sm_90 opt-in dynamic shared memory per block
# valid (compile-checked) but not yet GPU-checked: staged by the next GPU check (README.md)
UNCHECKED = [{"BLOCK_M": 128, "BLOCK_N": 64, "STAGES": 2}, {"BLOCK_M": 64, "BLOCK_N": 64, "STAGES": 3},
             {"BLOCK_M": 64, "BLOCK_N": 32, "STAGES": 3, "ZFUSE": 1},
             {"BLOCK_M": 128, "BLOCK_N": 64, "STAGES": 3, "ZFUSE": 1}]
ZTOK = 64  # tokens per zero-row CTA with ZFUSE=1 (#define ZTOK in the .cu)


def smem_bytes(block_m: int, block_n: int, stages: int, head_dim: int = 128) -> int:
    return (block_m + 2 * stages * block_n) * head_dim * 2


class AttentionPrefillFamily(Family):
    name = "attention_prefill"
    description = ("paged (page size 1) GQA causal prefill attention: FlashAttention-2 with "
                   "mma.sync bf16, cp.async gathered K/V tiles, online softmax, base-2 lse; one CTA "
                   "per (q tile, kv head) covering the kv head's GROUP q heads")
    ops = ("gqa_paged_prefill_causal",)
    source_dir = "attention_prefill"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        m = match_gqa(defn, PAGED_PREFILL)
        if m is None:
            return None
        return Spec(fixed={"NUM_QO_HEADS": m.h_qo, "NUM_KV_HEADS": m.h_kv, "HEAD_DIM": m.head_dim},
                    info={"total_q": str(m.q[0]), "len_indptr": str(shape_dims(defn, m.names["qo_indptr"])[0]),
                          "num_kv_indices": str(shape_dims(defn, m.names["kv_indices"])[0]), "names": m.names})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # The points the H200 check found correct on every workload of 014 and 015 (data/results/
        # attention_prefill_h200_rows.jsonl); v1 (64, 32, 3) was the fastest on both. UNCHECKED
        # points join the search only after their own GPU check (README.md: next GPU check).
        space = [{"BLOCK_M": 64, "BLOCK_N": 32, "STAGES": 3},
                 {"BLOCK_M": 64, "BLOCK_N": 64, "STAGES": 2},
                 {"BLOCK_M": 128, "BLOCK_N": 32, "STAGES": 3},
                 {"BLOCK_M": 128, "BLOCK_N": 64, "STAGES": 3}]
        group = spec.fixed["NUM_QO_HEADS"] // spec.fixed["NUM_KV_HEADS"]
        return [p for p in space if p["BLOCK_M"] % group == 0]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if not {"BLOCK_M", "BLOCK_N", "STAGES"} <= set(params) <= {"BLOCK_M", "BLOCK_N", "STAGES", "ZFUSE"}:
            raise FamilyError("attention_prefill params: BLOCK_M, BLOCK_N, STAGES (and optionally ZFUSE)")
        if params.get("ZFUSE", 0) not in (0, 1):
            raise FamilyError(f"ZFUSE={params['ZFUSE']}: 0 (two launches) or 1 (one)")
        bm, bn, st = params["BLOCK_M"], params["BLOCK_N"], params["STAGES"]
        group = spec.fixed["NUM_QO_HEADS"] // spec.fixed["NUM_KV_HEADS"]
        if bm not in (16, 32, 64, 128) or bm % group:
            raise FamilyError(f"BLOCK_M={bm}: 16..128 rows (16 per warp), a multiple of GROUP={group}")
        if bn not in (16, 32, 64, 128):
            raise FamilyError(f"BLOCK_N={bn}: one of 16, 32, 64, 128")
        if not 2 <= st <= 4:
            raise FamilyError(f"STAGES={st}: 2..4")
        if smem_bytes(bm, bn, st, spec.fixed["HEAD_DIM"]) > SMEM_LIMIT:
            raise FamilyError(f"{params}: {smem_bytes(bm, bn, st)} B of shared memory > {SMEM_LIMIT}")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        src = kernel_source("attention_prefill", "attention_prefill.cu")
        tq, li, nkv = spec.info["total_q"], spec.info["len_indptr"], spec.info["num_kv_indices"]
        n = spec.info["names"]
        zero = Launch(kernel="gqa_prefill_zero_rows", grid=[f"max(1, ceil_div({tq}, 8))"], block=["256"],
                      args=[n["qo_indptr"], n["kv_indptr"], n["out"], n["lse"], f"int32:{li} - 1", f"int32:{tq}"])
        n_attn = f"max(1, min({tq}, {nkv}) * (NUM_QO_HEADS // NUM_KV_HEADS) // BLOCK_M + {li} - 1)"
        args = [n["q"], n["k"], n["v"], n["qo_indptr"], n["kv_indptr"], n["kv_indices"], n["out"], n["lse"],
                f"int32:{li} - 1", f"float32:{n['scale']}"]
        fused = bool(params.get("ZFUSE", 0))
        if fused:  # zero-row CTAs after the attention tiles, ZTOK tokens each (see the .cu header)
            grid = [f"{n_attn} + ceil_div({tq}, {ZTOK})", "NUM_KV_HEADS"]
            args += [f"int32:{tq}", f"int32:{n_attn}"]
        else:
            grid = [n_attn, "NUM_KV_HEADS"]
        launch = Launch(kernel="gqa_paged_prefill_causal", grid=grid, block=["BLOCK_M // 16 * 32"],
                        smem="(BLOCK_M + 2 * STAGES * BLOCK_N) * HEAD_DIM * 2", args=args)
        return Candidate(problem=defn.name, language="cuda", sources={"attention_prefill.cu": src},
                         params={**spec.fixed, **params}, launches=[launch] if fused else [zero, launch],
                         options=[], notes=f"family=attention_prefill {params}")
