"""Hopper GEMM family: C = A @ B.T (fp16/bf16, fp32 accumulation) with wgmma.mma_async (sm_90a).

Same problems as gemm_tn (one `A @ B.T` / `F.linear(A, B)`, constant N and K, variable M); the
kernel (kernels_cuda/gemm_wgmma/gemm_wgmma.cu, which documents the shared-memory descriptor
layout) is warp-specialized: a cp.async producer warpgroup feeds one or two wgmma consumer
warpgroups through an mbarrier ring. Three tiers picked by M at run time (grid, block and shared
memory expressions mirror the kernel's rule), split-K with a last-CTA reduction for small M.

Offered to the search only when kernels_cuda/gemm_wgmma/family.json says `"offered": true`,
which is set after an H200 run found every benchmarked variant correct
(data/results/kernels_wgmma_h200.txt); `get_family("gemm_wgmma")` works either way.
"""

from __future__ import annotations

import json
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import CUDA_DIR, Family, FamilyError, Spec, read_source
from .gemm import GemmFamily, tier_select_and_grid, vary_one_tier

TIER_KEYS = ("BM", "BN", "ST", "SPLIT")
BK = 64
SMEM_LIMIT = 227 * 1024 - 2048     # dynamic bytes per block: static smem (barriers + the 1 KB the
                                   # system reserves, 1168 in the cubin) must fit beside it
SMS = 132                          # H200 multiprocessors: the CTA count split-K aims at
MAX_ST = 8


def smem_bytes(bm: int, bn: int, st: int) -> int:
    """Dynamic shared memory of a tier: ST stages of (BM + BN) rows x 128 bytes, + 1024 for the
    run-time 1024-byte alignment the 128-byte swizzle needs."""
    return st * (bm + bn) * BK * 2 + 1024


