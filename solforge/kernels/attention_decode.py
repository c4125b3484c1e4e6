"""Paged GQA decode attention family (page size 1), split-KV.

Serves a problem whose reference computes a paged decode with page size 1: q [batch, H_qo, D],
k_cache/v_cache [num_pages, 1, H_kv, D], kv_indptr (batch + 1), kv_indices, a scalar sm_scale;
outputs `output` [batch, H_qo, D] (bf16) and `lse` [batch, H_qo] (fp32, base 2); a request with no kv
gives 0 / -inf. The matcher (attention_common.match_gqa) reads these facts from the definition's
dtypes and shapes and from what the reference computes on small requests, never from names.

Two launches (kernels_cuda/attention_decode/attention_decode.cu): gqa_decode_split, a CTA per
(chunk of CHUNK kv tokens of a request, kv head) with the kv head's GROUP q heads as mma rows, grid.x
= num_kv_indices // CHUNK + batch (chunks found from kv_indptr on the device, see the .cu header);
a one-chunk request is finished there, the others leave (O, lse) per chunk in the workspace, and
gqa_decode_combine (a CTA per request) merges them. Tunables: CHUNK, BLOCK_N (kv tokens per ring
step), NWARPS (warps splitting each step's columns), STAGES (cp.async ring depth).
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .attention_common import DECODE, kernel_source, match_gqa
from .base import Family, FamilyError, Spec, shape_dims
from .gate import OfferedByFamilyJson

SMEM_LIMIT = 227 * 1024
COMBINE_WARPS = 8  # #define COMBINE_WARPS in the .cu


def smem_bytes(block_n: int, stages: int, nwarps: int, group: int, head_dim: int = 128) -> int:
    """Dynamic shared memory: the 16-row Q tile + max(K/V ring, the warps' fp32 O for the merge)."""
    return 16 * head_dim * 2 + max(2 * stages * block_n * head_dim * 2, nwarps * group * head_dim * 4)


SMEM_EXPR = ("16 * HEAD_DIM * 2 + max(2 * STAGES * BLOCK_N * HEAD_DIM * 2, "
             "NWARPS * (NUM_QO_HEADS // NUM_KV_HEADS) * HEAD_DIM * 4)")


class AttentionDecodeFamily(OfferedByFamilyJson, Family):
    name = "attention_decode"
    description = ("paged (page size 1) GQA decode attention, split-KV: a CTA per (kv chunk, kv head) "
                   "with the GROUP q heads as mma.sync rows, cp.async gathered K/V ring, online "
                   "softmax base 2, per-chunk (O, lse) merged by a second kernel")
    ops = ("gqa_paged_decode",)
    source_dir = "attention_decode"   # family.json "offered": the family-wide GPU gate

    def analyze(self, defn: Definition) -> Optional[Spec]:
        m = match_gqa(defn, DECODE)
        if m is None or m.h_qo // m.h_kv > 16:
            return None
        ip, ix = shape_dims(defn, m.names["kv_indptr"]), shape_dims(defn, m.names["kv_indices"])
        return Spec(fixed={"NUM_QO_HEADS": m.h_qo, "NUM_KV_HEADS": m.h_kv, "HEAD_DIM": m.head_dim},
                    info={"batch": str(m.q[0]), "len_indptr": str(ip[0]), "num_kv_indices": str(ix[0]),
                          "names": m.names})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # not GPU-checked yet (family.json "offered": false): the first guess first
        return [{"CHUNK": 256, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 3},
                {"CHUNK": 128, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 2},
                {"CHUNK": 512, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 4},
                {"CHUNK": 128, "BLOCK_N": 32, "NWARPS": 2, "STAGES": 4},
                {"CHUNK": 64, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 2}]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if set(params) != {"CHUNK", "BLOCK_N", "NWARPS", "STAGES"}:
            raise FamilyError("attention_decode params: CHUNK, BLOCK_N, NWARPS, STAGES")
        ch, bn, nw, st = params["CHUNK"], params["BLOCK_N"], params["NWARPS"], params["STAGES"]
        if nw not in (1, 2, 4, 8):
            raise FamilyError(f"NWARPS={nw}: 1, 2, 4 or 8")
        if bn not in (16, 32, 64, 128) or bn % (16 * nw):
            raise FamilyError(f"BLOCK_N={bn}: 16..128, a multiple of 16 * NWARPS")
        if ch not in (16, 32, 64, 128, 256, 512, 1024, 2048) or ch < bn:
            raise FamilyError(f"CHUNK={ch}: a power of two in 16..2048, >= BLOCK_N")
        if not 2 <= st <= 4:
            raise FamilyError(f"STAGES={st}: 2..4")
        group = spec.fixed["NUM_QO_HEADS"] // spec.fixed["NUM_KV_HEADS"]
        if smem_bytes(bn, st, nw, group, spec.fixed["HEAD_DIM"]) > SMEM_LIMIT:
            raise FamilyError(f"{params}: too much shared memory")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        src = kernel_source("attention_decode", "attention_decode.cu")
        li, nkv, n = spec.info["len_indptr"], spec.info["num_kv_indices"], spec.info["names"]
        n_slots = f"{nkv} // CHUNK + {li} - 1"
        split = Launch(kernel="gqa_decode_split", grid=[f"{n_slots}", "NUM_KV_HEADS"], block=["NWARPS * 32"],
                       smem=SMEM_EXPR,
                       args=[n["q"], n["k"], n["v"], n["kv_indptr"], n["kv_indices"], n["out"], n["lse"], "workspace",
                             f"int32:{li} - 1", f"int32:{n_slots}", f"float32:{n['scale']}"])
        combine = Launch(kernel="gqa_decode_combine", grid=[f"{li} - 1"], block=[str(COMBINE_WARPS * 32)],
                         args=[n["kv_indptr"], "workspace", n["out"], n["lse"], f"int32:{n_slots}"])
        return Candidate(problem=defn.name, language="cuda", sources={"attention_decode.cu": src},
                         params={**spec.fixed, **params}, launches=[split, combine],
                         workspace=f"({n_slots}) * NUM_QO_HEADS * (HEAD_DIM + 1) * 4", workspace_zero="0",
                         options=[], notes=f"family=attention_decode {params}")
