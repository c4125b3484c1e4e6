"""MoE group score aggregation and masking family (SOL-ExecBench L1/059 style routing step).

Serves a reference that views fp32 `scores` [num_tokens, num_experts] as [num_tokens, n_group,
experts_per_group], scores each group by the sum of its top-2 values (torch.topk k=2, .sum), picks
the topk_group best groups (torch.topk of the group scores), scatters them into a 0/1 `group_mask`
[num_tokens, n_group] and returns `masked_scores` = scores with the other groups' experts set to
-inf. num_experts 256, n_group 8 and topk_group (1..8) are const axes of the definition and must
equal the reference's literals. Kernel: kernels_cuda/moe_group_mask/moe_group_mask.cu (a warp per
token row, 4 lanes per group, shuffle top-2 merge, rank-based top-k with ties to the lower group).
Tunables: ROWS_PER_WARP, WARPS_PER_CTA, STREAM (streaming load/store cache hints).
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import Family, FamilyError, Spec, const_value, read_source, reference_code, shape_dims
from .gate import OfferedByFamilyJson

# the reference's defining lines
_REF_PATTERNS = (
    r"experts_per_group\s*=\s*num_experts\s*//\s*n_group\b",
    r"(\w+)\s*=\s*scores\.view\(\s*num_tokens\s*,\s*n_group\s*,\s*experts_per_group\s*\)",
    r"(\w+)\s*=\s*torch\.topk\(\s*\w+\s*,\s*k\s*=\s*2\s*,\s*dim\s*=\s*-1\s*\)\s*\[\s*0\s*\]",
    r"group_scores\s*=\s*\w+\.sum\(\s*dim\s*=\s*-1\s*\)",
    r"group_idx\s*=\s*torch\.topk\(\s*group_scores\s*,\s*k\s*=\s*topk_group\s*,\s*dim\s*=\s*-1\s*"
    r"(?:,\s*sorted\s*=\s*(?:False|True)\s*)?\)\s*\[\s*1\s*\]",
    r"group_mask\s*=\s*torch\.zeros_like\(\s*group_scores\s*\)",
    r"group_mask\.scatter_\(\s*1\s*,\s*group_idx\s*,\s*1\s*\)",
    r"masked_scores\s*=\s*scores\.masked_fill\(\s*~\s*score_mask\.bool\(\)\s*,\s*float\(\s*['\"]-inf['\"]\s*\)\s*\)",
    r"return\s+masked_scores\s*,\s*group_mask\b",
)
# ops the kernel does not do: any of them in the reference means another function
_FOREIGN = re.compile(r"\b(?:sigmoid|softmax|exp|log|matmul|linear|einsum|bmm|where|gather|sort|"
                      r"argsort|argmax|max|min|clamp|abs|sqrt|mean|cumsum|scatter_add_?)\s*\(|@|\+=|\bbias\b")
_LITERAL = r"^\s*{name}\s*=\s*(\d+)\s*$"
_CONSTS = ("num_experts", "n_group", "topk_group")


def _literal(code: str, name: str) -> Optional[int]:
    found = re.findall(_LITERAL.format(name=name), code, flags=re.M)
    return int(found[0]) if len(found) == 1 else None


class MoeGroupMaskFamily(OfferedByFamilyJson, Family):
    name = "moe_group_mask"
    description = ("MoE group routing mask: per token, group score = sum of each group's top-2 expert "
                   "scores, top-k groups kept, masked_scores (-inf elsewhere) + 0/1 group_mask; a warp "
                   "per row, 16-byte loads/stores, shuffle top-2 merge, rank-based group top-k")
    ops = ("moe_group_topk_mask",)
    source_dir = "moe_group_mask"   # family.json "offered": the family-wide GPU gate

    def analyze(self, defn: Definition) -> Optional[Spec]:
        if set(defn.inputs) != {"scores"} or set(defn.outputs) != {"masked_scores", "group_mask"}:
            return None
        if any(t.dtype != "float32" for t in (*defn.inputs.values(), *defn.outputs.values())):
            return None
        consts = {k: defn.const_axes.get(k) for k in _CONSTS}
        if None in consts.values():
            return None
        e, g, k = consts["num_experts"], consts["n_group"], consts["topk_group"]
        if e != 256 or g != 8 or not 1 <= k <= g:
            return None
        code = reference_code(defn)
        if _FOREIGN.search(code) or not all(re.search(p, code) for p in _REF_PATTERNS):
            return None
        if any(_literal(code, n) != consts[n] for n in _CONSTS):   # the reference's literals = the axes
            return None
        s, ms, gm = (shape_dims(defn, n) for n in ("scores", "masked_scores", "group_mask"))
        if len(s) != 2 or ms != s or len(gm) != 2 or gm[0] != s[0]:
            return None
        if const_value(defn, s[1]) != e or const_value(defn, gm[1]) != g or isinstance(s[0], int):
            return None
        epg = defn.axes.get("experts_per_group")
        if epg is not None and const_value(defn, "experts_per_group") != e // g:
            return None
        return Spec(fixed={"NUM_EXPERTS": e, "N_GROUP": g, "TOPK_GROUP": k},
                    info={"num_tokens": str(s[0])})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # the first guess first (chosen before the GPU check); in the H200 check one row per warp
        # won, 6.32-6.40 us geomean against 6.9 us for this one (moe_group_mask_h200_059_rows.jsonl)
        return [{"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 8, "STREAM": 1},
                {"ROWS_PER_WARP": 1, "WARPS_PER_CTA": 8, "STREAM": 1},
                {"ROWS_PER_WARP": 4, "WARPS_PER_CTA": 4, "STREAM": 1},
                {"ROWS_PER_WARP": 1, "WARPS_PER_CTA": 4, "STREAM": 1},
                {"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 4, "STREAM": 1},
                {"ROWS_PER_WARP": 4, "WARPS_PER_CTA": 8, "STREAM": 1},
                {"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 8, "STREAM": 0},
                {"ROWS_PER_WARP": 1, "WARPS_PER_CTA": 4, "STREAM": 0}]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if set(params) != {"ROWS_PER_WARP", "WARPS_PER_CTA", "STREAM"}:
            raise FamilyError("moe_group_mask params: ROWS_PER_WARP, WARPS_PER_CTA, STREAM")
        if params["ROWS_PER_WARP"] not in (1, 2, 4):
            raise FamilyError(f"ROWS_PER_WARP={params['ROWS_PER_WARP']}: 1, 2 or 4")
        if params["WARPS_PER_CTA"] not in (2, 4, 8, 16):
            raise FamilyError(f"WARPS_PER_CTA={params['WARPS_PER_CTA']}: 2, 4, 8 or 16")
        if params["STREAM"] not in (0, 1):
            raise FamilyError(f"STREAM={params['STREAM']}: 0 or 1")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        t = spec.info["num_tokens"]
        launch = Launch(kernel="moe_group_mask_kernel",
                        grid=[f"max(1, ceil_div({t}, WARPS_PER_CTA * ROWS_PER_WARP))"],
                        block=["WARPS_PER_CTA * 32"],
                        args=["scores", "masked_scores", "group_mask", f"int64:{t}"])
        return Candidate(problem=defn.name, language="cuda",
                         sources={"moe_group_mask.cu": read_source("moe_group_mask", "moe_group_mask.cu")},
                         params={**spec.fixed, **params}, launches=[launch],
                         options=[], notes=f"family=moe_group_mask {params}")
