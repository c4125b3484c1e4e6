"""Hopper GEMM family: C = A @ B.T (fp16/bf16, fp32 accumulation) with wgmma.mma_async (sm_90a).

Same problems as gemm_tn (one `A @ B.T` / `F.linear(A, B)`, constant N and K, variable M); the
kernel (kernels_cuda/gemm_wgmma/gemm_wgmma.cu, which documents the shared-memory descriptor
layout) is warp-specialized: a cp.async producer warpgroup feeds one or two wgmma consumer
warpgroups through an mbarrier ring. Five tiers picked by M at run time (grid, block, shared memory
and cluster expressions mirror the kernel's rule), in this order:
  S0 (M <= TS0_MAXM), S1 (M <= TS1_MAXM): "skinny" mma.sync tiers for decode-like M: B streamed
      once straight into registers, split-K over warps and over the CTAs of a cluster (DSMEM sums);
  T0 (M <= T0_MAXM), T1 (M <= T1_MAXM): wgmma with split-K, either through a zeroed workspace and a
      last-CTA reduction (CSPLIT=0) or through a cluster of SPLIT CTAs and DSMEM (CSPLIT=1, no
      workspace, so no memset launch before the kernel);
  T2: wgmma, no split.
TS0_MAXM = 0 turns the skinny tiers off (TS1_MAXM = TS0_MAXM: S1 unused).

Offered to the search only when kernels_cuda/gemm_wgmma/family.json says `"offered": true`,
which is set after an H200 run found every benchmarked variant correct
(data/results/kernels_bench/kernels_wgmma_h200.txt); `get_family("gemm_wgmma")` works either way.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import CUDA_DIR, Family, FamilyError, Spec, read_source
from .gate import family_offered
from .gemm import GemmFamily, tier_select_and_grid, vary_one_tier

TIER_KEYS = ("BM", "BN", "ST", "SPLIT")
SKINNY_KEYS = ("MAXM", "MT", "RT", "WR", "WK", "KJ", "CL")   # tiers S0, S1: TS{i}_{key}
GLOBAL_KEYS = ("CSPLIT", "EVF")
# optional tier-2 (large M) keys, defaults when absent: T2_CTAS persistent grid size (0: one CTA per
# tile), T2_GROUP raster group (M-tiles per sweep of the N-tiles; 0: M-tiles fastest), T2_EPI
# epilogue through shared memory with 16-byte stores (1) or direct 4-byte stores (0)
T2_OPTIONAL = {"T2_CTAS": 0, "T2_GROUP": 16, "T2_EPI": 0,
               # T2_ORDER: a persistent CTA's tiles round-robin (0) or serpentine (1: odd rounds
               # reversed, so the cheap tiles of a ragged last M-tile spread over the CTAs)
               "T2_ORDER": 0,
               # MSKIP: consumer warpgroups whose 64 rows all lie past M skip their wgmmas (1) or
               # multiply zero rows as the measured best did (0, the kernel's default until an H200
               # run has checked the skip)
               "MSKIP": 0,
               # TMA: the wgmma tiers' producer is one thread issuing TMA box loads from two
               # host-encoded tensor maps (launch args "tmap:A:64,64:sw128", "tmap:B:64,64:sw128")
               # instead of a cp.async warpgroup (0)
               "TMA": 0,
               # T2_SWZ: tier 2's raster groups alternate their N-tile direction (1) or not (0)
               "T2_SWZ": 0}
REGS_PER_SM, MAX_THREADS = 65536, 384
# skinny partial sums stay under 48 KB with the kernel's 1.2 KB of static shared memory: the launcher
# opts a kernel in to more only when the dynamic part alone exceeds 48 KB (static + 48 KB failed
# with CUDA_ERROR_INVALID_VALUE on the H200)
SKINNY_SMEM_MAX = 46 * 1024
BK = 64
SMEM_LIMIT = 227 * 1024 - 2048     # dynamic bytes per block: static smem (barriers + the 1 KB the
                                   # system reserves, 1168 in the cubin) must fit beside it
SMS = 132                          # H200 multiprocessors: the CTA count split-K aims at
MAX_ST = 8


def smem_bytes(bm: int, bn: int, st: int) -> int:
    """Dynamic shared memory of a tier: ST stages of (BM + BN) rows x 128 bytes, + 1024 for the
    run-time 1024-byte alignment the 128-byte swizzle needs."""
    return st * (bm + bn) * BK * 2 + 1024


def max_stages(bm: int, bn: int, epi: int = 0) -> int:
    return min(MAX_ST, (SMEM_LIMIT - 1024 - epi_smem(bm, epi)) // ((bm + bn) * BK * 2))


def epi_smem(bm: int, epi: int) -> int:
    """Tier 2's staged epilogue: 4 KB per consumer warp (BM / 16 warps)."""
    return epi * (bm // 64) * 16384


def skinny_smem(mt: int, rt: int, wr: int, wk: int) -> int:
    """Shared memory of a skinny tier: the fp32 partial sums of its WK warps, [WK][8 MT][16 RT WR]."""
    return wk * 8 * mt * 16 * rt * wr * 4


def split_tile_fits(bm: int, bn: int, st: int) -> bool:
    """A cluster-split tier sums its fp32 BM x (BN+8) tile in the stage memory."""
    return bm * (bn + 8) * 4 <= st * (bm + bn) * BK * 2


def skinny_options(n: int, k: int, mt: int) -> list[tuple]:
    """Skinny-tier configs (MAXM, MT, RT, WR, WK, KJ, CL) for M <= 8*MT, best guess first: the
    kernel runs 1 CTA of <= 384 threads per 12 warps an SM holds (168 registers a thread), so the
    block shapes are 4, 6 or 12 warps; CL (cluster split-K) is the smallest that puts about one
    wave of CTAs on the 132 SMs, and the next larger one."""
    kj_max = {1: 4, 2: 4, 4: 2, 8: 1}[mt]   # registers: two chunks of fragments in flight
    out = []
    for rt, wr, wk in ((1, 1, 6), (1, 1, 4), (1, 2, 6), (1, 1, 12)):
        rows = 16 * rt * wr
        if n % rows:
            continue
        slots = SMS * (12 // (wr * wk))
        cls = [c for c in (1, 2, 4, 8) if k % (c * 32) == 0]
        pick = next((c for c in cls if (n // rows) * c >= 0.9 * slots), cls[-1])
        i = cls.index(pick)
        for c in cls[i:i + 2]:
            # the widest chunk that still gives every warp two chunks or more
            kj = next((j for j in (4, 2, 1) if j <= kj_max and k % (c * 32 * j) == 0
                       and k // (c * 32 * j) >= 2 * wk), 1)
            out.append((8 * mt, mt, rt, wr, wk, kj, c))
    return out


def offered() -> bool:
    return family_offered("gemm_wgmma")


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
        """Best guess first: the params measured best on the H200 for this problem
        (kernels_cuda/gemm_wgmma/best/<problem>.json, scripts/bench_gemm.py) when there is one,
        then one tier varied at a time around it. What the H200 sweep taught the default: the
        skinny tier wins for M <= 16; for M = 17..64 wgmma with cluster split-K beats the skinny
        MT=8 tier (S1 off: TS1_MAXM = TS0_MAXM, T0 serves 17..128). After the measured best: the
        other producer (TMA flipped; the t4 run: TMA won on 004/006/011, cp.async on the others) and
        tier 2's switches; the one-tier variations keep the measured best's switches (T2_OPTIONAL)."""
        n, k = spec.info["n"], spec.info["k"]
        t0, t1, t2 = self._tier_options(n, k)
        s0 = skinny_options(n, k, 2)
        s1 = [(s0[0][0],) + c[1:] for c in skinny_options(n, k, 8)[:1]]      # off
        s1 += [c for c in skinny_options(n, k, 8) if skinny_smem(*c[1:5]) <= SKINNY_SMEM_MAX]  # on

        def clustered(opts):  # CSPLIT=1: at most 8 CTAs, dividing BM, the fp32 tile fits the stages
            out = []
            for bm, bn, st, sp in opts:
                sp = max(x for x in (1, 2, 4, 8) if x <= sp and bm % x == 0 and k % (BK * x) == 0)
                c = (bm, bn, st, sp)
                if (sp == 1 or split_tile_fits(bm, bn, st)) and c not in out:
                    out.append(c)
            return out
        t0 = clustered([(128, bn, max_stages(128, bn), s) for bn in (256, 128) if n % bn == 0
                        for s in self._splits(n, k, 128, bn, 1)] + t0)
        t1 = clustered(t1)
        s0 = [c for c in s0 if skinny_smem(*c[1:5]) <= SKINNY_SMEM_MAX]
        base = (s0[0], s1[0], t0[0], t1[len(t1) // 2], t2[0])
        # tall tiles for M = 129..256 (one 256-row M-tile: each B tile read by one CTA per split,
        # not two), tried after the 128-row ones; untimed until the t3 check (bench_gemm --t3)
        t1 += [c for c in clustered([(256, bn, max_stages(256, bn), s) for bn in (128, 64) if n % bn == 0
                                     for s in self._splits(n, k, 256, bn, 1)]) if c not in t1]
        t1_max = 1024 if n <= 256 else 256  # few N tiles: split-K pays up to larger M
        measured = self._measured(defn, spec)
        if measured is not None:
            m = measured
            tup = lambda pre, keys: tuple(m[f"{pre}{x}"] for x in keys)
            base = (tup("TS0_", SKINNY_KEYS), tup("TS1_", SKINNY_KEYS), tup("T0_", TIER_KEYS),
                    tup("T1_", TIER_KEYS), tup("T2_", TIER_KEYS))
        out = [measured] if measured is not None else []
        if measured is not None and n <= 256 and measured["T1_MAXM"] < 1024:
            # untimed: the measured best ran M = 289..952 unsplit on 8-16 CTAs (0.2-0.4x of cuBLAS);
            # a cluster split-K tier up to M = 1024 is the next thing to try there
            for bm, bn in ((128, 128), (64, 128)):
                st = max_stages(bm, bn)
                if n % bn == 0 and split_tile_fits(bm, bn, st) and k % (BK * 8) == 0:
                    out.append(dict(measured, T1_MAXM=1024, T1_BM=bm, T1_BN=bn, T1_ST=st, T1_SPLIT=8))
        # the measured best's switches (TMA producer, MSKIP, tier-2 persistent/epilogue/raster
        # options: T2_OPTIONAL) stay on around it, so a varied tier is timed with the same producer
        opts = {key: measured[key] for key in T2_OPTIONAL if key in measured} if measured else {}
        if measured is not None:
            # the other producer (t4 H200 run: TMA won on 004/006/011, cp.async on 005/007/008/010)
            # and tier 2's options, one change each, right after the measured best
            flips = [{"TMA": 1 - measured.get("TMA", 0)},
                     {"T2_CTAS": SMS, "T2_EPI": 1, "T2_ORDER": 1}, {"T2_EPI": 1 - measured.get("T2_EPI", 0)},
                     {"T2_SWZ": 1 - measured.get("T2_SWZ", 0)}]
            for f in flips:
                p = self._fit_epi(dict(measured, **f))
                if p not in out and self._valid(defn, spec, p):
                    out.append(p)
        po = lambda *tiers: self._fit_epi({**self._params_of(*tiers, t1_max=(measured or {}).get(
            "T1_MAXM", t1_max)), **opts})
        for p in vary_one_tier(base, ((4, t2), (0, s0), (1, s1), (2, t0), (3, t1)), po):
            if p not in out and self._valid(defn, spec, p):
                out.append(p)
        return out

    @staticmethod
    def _fit_epi(p: dict) -> dict:
        """Tier 2's staged epilogue (T2_EPI=1) takes shared memory from its stages: at most the
        stages that still fit beside it."""
        if p.get("T2_EPI", 0):
            st = max_stages(p["T2_BM"], p["T2_BN"], 1)
            if p["T2_ST"] > st:
                p = dict(p, T2_ST=st)
        return p

    def _measured(self, defn: Definition, spec: Spec) -> Optional[dict]:
        return self._best_params(defn, spec, CUDA_DIR / "gemm_wgmma" / "best")

    @staticmethod
    def _params_of(s0, s1, t0, t1, t2, t0_max: int = 128, t1_max: int = 256, csplit: int = 1,
                   evf: int = 1) -> dict:
        """Params of one candidate: tiers S0, S1 (skinny tuples, MAXM first), T0, T1, T2."""
        p = {"CSPLIT": csplit, "EVF": evf, "T0_MAXM": max(t0_max, s1[0]), "T1_MAXM": t1_max}
        for i, cfg in enumerate((s0, s1)):
            for key, v in zip(SKINNY_KEYS, cfg):
                p[f"TS{i}_{key}"] = v
        for i, cfg in enumerate((t0, t1, t2)):
            for key, v in zip(TIER_KEYS, cfg):
                p[f"T{i}_{key}"] = v
        return p

    def combine(self, tier_params: list[dict]) -> dict:
        """Tiers S0, S1, T0, T1, T2 from tier_params[0..4] (the per-tier winners)."""
        out = dict(tier_params[0])
        for i, src in enumerate(tier_params[:2]):
            for key in SKINNY_KEYS:
                out[f"TS{i}_{key}"] = src[f"TS{i}_{key}"]
        for i, src in enumerate(tier_params[2:5]):
            for key in TIER_KEYS:
                out[f"T{i}_{key}"] = src[f"T{i}_{key}"]
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        n, k = spec.info["n"], spec.info["k"]
        need = {f"T{i}_{key}" for i in range(3) for key in TIER_KEYS} | {"T0_MAXM", "T1_MAXM"}
        skinny = {f"TS{i}_{key}" for i in range(2) for key in SKINNY_KEYS} | set(GLOBAL_KEYS)
        missing = need - set(params)
        if missing:
            raise FamilyError(f"gemm_wgmma params missing: {sorted(missing)}")
        if set(params) & skinny and not skinny <= set(params):  # all or none (older candidates)
            raise FamilyError(f"gemm_wgmma params missing: {sorted(skinny - set(params))}")
        need |= skinny
        extra = set(params) - need - set(T2_OPTIONAL)
        if extra:
            raise FamilyError(f"gemm_wgmma: unknown params {sorted(extra)}")
        for i in range(3):
            bm, bn, st, s = (params[f"T{i}_{key}"] for key in TIER_KEYS)
            if bm not in (64, 128, 256) or bn not in (64, 128, 256) or not 2 <= st <= MAX_ST:
                raise FamilyError(f"tier {i}: BM={bm} (64|128|256), BN={bn} (64|128|256), ST={st} (2..8)")
            if bm == 256 and (i == 2 or bn > 128):
                # two 64-row atoms per consumer warpgroup: BM x BN accumulators <= 128 x 256, and
                # tier 2's staged epilogue / persistent loop are written for one atom
                raise FamilyError(f"tier {i}: BM=256 (a tall tile) needs BN <= 128 and tier 0 or 1")
            if n % bn or s < 1 or k % (BK * s) or (i == 2 and s != 1):
                raise FamilyError(f"tier {i}: BN={bn} must divide N={n}, 64*SPLIT={BK * s} K={k}"
                                  + (" (tier 2: SPLIT 1)" if i == 2 else ""))
            if smem_bytes(bm, bn, st) > SMEM_LIMIT:
                raise FamilyError(f"tier {i}: {smem_bytes(bm, bn, st)} bytes of shared memory")
        t2 = {key: params.get(key, d) for key, d in T2_OPTIONAL.items()}
        if t2["T2_CTAS"] < 0 or t2["T2_GROUP"] < 0 or t2["T2_EPI"] not in (0, 1) or t2["MSKIP"] not in (0, 1) \
                or t2["T2_ORDER"] not in (0, 1) or t2["TMA"] not in (0, 1) or t2["T2_SWZ"] not in (0, 1):
            raise FamilyError(f"tier 2: T2_CTAS >= 0, T2_GROUP >= 0, T2_EPI 0|1 ({t2})")
        t2_smem = smem_bytes(params["T2_BM"], params["T2_BN"], params["T2_ST"]) + \
            epi_smem(params["T2_BM"], t2["T2_EPI"])
        if t2_smem > SMEM_LIMIT:
            raise FamilyError(f"tier 2: {t2_smem} bytes of shared memory with T2_EPI={t2['T2_EPI']}")
        if not 0 < params["T0_MAXM"] <= params["T1_MAXM"]:
            raise FamilyError("need 0 < T0_MAXM <= T1_MAXM")
        if "TS0_MAXM" not in params:
            return
        if params["CSPLIT"] not in (0, 1) or params["EVF"] not in (0, 1):
            raise FamilyError("CSPLIT and EVF are 0 or 1")
        if not 0 <= params["TS0_MAXM"] <= params["TS1_MAXM"] <= params["T0_MAXM"]:
            raise FamilyError("need 0 <= TS0_MAXM <= TS1_MAXM <= T0_MAXM")
        for i in range(2):
            mx, mt, rt, wr, wk, kj, cl = (params[f"TS{i}_{key}"] for key in SKINNY_KEYS)
            if mt not in (1, 2, 4, 8) or rt not in (1, 2) or kj not in (1, 2, 4, 8) or cl not in (1, 2, 4, 8):
                raise FamilyError(f"skinny tier {i}: MT={mt} (1|2|4|8), RT={rt} (1|2), KJ={kj}, CL={cl} (1|2|4|8)")
            if wr < 1 or wk < 1 or 32 * wr * wk > MAX_THREADS or mx > 8 * mt:
                raise FamilyError(f"skinny tier {i}: {32 * wr * wk} threads (<= 384), MAXM={mx} <= 8*MT={8 * mt}")
            if skinny_smem(mt, rt, wr, wk) > SKINNY_SMEM_MAX:
                raise FamilyError(f"skinny tier {i}: {skinny_smem(mt, rt, wr, wk)} bytes of partial sums "
                                  f"(<= {SKINNY_SMEM_MAX})")
            if n % (16 * rt * wr) or k % (cl * 32 * kj):
                raise FamilyError(f"skinny tier {i}: 16*RT*WR={16 * rt * wr} must divide N={n}, "
                                  f"CL*32*KJ={cl * 32 * kj} K={k}")
        if params["CSPLIT"]:
            for i in range(2):
                bm, bn, st, s = (params[f"T{i}_{key}"] for key in TIER_KEYS)
                if s > 8 or bm % s:
                    raise FamilyError(f"tier {i}: a cluster split is at most 8 CTAs and divides BM ({s})")
                if s > 1 and not split_tile_fits(bm, bn, st):
                    raise FamilyError(f"tier {i}: the fp32 {bm}x{bn} tile needs more than {st} stages")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        if "TS0_MAXM" in params:
            return self._build5(defn, spec, params)
        m, n = spec.info["m"], spec.info["n"]
        p = dict(params)
        sel, grid = tier_select_and_grid(m, n)
        block = " + ".join(f"{s} * (128 + 2 * min(T{i}_BM, 128))" for i, s in enumerate(sel))  # 1 + BM/64 WGs (<= 3)
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

    def _build5(self, defn: Definition, spec: Spec, p: dict) -> Candidate:
        """The five-tier candidate (skinny tiers S0, S1 in front of T0..T2)."""
        m, n = spec.info["m"], spec.info["n"]
        sel = select_terms(m)
        grid = [f"ceil_div({m}, T{i}_BM) * ({n} // T{i}_BN) * T{i}_SPLIT" for i in range(3)]
        if p.get("T2_CTAS", 0):  # persistent tier 2: at most T2_CTAS CTAs loop over the tiles
            grid[2] = f"min(ceil_div({m}, T2_BM) * ({n} // T2_BN), T2_CTAS)"
        grid = [f"({n} // (16 * TS{i}_RT * TS{i}_WR)) * TS{i}_CL" for i in range(2)] + grid
        block = [f"32 * TS{i}_WR * TS{i}_WK" for i in range(2)] + [f"(128 + 2 * min(T{i}_BM, 128))" for i in range(3)]
        smem = [skinny_smem(*(p[f"TS{i}_{k}"] for k in ("MT", "RT", "WR", "WK"))) for i in range(2)]
        smem += [smem_bytes(p[f"T{i}_BM"], p[f"T{i}_BN"], p[f"T{i}_ST"]) for i in range(3)]
        smem[4] += epi_smem(p["T2_BM"], p.get("T2_EPI", 0))
        cluster = ["TS0_CL", "TS1_CL", "(CSPLIT * (T0_SPLIT - 1) + 1)", "(CSPLIT * (T1_SPLIT - 1) + 1)", "1"]
        join = lambda xs: " + ".join(f"{s} * {x}" for s, x in zip(sel, xs))
        split_tiers = [i for i in (0, 1) if p[f"T{i}_SPLIT"] > 1]
        if p["CSPLIT"] or not split_tiers:
            # no workspace, so no memset launch before the kernel; the kernel's ws argument is
            # never read then, and the launcher refuses 'workspace' when it is 0 bytes: pass C
            tickets, ws, ws_arg = 4, "0", spec.info["c"]
        else:
            tickets = max([4] + [-(-p[f"T{i}_MAXM"] // p[f"T{i}_BM"]) * (n // p[f"T{i}_BN"])
                                 for i in split_tiers])
            tickets = -(-tickets // 4) * 4  # keeps the fp32 partials 16-byte aligned
            ws = (f"4 * TICKETS + 4 * {n} * ({m}) * ({sel[2]} * (T0_SPLIT > 1) * T0_SPLIT"
                  f" + {sel[3]} * (T1_SPLIT > 1) * T1_SPLIT)")
            ws_arg = "workspace"
        src = read_source("gemm_wgmma", "gemm_wgmma.cu")
        args = [spec.info["a"], spec.info["b"], spec.info["c"], ws_arg, f"int32:{m}"]
        if p.get("TMA", 0):  # the kernel's two extra __grid_constant__ CUtensorMap parameters
            args += [f"tmap:{spec.info['a']}:64,64:sw128", f"tmap:{spec.info['b']}:64,64:sw128"]
        launch = Launch(kernel="gemm_wgmma_kernel", grid=[join(grid)], block=[join(block)],
                        smem=join(smem), cluster=[join(cluster)], args=args)
        return Candidate(problem=defn.name, language="cuda", sources={"gemm_wgmma.cu": src},
                         params={**spec.fixed, "TICKETS": tickets, **p}, launches=[launch],
                         workspace=ws, notes="family=gemm_wgmma")


def select_terms(m: str) -> list[str]:
    """One launch-expression term per tier S0, S1, T0, T1, T2, exactly one of them 1 for a given M
    (the maxima are nondecreasing, checked): the kernel's own order of tests."""
    return [f"(({m}) <= TS0_MAXM)", f"(({m}) > TS0_MAXM) * (({m}) <= TS1_MAXM)",
            f"(({m}) > TS1_MAXM) * (({m}) <= T0_MAXM)", f"(({m}) > T0_MAXM) * (({m}) <= T1_MAXM)",
            f"(({m}) > T1_MAXM)"]
