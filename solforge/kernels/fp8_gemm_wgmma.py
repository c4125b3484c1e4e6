"""Blockwise-scaled FP8 GEMM on Hopper wgmma (native e4m3 tensor cores, sm_90a).

The computation, the problems and the matcher are fp8_gemm's (solforge/kernels/fp8_gemm.py: the
same recipes, modes, quantization kernel and workspace layout; this family subclasses it and reuses
its analyze() and its launch/workspace construction); only the GEMM kernel differs:
kernels_cuda/fp8_gemm_wgmma/fp8_gemm_wgmma.cu, a CTA of BM/64 warpgroups per BM x BN tile, a
cp.async ring into 128B-swizzled shared memory, per 128-K block 4 wgmma m64nBNk32 e4m3 into a fresh
fp32 partial promoted with sa * sw exactly as fp8_gemm.cu. Tunables: BM (64/128), BN (64/128),
STAGES. Gated by family.json `"offered"` (false until its first GPU check).
"""

from __future__ import annotations

from ..candidate import Candidate
from ..problem.definition import Definition
from .base import FamilyError, Spec, read_source
from .fp8_gemm import SMEM_LIMIT, Fp8GemmFamily

PARAMS = ("BM", "BN", "STAGES")
SMEM_EXPR = "STAGES * ((BM + BN) * 128 + BM * 4) + 1024"   # + 1024: the base rounded up to 1024


def smem_bytes(bm: int, bn: int, stages: int) -> int:
    return stages * ((bm + bn) * 128 + bm * 4) + 1024


QUANT_MARK = "// FP8_QUANT_SECTION"


def quant_section() -> str:
    """fp8_gemm.cu's workspace layout and fp8_quant kernel, as GPU-checked there."""
    src = read_source("fp8_gemm", "fp8_gemm.cu")
    return src[src.index("// ---- workspace layout"):src.index("// ---- GEMM")]


def kernel_source() -> str:
    """fp8_gemm_wgmma.cu with fp8_gemm.cu's quantization section in place of its marker lines."""
    src = read_source("fp8_gemm_wgmma", "fp8_gemm_wgmma.cu")
    start = src.index(QUANT_MARK)
    end = src.index("\n\n", start) + 1  # the marker's comment block ends at the first blank line
    return src[:start] + quant_section() + src[end:]


class Fp8GemmWgmmaFamily(Fp8GemmFamily):
    name = "fp8_gemm_wgmma"
    description = ("blockwise-scaled FP8 GEMM (1x128 activation, 128x128 weight scales) on wgmma "
                   "m64nNk32 e4m3 (sm_90a): fp8_gemm's in-call quantization, a cp.async ring into "
                   "128B-swizzled smem, per-128-K promotion by sa * sw, + bias, bf16")
    ops = ("fp8_blockwise_gemm",)
    source_dir = "fp8_gemm_wgmma"   # family.json "offered": the family-wide GPU gate

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # not yet measured: 128 x 128 (two warpgroups, the usual Hopper tile) first, then the
        # smaller tiles that give more CTAs per SM (fp8_gemm's 64 x 64 won its H200 check)
        return [{"BM": 128, "BN": 128, "STAGES": 4},
                {"BM": 64, "BN": 128, "STAGES": 4},
                {"BM": 128, "BN": 64, "STAGES": 4},
                {"BM": 64, "BN": 64, "STAGES": 4},
                {"BM": 128, "BN": 128, "STAGES": 6},
                {"BM": 64, "BN": 128, "STAGES": 8}]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if set(params) != set(PARAMS):
            raise FamilyError(f"fp8_gemm_wgmma params: {', '.join(PARAMS)}")
        bm, bn, st = (params[k] for k in PARAMS)
        if bm not in (64, 128):
            raise FamilyError(f"BM={bm}: 64 or 128 (one or two consumer warpgroups)")
        if bn not in (64, 128):
            # BN 256 would need 2 x 128 fp32 accumulators a thread (running sum + partial): spills
            raise FamilyError(f"BN={bn}: 64 or 128 (a tile lies in one 128-column weight-scale block)")
        if not 2 <= st <= 8:
            raise FamilyError(f"STAGES={st}: 2..8")
        if smem_bytes(bm, bn, st) > SMEM_LIMIT:
            raise FamilyError(f"{params}: too much shared memory")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        # fp8_gemm's candidate (quant launch, workspace, the GEMM's args and grid), its GEMM launch
        # switched to this kernel: BM/64 warpgroups, the 1024-aligned ring
        base = super()._build(defn, spec, params)
        gemm = base.launches[-1].model_copy(update={
            "kernel": "fp8_gemm_wgmma", "block": ["(BM // 64) * 128"], "smem": SMEM_EXPR})
        data = base.model_dump()
        data.update(sources={"fp8_gemm_wgmma.cu": kernel_source()},
                    launches=[l.model_dump() for l in base.launches[:-1]] + [gemm.model_dump()],
                    notes=f"family=fp8_gemm_wgmma recipe={spec.info['recipe']} {params}")
        return Candidate.model_validate(data)