def max_stages(bm: int, bn: int) -> int:
    return min(MAX_ST, (SMEM_LIMIT - 1024) // ((bm + bn) * BK * 2))


def offered() -> bool:
    try:
        return bool(json.loads((CUDA_DIR / "gemm_wgmma" / "family.json").read_text()).get("offered"))
    except (OSError, ValueError):
        return False


class GemmWgmmaFamily(Family):
    name = "gemm_wgmma"
    description = ("C = A @ B.T, constant N and K, sm_90a: wgmma.mma_async m64nBNk16 from 128B-swizzled "
                   "shared memory, cp.async producer warpgroup + mbarrier ring + 1-2 consumer warpgroups; "
                   "split-K for small M; three tiers picked by M at run time")
    ops = ("gemm", "matmul_bt", "linear_nobias")
    source_dir = "gemm_wgmma"

    def __init__(self) -> None:
        self._matcher = GemmFamily()

    @property
    def offered(self) -> bool:
        return offered()

    def analyze(self, defn: Definition) -> Optional[Spec]:
        spec = self._matcher.analyze(defn)  # the same function: one A @ B.T, nothing else
        if spec is None:
            return None
        n, k = spec.info["n"], spec.info["k"]
        if n % 64 or k % BK:
            return None
        return Spec(fixed={"DTYPE": spec.fixed["DTYPE"], "NN": n, "KK": k, "WATCHDOG": 1},
                    info=spec.info)

    # ---- parameters -----------------------------------------------------------------------
    @staticmethod
    def _splits(n: int, k: int, bm: int, bn: int, m_tiles: int) -> list[int]:
        """Split-K choices around the smallest split that fills the GPU (>= 2 k-tiles per CTA)."""
        kt = k // BK
        divs = [s for s in range(1, kt + 1) if kt % s == 0 and kt // s >= 2]
        ctas = lambda s: (n // bn) * m_tiles * s
        best = next((s for s in divs if ctas(s) >= SMS), divs[-1])
        i = divs.index(best)
        return sorted({divs[max(i - 1, 0)], best, divs[min(i + 1, len(divs) - 1)]})

    def _tier_options(self, n: int, k: int) -> tuple[list, list, list]:
        t0 = [(64, bn, max_stages(64, bn), s) for bn in (128, 64) if n % bn == 0
              for s in self._splits(n, k, 64, bn, 1)]
        t1 = [(bm, bn, max_stages(bm, bn), s) for bm, bn in ((128, 128), (64, 128), (128, 64))
              if n % bn == 0 for s in self._splits(n, k, bm, bn, 2)]
        t2 = []
        for bm, bn in ((128, 256), (128, 128), (64, 256), (64, 128), (64, 64)):
            if n % bn == 0:
                t2.append((bm, bn, max_stages(bm, bn), 1))
        # few N-tiles (N = 128, 256): big M still needs enough CTAs, so small tiles go first
        if n // 128 < 8:
            t2.sort(key=lambda c: c[0] * c[1])
        return t0, t1, t2

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        n, k = spec.info["n"], spec.info["k"]
        t0, t1, t2 = self._tier_options(n, k)
        base = (t0[len(t0) // 2], t1[len(t1) // 2], t2[0])
        # the large-M tier first: its winner matters most (combine() joins the tiers' winners)
        return vary_one_tier(base, ((2, t2), (0, t0), (1, t1)), self._params_of)

    @staticmethod
    def _params_of(t0, t1, t2, t0_max: int = 64, t1_max: int = 256) -> dict:
        p = {"T0_MAXM": t0_max, "T1_MAXM": t1_max}
        for i, cfg in enumerate((t0, t1, t2)):
            for key, v in zip(TIER_KEYS, cfg):
                p[f"T{i}_{key}"] = v
        return p

    def combine(self, tier_params: list[dict]) -> dict:
        out = dict(tier_params[0])
        for i, src in enumerate(tier_params):
            for key in TIER_KEYS:
                out[f"T{i}_{key}"] = src[f"T{i}_{key}"]
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        n, k = spec.info["n"], spec.info["k"]
        need = {f"T{i}_{key}" for i in range(3) for key in TIER_KEYS} | {"T0_MAXM", "T1_MAXM"}
        missing = need - set(params)
        if missing:
            raise FamilyError(f"gemm_wgmma params missing: {sorted(missing)}")
        extra = set(params) - need
        if extra:
            raise FamilyError(f"gemm_wgmma: unknown params {sorted(extra)}")
        for i in range(3):
            bm, bn, st, s = (params[f"T{i}_{key}"] for key in TIER_KEYS)
            if bm not in (64, 128) or bn not in (64, 128, 256) or not 2 <= st <= MAX_ST:
                raise FamilyError(f"tier {i}: BM={bm} (64|128), BN={bn} (64|128|256), ST={st} (2..8)")
            if n % bn or s < 1 or k % (BK * s) or (i == 2 and s != 1):
                raise FamilyError(f"tier {i}: BN={bn} must divide N={n}, 64*SPLIT={BK * s} K={k}"
                                  + (" (tier 2: SPLIT 1)" if i == 2 else ""))
            if smem_bytes(bm, bn, st) > SMEM_LIMIT:
                raise FamilyError(f"tier {i}: {smem_bytes(bm, bn, st)} bytes of shared memory")
        if not 0 < params["T0_MAXM"] <= params["T1_MAXM"]:
            raise FamilyError("need 0 < T0_MAXM <= T1_MAXM")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        m, n = spec.info["m"], spec.info["n"]
        p = dict(params)
        sel, grid = tier_select_and_grid(m, n)
        block = " + ".join(f"{s} * (128 + 2 * T{i}_BM)" for i, s in enumerate(sel))  # 1 + BM/64 WGs
        smem = " + ".join(f"{s} * {smem_bytes(p[f'T{i}_BM'], p[f'T{i}_BN'], p[f'T{i}_ST'])}"
                          for i, s in enumerate(sel))
        split_tiers = [i for i in (0, 1) if p[f"T{i}_SPLIT"] > 1]
        tickets = max([4] + [-(-p[f"T{i}_MAXM"] // p[f"T{i}_BM"]) * (n // p[f"T{i}_BN"])
                             for i in split_tiers])
        tickets = -(-tickets // 4) * 4  # keeps the fp32 partials 16-byte aligned
        ws = (f"4 * TICKETS + 4 * {n} * ({m}) * ({sel[0]} * (T0_SPLIT > 1) * T0_SPLIT"
              f" + {sel[1]} * (T1_SPLIT > 1) * T1_SPLIT)")
        src = read_source("gemm_wgmma", "gemm_wgmma.cu")
        launch = Launch(kernel="gemm_wgmma_kernel", grid=[grid], block=[block], smem=smem,
                        args=[spec.info["a"], spec.info["b"], spec.info["c"], "workspace",
                              f"int32:{m}"])
        return Candidate(problem=defn.name, language="cuda", sources={"gemm_wgmma.cu": src},
                         params={**spec.fixed, "TICKETS": tickets, **params}, launches=[launch],
                         workspace=ws, notes="family=gemm_wgmma")
