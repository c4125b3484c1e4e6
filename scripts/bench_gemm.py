#!/usr/bin/env python3
"""gemm_wgmma variants against torch.matmul (cuBLAS) on every workload of FlashInfer-Bench 004-011.

  prepare (CPU)  per problem a base candidate and variants that change one M-range's tier config
                 (S0: M <= 16, S1: <= 64 skinny mma.sync tiers; T0: <= 128, T1: <= 256 wgmma
                 split-K; T2: wgmma) plus global switches (EVF, CSPLIT); compiles them with NVRTC,
                 records registers / stack / local memory (cuobjdump) and drops variants that spill;
                 stages them with a copy of the problem under --dir (default .carry/gemm).
  run (GPU)      per workload: two fresh input sets (solforge.evaluate.inputs), the reference on
                 each, every variant checked on both (NaN-poisoned output, the workload tolerance,
                 solforge.evaluate.correctness.compare), then timed the way the evaluator times
                 (solforge.evaluate.timing: CUPTI kernel spans through torch.profiler, L2 flushed
                 and the device synchronized before each call, input sets alternated), torch and the
                 variants interleaved call by call. Writes rows.jsonl, env.json, table.txt to --out.
  report (CPU)   per problem: torch vs the best variant per M-range and the realizable combination
                 (one candidate: each tier's winner), geomean over all workloads and over M <= 64;
                 writes the table and kernels_cuda/gemm_wgmma/best/<problem>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROBLEMS = ["004_gemm_n128_k2048", "005_gemm_n256_k7168", "006_gemm_n2048_k4096", "007_gemm_n4096_k4096",
            "008_gemm_n4096_k14336", "010_gemm_n6144_k4096", "011_gemm_n28672_k4096"]
RANGES = (("S0", 0, 16), ("S1", 16, 64), ("T0", 64, 128), ("T1", 128, 256), ("T2", 256, 1 << 30))
SMALL_M = 64
SMS = 132


def range_of(m: int) -> str:
    return next(r for r, lo, hi in RANGES if lo < m <= hi)


# ──────────────────────────────────────────── variants ───────────────────────────────────────────
def _wgmma_split(n: int, k: int, bm: int, bn: int, m_tiles: int) -> list[int]:
    """Cluster split-K sizes (<= 8, dividing BM and K/64 with >= 2 k-tiles) around one wave."""
    ok = [s for s in (1, 2, 4, 8) if bm % s == 0 and k % (64 * s) == 0 and k // 64 // s >= 2]
    ctas = lambda s: (n // bn) * m_tiles * s
    best = next((s for s in ok if ctas(s) >= 0.9 * SMS), ok[-1])
    i = ok.index(best)
    return ok[max(i - 1, 0): i + 2]


def variants_for(n: int, k: int, full: bool = False) -> list[tuple[str, dict]]:
    from solforge.kernels.gemm_wgmma import GemmWgmmaFamily, max_stages, skinny_options, split_tile_fits

    def wg(bm, bn, s):
        st = max_stages(bm, bn)
        return (bm, bn, st, s) if (s == 1 or split_tile_fits(bm, bn, st)) else None

    bns = [bn for bn in (256, 128, 64) if n % bn == 0]
    s0s = skinny_options(n, k, 2)
    s1s = [(64,) + c[1:] for c in skinny_options(n, k, 8)]
    t0s, t1s = [], []
    for bm, bn in ((128, bns[0]), (128, bns[min(1, len(bns) - 1)]), (64, bns[0]), (64, bns[min(1, len(bns) - 1)])):
        for lst, mt in ((t0s, 128 // bm), (t1s, 256 // bm)):
            for s in _wgmma_split(n, k, bm, bn, mt):
                c = wg(bm, bn, s)
                if c and c not in lst:
                    lst.append(c)
    t2s = [c for c in (wg(128, bns[0], 1), wg(128, bns[min(1, len(bns) - 1)], 1), (128, bns[0], 4, 1))
           if c]
    t2s = list(dict.fromkeys(t2s))
    if n // 256 < 8:  # few N tiles: big M still needs CTAs, small tiles first
        t2s.sort(key=lambda c: c[0] * c[1])
    # keep the sweep small: the first guesses of each range (fewer for the large N problems,
    # whose sweep compiles longest and whose skinny shapes differ least)
    if n >= 4096 and not full:
        s0s, s1s, t0s, t1s, t2s = s0s[:4], s1s[:3], t0s[:3], t1s[:3], t2s[:2]
    else:
        s0s, s1s, t0s, t1s = s0s[:7], s1s[:5], t0s[:5], t1s[:5]
    po = GemmWgmmaFamily._params_of
    base = (s0s[0], s1s[0], t0s[0], t1s[0], t2s[0])
    out = [("base", po(*base))]
    for tier, opts in ((0, s0s), (1, s1s), (2, t0s), (3, t1s), (4, t2s)):
        for j, c in enumerate(opts):
            if j == 0:
                continue
            tiers = list(base)
            tiers[tier] = c
            out.append((f"{RANGES[tier][0]}.{j}", po(*tiers)))
    out.append(("EVF0", po(*base, evf=0)))
    out.append(("CSPLIT0", po(*base, csplit=0)))
    if n <= 256:  # few N tiles: the workspace split-K goes past the cluster's 8 CTAs
        sp = GemmWgmmaFamily._splits
        for j, bn in enumerate(b for b in (128, 64) if n % b == 0):
            st = max_stages(128, bn)
            out.append((f"CS0.{j}", po(base[0], base[1], (128, bn, st, sp(n, k, 128, bn, 1)[1]),
                                       (128, bn, st, sp(n, k, 128, bn, 2)[1]), base[4], csplit=0)))
    # wgmma instead of the skinny tier from M = 17 (S1 off; T0 covers 17..128)
    s1wg = t0s[:1]
    for bn in bns[:2]:  # BM = 64 tiles waste less of the MMA on M = 17..64
        c = wg(64, bn, _wgmma_split(n, k, 64, bn, 1)[min(1, len(_wgmma_split(n, k, 64, bn, 1)) - 1)])
        if c and c not in s1wg:
            s1wg.append(c)
    for j, c in enumerate(s1wg):
        p = po(base[0], base[1], c, base[3], base[4])
        p["TS1_MAXM"] = p["TS0_MAXM"]
        out.append((f"S1wg.{j}", p))
    return out


def variants_final(name: str, n: int, k: int) -> list[tuple[str, dict]]:
    """The measured best candidate (best/<problem>.json, as "base") and, for the few-N-tile problems
    (N <= 256), split-K up to M = 1024 (T1_MAXM): there M = 289..952 ran unsplit on 8-16 CTAs."""
    from solforge.kernels.gemm_wgmma import CUDA_DIR, max_stages, split_tile_fits
    best = json.loads((CUDA_DIR / "gemm_wgmma" / "best" / f"{name}.json").read_text())["params"]
    out = [("base", dict(best))]
    if n <= 256:
        j = 0
        for bm, bn in ((128, 128), (64, 128), (128, 64), (64, 64)):
            st = max_stages(bm, bn)
            if n % bn or not split_tile_fits(bm, bn, st):
                continue
            for sp in (8, 4):
                if bm % sp or k % (64 * sp):
                    continue
                out.append((f"T1big.{j}", dict(best, T1_MAXM=1024, T1_BM=bm, T1_BN=bn, T1_ST=st, T1_SPLIT=sp)))
                j += 1
    return out


def variants_t2(name: str, n: int, k: int) -> list[tuple[str, dict]]:
    """The large-M tier (T2) reworked and the ragged-M skip, against the measured best:
      base0  the measured best, MSKIP=0 (the kernel as it was timed: every warpgroup multiplies)
      base   the measured best with MSKIP=1 (warpgroups whose 64 rows lie past M skip their wgmmas;
             pays where M-tiles are ragged and the grid has more than one wave, e.g. 011 M=136);
             every variant below is base with one change
      T2big  128 x 256 tier-2 tiles where the measured best has another shape (006)
      P      persistent tier 2 (T2_CTAS = 132: a CTA loops over tiles, its producer runs into the
             next tile while the consumers write the last one), 128 x 256, 4 stages
      PE     P + the shared-memory epilogue with 16-byte stores (T2_EPI)
      PE.g8  PE with raster groups of 8 M-tiles (T2_GROUP) instead of 16
      PES    PE with the serpentine tile order (T2_ORDER = 1)
      E      the staged epilogue without persistence
      t1k    tier 1 (128 x 128) up to M = 1024, tier 2 on 128 x 256 (as T2big)
      T1.s2  tier 1 (M 129..256) as a 2-CTA cluster split of 128 x 128 tiles where the best is not
      T1.s4  the same with a 4-CTA cluster split
      T0.c2, T0.c4  tier 0 (M 17..128) as a 2- or 4-CTA cluster split of 128 x 128 tiles (N 4096..8192)
    N <= 256 (004, 005): base0 and base only."""
    from solforge.kernels.gemm_wgmma import CUDA_DIR, max_stages
    measured = json.loads((CUDA_DIR / "gemm_wgmma" / "best" / f"{name}.json").read_text())["params"]
    best = dict(measured, MSKIP=1)  # every variant but base0 skips (report --best then keeps it)
    bn = 256 if n % 256 == 0 else 128
    t2 = dict(T2_BM=128, T2_BN=bn, T2_ST=max_stages(128, bn, 1), T2_SPLIT=1)
    out = [("base0", dict(measured, MSKIP=0)), ("base", dict(best))]
    if n <= 256:  # 004, 005: a handful of N-tiles; only the skip is new for them
        return out
    if (best["T2_BM"], best["T2_BN"]) != (128, bn):
        out.append(("T2big", dict(best, **t2)))
    out += [("P", dict(best, **t2, T2_CTAS=SMS)),
            ("PE", dict(best, **t2, T2_CTAS=SMS, T2_EPI=1)),
            ("PE.g8", dict(best, **t2, T2_CTAS=SMS, T2_EPI=1, T2_GROUP=8)),
            ("PES", dict(best, **t2, T2_CTAS=SMS, T2_EPI=1, T2_ORDER=1)),
            ("E", dict(best, **t2, T2_EPI=1))]
    # tier 1 (128 x 128, the measured best's split) up to M = 1024: M = 257..1024 on more CTAs
    # than 128 x 256 tier-2 tiles give (006 M = 289..969 ran at 0.5-0.8x; 010 M = 972 at 0.68x)
    if best["T1_MAXM"] < 1024:
        st = max_stages(128, 128)
        sp = best["T1_SPLIT"] if (best["T1_BM"], best["T1_BN"]) == (128, 128) else 1
        out.append(("t1k", dict(best, **t2, T1_MAXM=1024, T1_BM=128, T1_BN=128, T1_ST=st, T1_SPLIT=sp)))
    # tier 1 with more, shorter CTAs: with MSKIP the ragged second M-tile's CTAs (M = 129..192) cost
    # half, which only shortens the kernel when there is more than one wave to balance
    for lab, sp in (("T1.s2", 2), ("T1.s4", 4)):
        t1 = dict(T1_BM=128, T1_BN=128, T1_ST=max_stages(128, 128), T1_SPLIT=sp)
        if best["CSPLIT"] and n % 128 == 0 and k % (64 * sp) == 0 and any(best[key] != v for key, v in t1.items()):
            out.append((lab, dict(best, **t1)))
    # tier 0 (M 17..128 with the skinny tiers at M <= 16) on 128 x 128 tiles, split 2 or 4: 010's
    # first sweep had (128, 128, split 2) at 1.00x over M = 65..128 against 0.89x of its best's
    # (128, 256, split 4); 007/008 never ran split 4 of 128 x 128 (128 CTAs)
    for lab, sp in (("T0.c2", 2), ("T0.c4", 4)):
        t0 = dict(T0_BM=128, T0_BN=128, T0_ST=max_stages(128, 128), T0_SPLIT=sp)
        if best["CSPLIT"] and n >= 4096 and n <= 8192 and k % (64 * sp) == 0 \
                and any(best[key] != v for key, v in t0.items()):
            out.append((lab, dict(best, **t0)))
    return out


def variants_t3(name: str, n: int, k: int) -> list[tuple[str, dict]]:
    """Tier 1 on tall tiles (BM = 256: two 64-row atoms per consumer warpgroup) and tier 1 up to
    M = 1024, against the t2 run's realizable combination (data/results/gemm_h200_t2_combined.json,
    `report --combined-out`; best/<problem>.json when absent):
      base          the t2 combination with its MSKIP choice; every variant below is base with one change
      base.mskip    base with MSKIP flipped (a global switch: timed on every workload beside base)
      T0.128.s<S>   tier 0 (M up to 128; from 17 when S1 is off) on 128 x 128 tiles, cluster split S
      T0.128x64.s<S>  the same on 128 x 64 tiles, the largest split that keeps one wave
      tall.<BN>.s<S>  tier 1 (M 129..256) = 256 x BN tiles (BN 128 or 64), cluster split S: one
                    M-tile, so each B tile is read by one CTA per split instead of two (the 128-row
                    tiles' second M-tile with 1..128 real rows cost a full B stream: 011 M=136 0.68x);
                    S around one wave of the 132 SMs (N/BN * S CTAs)
      t1k           tier 1 as measured best, up to M = 1024 (T1_MAXM): M = 257..1024 split-K instead
                    of tier 2's unsplit tiles (t2 run, 006: 0.87x at M=289/492 against 0.37x)
      t1k.tall      the middle tall config up to M = 1024
      t1k.<BM>x<BN> (N <= 256) tier 1 up to M = 1024 as an 8-CTA cluster split of BM x BN tiles
    report's T1x plans (T1_MAXM = 1024) then take tier 1's config for M 129..1024, tier 2's for > 1024."""
    from solforge.kernels.gemm_wgmma import CUDA_DIR, max_stages, split_tile_fits
    combined = REPO / "data" / "results" / "gemm_h200_t2_combined.json"
    comb = json.loads(combined.read_text()).get(name) if combined.exists() else None
    if comb:
        best = dict(comb["params"])
    else:
        best = dict(json.loads((CUDA_DIR / "gemm_wgmma" / "best" / f"{name}.json").read_text())["params"])
    t0_x = (comb or {}).get("win", {}).get("T0", [None, 0.0])[1]
    out = [("base", dict(best)), ("base.mskip", dict(best, MSKIP=1 - best.get("MSKIP", 0)))]
    talls = []
    for bn in (128, 64):
        if n % bn or n // bn < 2:  # one N-tile (004 with BN = 128): at most 8 CTAs
            continue
        st = max_stages(256, bn)
        for sp in _wgmma_split(n, k, 256, bn, 1):
            if sp > 1 and (not best["CSPLIT"] or not split_tile_fits(256, bn, st)):
                continue
            t1 = dict(T1_BM=256, T1_BN=bn, T1_ST=st, T1_SPLIT=sp)
            talls.append(t1)
            out.append((f"tall.{bn}.s{sp}", dict(best, **t1)))
    # tier 0 on 128 x 128 tiles, cluster split around one wave (006's first sweep: (128, 128, split 4)
    # 0.93-1.05x at M = 93/128 against its best's 0.61, unrealizable then beside the S1wg plan)
    for sp in _wgmma_split(n, k, 128, 128, 1) if n > 256 and t0_x < 0.97 else []:  # T0 loses (006-008)
        t0 = dict(T0_BM=128, T0_BN=128, T0_ST=max_stages(128, 128), T0_SPLIT=sp)
        if n % 128 == 0 and best["CSPLIT"] and (sp == 1 or split_tile_fits(128, 128, t0["T0_ST"])) \
                and any(best[key] != v for key, v in t0.items()):
            out.append((f"T0.128.s{sp}", dict(best, **t0)))
    if n > 256 and t0_x < 0.97 and n % 64 == 0:
        # 128 x 64 tiles: twice the CTAs of 128 x 128 at the same split, fewer rows per CTA; the
        # largest 1/2/4 split that keeps one wave (<= 132 CTAs)
        sp = max((x for x in (1, 2, 4) if (n // 64) * x <= SMS and k % (64 * x) == 0), default=0)
        st = max_stages(128, 64)
        if sp and (sp == 1 or split_tile_fits(128, 64, st)):
            out.append((f"T0.128x64.s{sp}", dict(best, T0_BM=128, T0_BN=64, T0_ST=st, T0_SPLIT=sp)))
    if best["T1_MAXM"] < 1024:
        out.append(("t1k", dict(best, T1_MAXM=1024)))
        if talls:
            out.append(("t1k.tall", dict(best, T1_MAXM=1024, **talls[len(talls) // 2])))
        if n <= 256:  # 004/005: M = 289..952 on 8-16 unsplit CTAs (0.2-0.4x): 8-way splits, more CTAs
            for bm, bn in ((128, 128), (64, 128), (128, 64)):
                t1 = dict(T1_BM=bm, T1_BN=bn, T1_ST=max_stages(bm, bn), T1_SPLIT=8)
                if n % bn == 0 and k % (64 * 8) == 0 and split_tile_fits(bm, bn, t1["T1_ST"]) \
                        and any(best[key] != v for key, v in t1.items()):
                    out.append((f"t1k.{bm}x{bn}", dict(best, T1_MAXM=1024, **t1)))
    return out


def variants_t4(name: str, n: int, k: int) -> list[tuple[str, dict]]:
    """TMA producer (TMA=1: one thread issues 64 x 64 box loads from host-encoded tensor maps instead
    of a 128-thread cp.async warpgroup; the t3 run suggested the cp.async producer bounds tiers 0/1:
    tall 256-row tiles cost as much at M = 136 as at 256, zero-filled rows included), against the
    measured best (best/<problem>.json):
      base          best/ as it is (cp.async)
      tma           best/ with TMA=1; every variant below is tma with one tier changed
      tma.T0.<BM>x<BN>.s<S>  tier 0 (M 17..128) alternatives
      tma.T1.<BM>x<BN>.s<S>  tier 1 (M 129..T1_MAXM) alternatives, tall 256-row tiles included
      tma.T2.<name> tier 2 (large M): persistent / staged epilogue / raster alternatives
    The run times a variant only on the workloads where its code path differs from one already
    timed (run: same tier config = same kernel path; the row is copied, marked dup_of)."""
    from solforge.kernels.gemm_wgmma import CUDA_DIR, max_stages, split_tile_fits
    best = dict(json.loads((CUDA_DIR / "gemm_wgmma" / "best" / f"{name}.json").read_text())["params"])
    tma = dict(best, TMA=1)
    out = [("base", dict(best)), ("tma", tma)]

    def tier_cfg(i, bm, bn, sp):
        st = max_stages(bm, bn)
        if n % bn or k % (64 * sp) or k // 64 // sp < 2 or bm % sp or sp > 8:
            return None
        if bm == 256 and bn > 128:
            return None
        if sp > 1 and not (best["CSPLIT"] and split_tile_fits(bm, bn, st)):
            return None
        c = {f"T{i}_BM": bm, f"T{i}_BN": bn, f"T{i}_ST": st, f"T{i}_SPLIT": sp}
        return None if all(best[key] == v for key, v in c.items()) else c

    def add(prefix, i, shapes, cap):
        got = 0
        for bm, bn, sp in shapes:
            c = tier_cfg(i, bm, bn, sp)
            lab = f"tma.{prefix}.{bm}x{bn}.s{sp}"
            if c and got < cap and lab not in dict(out):
                out.append((lab, dict(tma, **c)))
                got += 1

    ntile = lambda bn: n // bn

    def around_wave(shapes, m_tiles_of):
        """Per tile shape the smallest cluster split with >= 0.45 waves of CTAs, and the next one
        while it stays within 1.1 waves (one wave of 1-CTA-per-SM blocks is the aim)."""
        out_ = []
        for bm, bn in shapes:
            if n % bn:
                continue
            mt = m_tiles_of(bm)
            for sp in (1, 2, 4, 8):
                if ntile(bn) * mt * sp >= 0.45 * SMS or sp == 8:
                    out_.append((bm, bn, sp))
                    if ntile(bn) * mt * sp * 2 <= 1.1 * SMS and sp < 8:
                        out_.append((bm, bn, sp * 2))
                    break
        return out_

    # tier 0: M 17..128 as one 128-row M-tile (or 64-row tiles: two M-tiles above 64)
    add("T0", 0, around_wave(((128, 128), (128, 64), (128, 256), (64, 128)), lambda bm: 128 // bm),
        6 if n > 256 else 3)
    # tier 1: M 129..T1_MAXM; tall tiles read each B tile once per split
    add("T1", 1, around_wave(((256, 128), (128, 256), (128, 128), (256, 64), (128, 64)), lambda bm: 256 // bm), 8)
    # tier 1 up to M = 1024 where best/ stops it at 256 (007/008/011 M = 972 ran tier 2)
    if best["T1_MAXM"] < 1024:
        for bm, bn, sp in around_wave(((256, 128), (128, 256), (128, 128)), lambda bm: 1024 // bm)[:4]:
            c = tier_cfg(1, bm, bn, sp) or {}
            lab = f"tma.T1x.{bm}x{bn}.s{sp}"
            if tier_cfg(1, bm, bn, sp) is not None or (bm, bn, sp) == (best["T1_BM"], best["T1_BN"], best["T1_SPLIT"]):
                out.append((lab, dict(tma, T1_MAXM=1024, **c)))
    # tier 2 (M > T1_MAXM): only where it serves real work (every problem has M > 1024 workloads)
    bn = 256 if n % 256 == 0 else 128
    st = max_stages(128, bn, 1)
    t2 = [("P", dict(T2_BM=128, T2_BN=bn, T2_ST=st, T2_CTAS=SMS, T2_EPI=1, T2_ORDER=0)),
          ("PS", dict(T2_BM=128, T2_BN=bn, T2_ST=st, T2_CTAS=SMS, T2_EPI=1, T2_ORDER=1)),
          ("E", dict(T2_BM=128, T2_BN=bn, T2_ST=st, T2_CTAS=0, T2_EPI=1, T2_GROUP=16)),
          ("Esw8", dict(T2_BM=128, T2_BN=bn, T2_ST=st, T2_CTAS=0, T2_EPI=1, T2_GROUP=8, T2_SWZ=1)),
          ("D", dict(T2_BM=128, T2_BN=bn, T2_ST=max_stages(128, bn), T2_CTAS=0, T2_EPI=0, T2_GROUP=16)),
          ("P128", dict(T2_BM=128, T2_BN=128, T2_ST=max_stages(128, 128, 1), T2_CTAS=SMS, T2_EPI=1)),
          ("PS128", dict(T2_BM=128, T2_BN=128, T2_ST=max_stages(128, 128, 1), T2_CTAS=SMS, T2_EPI=1, T2_ORDER=1))]
    if n <= 256:  # 004/005: few N tiles; 128 x 128 and 64-row tiles for more CTAs
        t2 = [("D128", dict(T2_BM=128, T2_BN=128, T2_ST=max_stages(128, 128), T2_CTAS=0, T2_EPI=0)),
              ("E128", dict(T2_BM=128, T2_BN=128, T2_ST=max_stages(128, 128, 1), T2_CTAS=0, T2_EPI=1)),
              ("P128", dict(T2_BM=128, T2_BN=128, T2_ST=max_stages(128, 128, 1), T2_CTAS=SMS, T2_EPI=1))]
    for lab, c in t2:
        v = dict(tma, **c)
        for key, d in (("T2_CTAS", 0), ("T2_EPI", 0), ("T2_ORDER", 0), ("T2_GROUP", 16), ("T2_SWZ", 0)):
            if v.get(key, d) == d:
                v.pop(key, None)   # the kernel's default: leave it out as best/ does
        if any(v.get(key) != tma.get(key) for key in set(v) | set(tma)):
            out.append((f"tma.T2.{lab}", v))
    return out


# ──────────────────────────────────────────── prepare (CPU) ──────────────────────────────────────
def _res_usage(cubin: Path) -> dict:
    from tests.unit.test_compile_arch import _wheel_bin  # the cuobjdump of the nvidia wheels
    txt = subprocess.run([str(_wheel_bin("cuobjdump")), "-res-usage", str(cubin)], capture_output=True,
                         text=True).stdout
    out = {}
    for key in ("REG", "STACK", "SHARED", "LOCAL"):
        i = txt.find(f"{key}:")
        if i >= 0:
            out[key.lower()] = int(txt[i + len(key) + 1:].split()[0])
    return out


def cmd_prepare(args) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from solforge.compile.api import compile_candidate, stage
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    fam = get_family("gemm_wgmma")
    out = Path(args.dir)
    if out.exists() and not args.keep:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs, plan = [], []
    only = args.problems.split(",") if args.problems else PROBLEMS
    for name in PROBLEMS:
        if not any(o in name for o in only):
            continue
        pdir = Path(args.shared) / "sol_execbench" / "FlashInfer-Bench" / name
        problem = load_problem_dir(pdir)
        n, k = problem.definition.const_axes["N"], problem.definition.const_axes["K"]
        pd = out / name / "problem"
        pd.mkdir(parents=True, exist_ok=True)
        for f in ("definition.json", "workload.jsonl", "reference.py"):
            shutil.copy(pdir / f, pd / f)
        entry = {"problem": name, "n": n, "k": k, "variants": []}
        vs = (variants_final(name, n, k) if args.final else variants_t2(name, n, k) if args.t2
              else variants_t3(name, n, k) if args.t3 else variants_t4(name, n, k) if args.t4
              else variants_for(n, k))
        for i, (label, params) in enumerate(vs):
            cand = fam.instantiate(problem, params)
            entry["variants"].append({"id": f"v{i}", "label": label, "params": params, "dir": f"{name}/v{i}"})
            jobs.append((cand, out / name / f"v{i}", entry["variants"][-1]))
        plan.append(entry)

    def build(job):
        cand, vdir, v = job
        old = vdir / "candidate.json"
        if args.keep and old.exists() and json.loads(old.read_text()).get("params") == cand.params:
            v["res"] = _res_usage(next(vdir.glob("*.cubin")))  # staged by an earlier prepare
            return None
        res = compile_candidate(cand)
        if not res.ok:
            return f"{vdir}: {res.status.value}: {res.log[-1500:]}"
        vdir.mkdir(parents=True, exist_ok=True)
        stage(cand, res, vdir)
        v["res"] = _res_usage(next(vdir.glob("*.cubin")))
        return None

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        errors = [e for e in ex.map(build, jobs) if e]
    for e in plan:  # a variant that spills or failed to build is not run
        keep = []
        for v in e["variants"]:
            r = v.get("res")
            if r is None or r.get("local", 0) or r.get("stack", 0):
                print(f"drop {e['problem']} {v['id']} {v['label']}: {r}")
                shutil.rmtree(out / v["dir"], ignore_errors=True)
                continue
            keep.append(v)
        e["variants"] = keep
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    (out / "plan.json").write_text(json.dumps({"commit": commit, "problems": plan}, indent=1))
    n_var = sum(len(e["variants"]) for e in plan)
    print(f"staged {n_var} variants of {len(plan)} problems in {time.time() - t0:.0f}s -> {out}")
    for e in errors:
        print("COMPILE FAILED", e)


def cmd_add(args) -> None:
    """Compile more variants into an existing --dir and append them to its plan: the labels of
    variants_for() (--labels, comma-separated) or params given as JSON (--params FILE:
    {problem: [[label, params], ...]})."""
    from solforge.compile.api import compile_candidate, stage
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    fam = get_family("gemm_wgmma")
    base = Path(args.dir)
    plan = json.loads((base / "plan.json").read_text())
    extra = json.loads(Path(args.params).read_text()) if args.params else {}
    labels = set(args.labels.split(",")) if args.labels else set()
    jobs = []
    for entry in plan["problems"]:
        name = entry["problem"]
        if args.problems and not any(o in name for o in args.problems.split(",")):
            continue
        problem = load_problem_dir(base / name / "problem")
        have = {v["label"] for v in entry["variants"]}
        todo = [(lab, p) for lab, p in variants_for(entry["n"], entry["k"], full=True)
                if (lab in labels or "all" in labels) and lab not in have]
        todo += [tuple(x) for x in extra.get(name, [])]
        used = {int(v["id"][1:]) for v in entry["variants"]}
        for lab, params in todo:
            i = max(used | {-1}) + 1
            used.add(i)
            jobs.append((entry, name, lab, params, fam.instantiate(problem, params), base / name / f"v{i}", i))

    def build(job):
        entry, name, lab, params, cand, vdir, i = job
        res = compile_candidate(cand)
        if not res.ok:
            return f"COMPILE FAILED {name} {lab}: {res.log[-1500:]}"
        shutil.rmtree(vdir, ignore_errors=True)
        vdir.mkdir(parents=True)
        stage(cand, res, vdir)
        r = _res_usage(next(vdir.glob("*.cubin")))
        if r.get("local", 0) or r.get("stack", 0):
            shutil.rmtree(vdir)
            return f"drop {name} {lab}: {r}"
        entry["variants"].append({"id": f"v{i}", "label": lab, "params": params, "dir": f"{name}/v{i}", "res": r})
        return f"added {name} v{i} {lab} {r}"

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for msg in ex.map(build, jobs):
            print(msg, flush=True)
    (base / "plan.json").write_text(json.dumps(plan, indent=1))


# ──────────────────────────────────────────── run (GPU) ──────────────────────────────────────────
OPTIONAL_DEFAULTS = {"T2_CTAS": 0, "T2_GROUP": 16, "T2_EPI": 0, "T2_ORDER": 0, "MSKIP": 0, "TMA": 0,
                     "T2_SWZ": 0}   # the kernel's defaults of the optional params (gemm_wgmma.T2_OPTIONAL)


def path_key(p: dict, m: int) -> tuple:
    """What decides the code a candidate runs at this M: the tier the kernel picks (its order of
    tests) and that tier's config, plus the switches that tier reads. Two variants with the same
    key at M run the same kernel path there (only timing noise between them)."""
    g = lambda key: p.get(key, OPTIONAL_DEFAULTS.get(key))
    ts0 = g("TS0_MAXM") or 0
    ts1 = g("TS1_MAXM") if g("TS1_MAXM") is not None else ts0
    if m <= ts0 or m <= ts1:
        rng = "S0" if m <= ts0 else "S1"
        return (rng, tuple(g(key) for key in RANGE_KEYS[rng]), g("EVF"))
    rng = "T0" if m <= p["T0_MAXM"] else "T1" if m <= p["T1_MAXM"] else "T2"
    return (rng, tuple(g(key) for key in RANGE_KEYS[rng]), g("CSPLIT"), g("EVF"), g("MSKIP"), g("TMA"))


def dup_map(variants: list[dict], m: int) -> dict:
    """{variant id: id of an earlier variant with the same code path at this M}."""
    seen, out = {}, {}
    for v in variants:
        key = path_key(v["params"], m)
        if key in seen:
            out[v["id"]] = seen[key]
        else:
            seen[key] = v["id"]
    return out


def cmd_run(args) -> None:
    import torch

    from solforge.compile.launcher import load_stage
    from solforge.evaluate.correctness import compare
    from solforge.evaluate.inputs import InputFactory
    from solforge.evaluate.timing import Timer, _gpu_events, _split_calls
    from solforge.problem.loader import load_problem_dir

    base = Path(args.dir)
    plan = json.loads((base / "plan.json").read_text())
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    rows_f = open(outdir / "rows.jsonl", "a" if args.append else "w")
    excluded = set(filter(None, args.exclude.split(",")))
    # a variant label that left a sticky error (a trap: the watchdog of a lost mbarrier phase) is
    # excluded from the problems after it too: the same code path, and each restart costs seconds
    label_of = {(e["problem"], v["id"]): v["label"] for e in plan["problems"] for v in e["variants"]}
    # a sticky error in a TMA variant excludes every TMA variant after it ("TMA=1"): the same producer
    tma_of = {(e["problem"], v["id"]): v["params"].get("TMA", 0) for e in plan["problems"] for v in e["variants"]}
    timer = Timer(method="cupti")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": plan["commit"],
           "reps": args.reps}
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(5):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    env["copy_tb_s"] = 2 * a.numel() * 5 / (s.elapsed_time(e) * 1e-3) / 1e12
    del a, b
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem",
                                        "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    if not args.append:
        (outdir / "env.json").write_text(json.dumps(env, indent=1))
    print(f"{env['gpu']} {env.get('driver')} copy {env['copy_tb_s']:.2f} TB/s", flush=True)
    from torch.profiler import ProfilerActivity, profile

    def marker_and_flush():
        torch.cuda._sleep(1)
        timer.flush()

    t_start = time.time()
    only = args.problems.split(",") if args.problems else None
    todo = [e["problem"] for e in plan["problems"] if not only or any(o in e["problem"] for o in only)]

    def restart_without(name: str, vid: str) -> None:
        """A variant left a sticky CUDA error (a trap, a bad address): this process's context is
        lost. Start again from this problem in a fresh process, without that variant."""
        rows_f.close()
        left = todo[todo.index(name):]
        argv = [sys.executable, str(Path(__file__).resolve()), "run", "--dir", str(base), "--out", str(outdir),
                "--reps", str(args.reps), "--m-min", str(args.m_min), "--m-max", str(args.m_max), "--m-list", args.m_list, "--labels", args.labels, "--time-limit", str(max(args.time_limit - (time.time() - t_start), 5)),
                "--problems", ",".join(left), "--append",
                "--exclude", ",".join(excluded | {f"{name}/{vid}", f"*/{label_of[(name, vid)]}"}
                                      | ({"TMA=1"} if tma_of[(name, vid)] else set()))] \
            + (["--no-dedupe"] if args.no_dedupe else [])
        print(f"STICKY CUDA ERROR in {name} {vid}: restarting without it", flush=True)
        os.execv(sys.executable, argv)

    for entry in plan["problems"]:
        name = entry["problem"]
        if only and not any(o in name for o in only):
            continue
        if time.time() - t_start > args.time_limit:
            print(f"time limit: skipping {name}", flush=True)
            continue
        problem = load_problem_dir(base / name / "problem")
        ns: dict = {}
        exec(compile(problem.definition.reference, f"<reference {name}>", "exec"), ns)
        ref = ns["run"]
        rts = {}
        # --labels: the other variants are not run and leave no rows (an earlier pass's rows of
        # them stay the last ones in rows.jsonl)
        wanted = [v for v in entry["variants"] if not args.labels or v["label"] in args.labels.split(",")]
        for v in wanted:
            if f"{name}/{v['id']}" in excluded or f"*/{v['label']}" in excluded \
                    or ("TMA=1" in excluded and v["params"].get("TMA", 0)):
                print(f"{name} {v['id']} {v['label']}: excluded (a sticky error earlier)", flush=True)
                continue
            try:
                rts[v["id"]] = load_stage(base / v["dir"])
            except Exception as ex:  # noqa: BLE001
                print(f"{name} {v['id']}: load failed: {ex}", flush=True)
        m_list = {int(x) for x in args.m_list.split(",") if x}
        wls = sorted((w for w in problem.workloads if args.m_min <= w.axes["M"] <= args.m_max
                      and (not m_list or w.axes["M"] in m_list)), key=lambda w: w.axes["M"])
        for rw in wls:
            m = rw.axes["M"]
            sets = [InputFactory(rw, "cuda").make(r) for r in range(2)]
            refs = [ref(**x) for x in sets]
            cs = [torch.empty_like(r) for r in refs]
            plans, status = {}, {}
            # a variant whose code path at this M is one already in the list is not run: its row
            # copies that variant's (dup_of); --no-dedupe runs everything
            dups = {} if args.no_dedupe else {d: r for d, r in dup_map(wanted, m).items() if r in rts}
            for vid, rt in rts.items():
                if vid in dups:
                    continue
                try:
                    plans[vid] = [rt.prepare({"A": x["A"], "B": x["B"], "C": c}, dict(rw.axes), {})
                                  for x, c in zip(sets, cs)]
                    ok, why, err = True, "", 0.0
                    for j in range(2):
                        cs[j].fill_(float("nan"))
                        plans[vid][j].run()
                        torch.cuda.synchronize()
                        cmp = compare(cs[j], refs[j], rw.workload.tolerance, "C")
                        ok, why = ok and cmp.ok, why or cmp.reason
                        err = max(err, cmp.max_abs_err or 0.0)
                    status[vid] = (ok, why, err)
                except Exception as ex:  # noqa: BLE001
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001
                        restart_without(name, vid)
                    status[vid] = (False, f"{type(ex).__name__}: {ex}"[:300], None)
            fns = [("torch", lambda i: ref(**sets[i % 2]))]
            fns += [(vid, (lambda p: (lambda i: p[i % 2].run()))(plans[vid])) for vid in rts
                    if vid in status and status[vid][0]]
            reps = args.reps
            samples = {f: [] for f, _ in fns}
            kpc = {f: 0.0 for f, _ in fns}
            for f, fn in fns:  # warm-up (module load, cuBLAS heuristics)
                fn(0)
                fn(1)
            torch.cuda.synchronize()
            try:
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for r in range(reps):
                        for f, fn in fns:
                            marker_and_flush()
                            torch.cuda.synchronize()
                            fn(r)
                            torch.cuda.synchronize()
                    marker_and_flush()
                    torch.cuda.synchronize()
                tim = _split_calls(_gpu_events(prof), reps * len(fns))
                for c, t in enumerate(tim.samples_ms):
                    samples[fns[c % len(fns)][0]].append(t)
                method = "cupti"
            except Exception as ex:  # noqa: BLE001
                print(f"cupti failed ({ex}); events", flush=True)
                method = "events"
                for r in range(reps):
                    for f, fn in fns:
                        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        marker_and_flush()
                        torch.cuda.synchronize()
                        st.record()
                        fn(r)
                        en.record()
                        torch.cuda.synchronize()
                        samples[f].append(st.elapsed_time(en))
            med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None
            row_t = {"problem": name, "M": m, "uuid": rw.uuid, "variant": "torch", "label": "torch",
                     "ok": True, "t_ms": med(samples["torch"]), "samples": samples["torch"], "method": method}
            rows_f.write(json.dumps(row_t) + "\n")
            for v in wanted:
                vid = v["id"]
                src = dups.get(vid, vid)
                ok, why, err = status.get(src, (False, "not loaded", None))
                row = {"problem": name, "M": m, "uuid": rw.uuid, "variant": vid,
                       "label": v["label"], "ok": ok, "reason": why, "max_abs_err": err,
                       "t_ms": med(samples.get(src, [])), "samples": samples.get(src, []),
                       "method": method}
                if src != vid:
                    row["dup_of"] = src
                rows_f.write(json.dumps(row) + "\n")
            rows_f.flush()
            best = min((med(samples[f]), f) for f, _ in fns[1:]) if len(fns) > 1 else (None, "-")
            bad = [v["label"] for v in wanted if not status.get(dups.get(v["id"], v["id"]), (False,))[0]]
            print(f"{name[:20]} M={m:6d} torch {row_t['t_ms'] * 1e3:8.1f} us  best {best[1]} "
                  f"{(best[0] or 0) * 1e3:8.1f} us  x{(row_t['t_ms'] / best[0]) if best[0] else 0:5.2f}"
                  f"{'  FAIL ' + ','.join(bad[:6]) + ' ' + str(status.get(next(dups.get(v['id'], v['id']) for v in entry['variants'] if v['label'] == bad[0]), (0, 'not loaded'))[1])[:120] if bad else ''}",
                  flush=True)
            del sets, refs, cs, plans
        for rt in rts.values():
            rt.close()
        torch.cuda.empty_cache()
    rows_f.close()
    print(f"done in {time.time() - t_start:.0f}s", flush=True)
    (outdir / "table.txt").write_text(report_text(outdir / "rows.jsonl", base / "plan.json"))
    print((outdir / "table.txt").read_text())


# ──────────────────────────────────────────── report (CPU) ───────────────────────────────────────
def _gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


T1X_MAXM = 1024   # tier 1 up to this M (variants_t3's t1k*): report's T1x plans
RANGE_KEYS = {"S0": [f"TS0_{k}" for k in ("MT", "RT", "WR", "WK", "KJ", "CL")],
              "S1": [f"TS1_{k}" for k in ("MT", "RT", "WR", "WK", "KJ", "CL")],
              "T0": [f"T0_{k}" for k in ("BM", "BN", "ST", "SPLIT")],
              "T1": [f"T1_{k}" for k in ("BM", "BN", "ST", "SPLIT")],
              "T2": [f"T2_{k}" for k in ("BM", "BN", "ST", "SPLIT", "CTAS", "GROUP", "EPI", "ORDER", "SWZ")]}


def base_ranges(base: dict) -> list[tuple[str, int, int]]:
    """The M range each tier serves in the base candidate (its own MAXM bounds, not the nominal
    RANGES): with the skinny S1 tier off (TS1_MAXM = TS0_MAXM) tier 0 serves 17..128, and a
    variant's T0 config must be scored there, where the combined candidate will run it."""
    b0 = base.get("TS0_MAXM", 0)
    b1 = base.get("TS1_MAXM", b0)
    return [("S0", 0, b0), ("S1", b0, b1), ("T0", b1, base["T0_MAXM"]),
            ("T1", base["T0_MAXM"], base["T1_MAXM"]), ("T2", base["T1_MAXM"], 1 << 30)]


def _differs_only(params: dict, base: dict, keys) -> bool:
    return all(params.get(k) == base.get(k) for k in set(base) | set(params) if k not in keys)


def analyse(rows: list[dict], plan: dict) -> dict:
    """Per problem the best realizable candidate: every M-range's config taken from the variant that
    is fastest there (geomean) among the variants that differ from the base only in that range's
    params, so each workload's time is one measured with exactly the code path it gets. Choices
    that couple ranges are enumerated: CSPLIT (T0 and T1 together) and wgmma instead of the skinny
    tier for M = 17..64 (S1wg: T0's config then serves 17..128)."""
    out = {}
    for entry in plan["problems"]:
        name = entry["problem"]
        rs = [r for r in rows if r["problem"] == name]
        if not rs:
            continue
        torch_t = {r["M"]: r["t_ms"] for r in rs if r["variant"] == "torch"}
        by_v: dict = {}
        for r in rs:
            if r["variant"] != "torch":
                by_v.setdefault(r["variant"], {})[r["M"]] = r
        var = {v["id"]: v for v in entry["variants"] if v["id"] in by_v}
        base = next(v for v in entry["variants"] if v["label"] == "base")["params"]
        ms = sorted(torch_t)
        in_rng = {rng: [m for m in ms if lo < m <= hi] for rng, lo, hi in base_ranges(base)}

        def score(vid, mlist):  # geomean speedup of a variant over workloads; None if any failed
            d = by_v.get(vid, {})
            if not mlist or not all(d.get(m, {}).get("ok") and d[m].get("t_ms") for m in mlist):
                return None
            return _gm([torch_t[m] / d[m]["t_ms"] for m in mlist])

        def best(rng, keys, extra_ok=lambda p: True, ref=base):
            c = [(score(vid, in_rng[rng]), vid) for vid, v in var.items()
                 if _differs_only(v["params"], ref, keys) and extra_ok(v["params"])]
            c = [x for x in c if x[0] is not None]
            return max(c) if c else None

        choice = {}
        for rng in ("S0", "T2"):
            if in_rng[rng]:
                choice[rng] = best(rng, RANGE_KEYS[rng])
        # T1x: tier 1 up to M = T1X_MAXM (a variant whose T1_MAXM says so) serves 129..T1X_MAXM and
        # tier 2 only the M above: its winner is scored there alone
        in_rng["T1x"] = [m for m in ms if base["T0_MAXM"] < m <= T1X_MAXM]
        in_rng["T2x"] = [m for m in ms if m > T1X_MAXM]
        if in_rng["T2x"]:
            choice["T2x"] = best("T2x", RANGE_KEYS["T2"])
        plans = []
        for cs in (1, 0):
            ref = dict(base, CSPLIT=cs)
            cs_keys = RANGE_KEYS["T0"] + RANGE_KEYS["T1"] + ["CSPLIT"]
            t0 = best("T0", cs_keys, lambda p: p["CSPLIT"] == cs, ref) if in_rng["T0"] else None
            t1 = best("T1", cs_keys, lambda p: p["CSPLIT"] == cs, ref) if in_rng["T1"] else None
            s1 = best("S1", RANGE_KEYS["S1"]) if in_rng["S1"] else None
            plans.append({"CSPLIT": cs, "S1": s1, "T0": t0, "T1": t1, "S1wg": None})
            for vid, v in var.items():
                if v["params"].get("T1_MAXM") == T1X_MAXM != base.get("T1_MAXM") and v["params"]["CSPLIT"] == cs \
                        and _differs_only(v["params"], ref, RANGE_KEYS["T1"] + ["T1_MAXM"]):
                    plans.append({"CSPLIT": cs, "S1": s1, "T0": t0, "T1": (score(vid, in_rng["T1x"]), vid),
                                  "S1wg": None, "T1x": vid})
            if cs == 1:
                for vid, v in var.items():
                    if v["label"].startswith("S1wg"):
                        plans.append({"CSPLIT": 1, "S1": (score(vid, in_rng["S1"]), vid),
                                      "T0": (score(vid, in_rng["T0"]), vid), "T1": t1, "S1wg": vid})
        def ranges_of(pl):  # the M ranges a plan's tiers 1 and 2 serve
            return ("T1x", "T2x") if pl.get("T1x") else ("T1", "T2")

        def plan_score(pl):
            sp = []
            r1, r2 = ranges_of(pl)
            for rng, key in (("S0", "S0"), (r2, r2)):
                if in_rng[rng]:
                    if not choice.get(rng):
                        return None
                    sp += [choice[rng][0]] * len(in_rng[rng])
            for rng, key in (("S1", "S1"), ("T0", "T0"), (r1, "T1")):
                if in_rng[rng]:
                    if not pl[key] or pl[key][0] is None:
                        return None
                    sp += [pl[key][0]] * len(in_rng[rng])
            return _gm(sp)
        scored = [(plan_score(pl), i) for i, pl in enumerate(plans)]
        scored = [x for x in scored if x[0] is not None]
        if not scored:
            out[name] = None
            continue
        pl = plans[max(scored)[1]]
        params = dict(base, CSPLIT=pl["CSPLIT"])
        r1, r2 = ranges_of(pl)
        picked = {rng: choice[rng][1] for rng in ("S0", r2) if choice.get(rng)}
        picked.update({rng: pl[key][1] for rng, key in (("S1", "S1"), ("T0", "T0"), (r1, "T1")) if pl[key]})
        for rng, vid in picked.items():
            src = var[vid]["params"]
            keys = RANGE_KEYS[rng[:2]] + (["TS1_MAXM"] + RANGE_KEYS["T0"] if pl["S1wg"] == vid else []) \
                + (["T1_MAXM"] if rng == "T1x" else [])
            for k in keys:  # the optional keys (T2_CTAS, ...) absent: the kernel's defaults
                if k in src:
                    params[k] = src[k]
                else:
                    params.pop(k, None)
        speed, used = {}, {}
        for rng, vid in picked.items():
            for m in in_rng[rng]:
                d = by_v[vid][m]
                speed[m], used[m] = torch_t[m] / d["t_ms"], d
        single = [(score(vid, ms), v["label"]) for vid, v in var.items()]
        single = [x for x in single if x[0] is not None]
        evf0 = next((vid for vid, v in var.items() if v["label"] == "EVF0"), None)
        base_id = next(vid for vid, v in var.items() if v["label"] == "base")
        evf_ratio = None
        if evf0:
            both = [m for m in ms if by_v[evf0].get(m, {}).get("ok") and by_v[base_id].get(m, {}).get("ok")]
            evf_ratio = _gm([by_v[evf0][m]["t_ms"] / by_v[base_id][m]["t_ms"] for m in both]) if both else None
        out[name] = {"win": {rng: (var[vid]["label"], _gm([speed[m] for m in in_rng[rng]]))
                             for rng, vid in picked.items()},
                     "params": params, "speedup": speed, "torch_ms": torch_t, "rows": used,
                     "best_single": max(single, default=(float("nan"), "-")),
                     "evf0_over_base_time": evf_ratio,
                     "fails": sorted({var[r["variant"]]["label"] for r in rs
                                      if r["variant"] in var and not r.get("ok")})}
    return out


def analyse_grouped(rows: list[dict], plan: dict) -> dict:
    """analyse() per producer when the plan has a "tma" variant (variants_t4): TMA is a switch of
    every wgmma tier, so the cp.async variants (base) and the TMA ones (tma as their base) are two
    realizable families; per problem the one with the higher geomean over all M wins."""
    if not any(v["label"] == "tma" for e in plan["problems"] for v in e["variants"]):
        return analyse(rows, plan)
    groups = []
    for flag in (0, 1):
        probs = []
        for e in plan["problems"]:
            vs = []
            for v in e["variants"]:
                if v["params"].get("TMA", 0) != flag:
                    continue
                lab = "base" if v["label"] == ("tma" if flag else "base") else v["label"]
                vs.append(dict(v, label=lab))
            if any(v["label"] == "base" for v in vs):
                probs.append(dict(e, variants=vs))
        ids = {(e["problem"], v["id"]) for e in probs for v in e["variants"]}
        groups.append(analyse([r for r in rows if r["variant"] == "torch" or (r["problem"], r["variant"]) in ids],
                              dict(plan, problems=probs)))
    out = {}
    for e in plan["problems"]:
        name = e["problem"]
        cands = [g.get(name) for g in groups if g.get(name)]
        if not cands:
            if any(name in g for g in groups):  # rows, but no realizable candidate
                out[name] = None
            continue
        out[name] = max(cands, key=lambda r: (len(r["speedup"]), _gm(list(r["speedup"].values()))))
    return out


def oracle(rows: list[dict]) -> dict:
    """{problem: {M: best x over every correct variant}}: the best variant per workload (an upper
    bound, not one candidate)."""
    torch_t = {(r["problem"], r["M"]): r["t_ms"] for r in rows if r["variant"] == "torch"}
    out: dict = {}
    for r in rows:
        if r["variant"] == "torch" or not r.get("ok") or not r.get("t_ms"):
            continue
        t = torch_t.get((r["problem"], r["M"]))
        if t:
            d = out.setdefault(r["problem"], {})
            d[r["M"]] = max(d.get(r["M"], 0.0), t / r["t_ms"])
    return out


def load_rows(rows_path: Path) -> list[dict]:
    """Rows, the last one per (problem, M, variant) (a restarted problem writes its rows again)."""
    rows = {}
    for line in rows_path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[(r["problem"], r["M"], r["variant"])] = r
    return list(rows.values())


def variant_table(rows: list[dict]) -> str:
    """Side by side per workload: torch time and x = torch / variant for every variant label
    (FAIL: wrong result or not run), then the geomean x per variant over each problem's rows."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["problem"], r["M"]), {})[r["label"]] = r
    labels = list(dict.fromkeys(r["label"] for r in rows if r["label"] != "torch"))
    lines = [f"{'problem':24s} {'M':>6s} {'torch_us':>9s} " + " ".join(f"{lab:>8s}" for lab in labels)]
    per: dict = {}
    for (name, m), d in sorted(by.items()):
        t = d.get("torch", {}).get("t_ms")
        cells = []
        for lab in labels:
            r = d.get(lab)
            x = t / r["t_ms"] if t and r and r.get("ok") and r.get("t_ms") else None
            per.setdefault(name, {}).setdefault(lab, []).append(x)
            cells.append(f"{x:8.3f}" if x else f"{'FAIL' if r else '-':>8s}")
        lines.append(f"{name[:24]:24s} {m:6d} {(t or 0) * 1e3:9.1f} " + " ".join(cells))
    lines.append("geomean x per variant (over the rows above; FAIL rows count as missing):")
    for name, d in per.items():
        lines.append(f"{name[:24]:24s} {'':6s} {'':9s} " + " ".join(f"{_gm(d.get(lab, [])):8.3f}" for lab in labels))
    lines.append("geomean x per variant and M range (M_lo..M_hi, rows):")
    for lo, hi in ((1, 16), (17, 64), (65, 128), (129, 256), (257, 1024), (1025, 1 << 30)):
        for name in per:
            xs = {lab: [] for lab in labels}
            for (nm, m), d in sorted(by.items()):
                if nm != name or not lo <= m <= hi:
                    continue
                t = d.get("torch", {}).get("t_ms")
                for lab in labels:
                    r = d.get(lab)
                    xs[lab].append(t / r["t_ms"] if t and r and r.get("ok") and r.get("t_ms") else None)
            n_rows = len(next(iter(xs.values()), []))
            if n_rows:
                lines.append(f"{name[:24]:24s} {lo:>6d} {min(hi, 99999):>5d}:{n_rows:<3d} "
                             + " ".join(f"{_gm(xs[lab]):8.3f}" for lab in labels))
    return "\n".join(lines) + "\n"


def report_text(rows_path: Path, plan_path: Path) -> str:
    rows = load_rows(rows_path)
    plan = json.loads(plan_path.read_text())
    side = variant_table(rows)
    try:
        res = analyse_grouped(rows, plan)
    except Exception as ex:  # noqa: BLE001  (a partial run: the side-by-side table still helps)
        return side + f"\n(per-range analysis failed: {type(ex).__name__}: {ex})\n"
    lines = [f"{'problem':24s} {'n':>3s} {'all_M':>6s} {'M<=64':>6s} {'best1':>6s}  per-range winner (geomean x)"]
    alls, smalls = [], []
    for name, r in res.items():
        if r is None:
            lines.append(f"{name[:24]:24s} no realizable candidate")
            continue
        sp = r["speedup"]
        g_all = _gm(list(sp.values()))
        g_small = _gm([x for m, x in sp.items() if m <= SMALL_M])
        alls.append(g_all)
        smalls.append(g_small)
        wins = " ".join(f"{k}:{lab}={g:.2f}" for k, (lab, g) in r["win"].items())
        lines.append(f"{name[:24]:24s} {len(sp):3d} {g_all:6.3f} {g_small:6.3f} {r['best_single'][0]:6.3f}  {wins}"
                     + (f"  EVF0/base time {r['evf0_over_base_time']:.3f}" if r["evf0_over_base_time"] else "")
                     + (f"  FAILS {r['fails']}" if r["fails"] else ""))
    lines.append(f"{'geomean over problems':24s} {'':3s} {_gm(alls):6.3f} {_gm(smalls):6.3f}")
    orc = oracle(rows)
    if orc:
        lines.append("best variant per workload (an upper bound: not one candidate):")
        oa, osm = [], []
        for name, d in orc.items():
            ga, gs = _gm(list(d.values())), _gm([x for m, x in d.items() if m <= SMALL_M])
            oa.append(ga)
            osm.append(gs)
            lines.append(f"{name[:24]:24s} {len(d):3d} {ga:6.3f} {gs:6.3f}")
        lines.append(f"{'geomean over problems':24s} {'':3s} {_gm(oa):6.3f} {_gm(osm):6.3f}")
    lines.append("")
    lines.append(f"{'problem':24s} {'M':>6s} {'torch_us':>9s} {'ours_us':>9s} {'x':>6s}")
    for name, r in res.items():
        if r is None:
            continue
        for m in sorted(r["speedup"]):
            t = r["torch_ms"][m]
            x = r["speedup"][m]
            lines.append(f"{name[:24]:24s} {m:6d} {t * 1e3:9.1f} {t / x * 1e3 if x else float('nan'):9.1f} {x or 0:6.2f}")
    return side + "\n" + "\n".join(lines) + "\n"


def _workload_entry(problem, m: int, t_base: float, row: dict) -> dict:
    n, k = problem.definition.const_axes["N"], problem.definition.const_axes["K"]
    nbytes, flops = 2.0 * (m * k + n * k + m * n), 2.0 * m * n * k
    t_sol = max(nbytes / 4.8e12, flops / 989e12) * 1e3   # H200 datasheet ceilings, as bench_kernels
    tk = row["t_ms"]
    wi = next(i for i, w in enumerate(problem.workloads) if w.uuid == row["uuid"])
    return {"workload": wi, "uuid": row["uuid"], "axes": {"N": n, "K": k, "M": m}, "axes_str": f"M={m}",
            "t_kernel_ms": tk, "t_eager_ms": t_base, "t_compile_ms": None, "t_base_ms": t_base,
            "speedup": t_base / tk, "t_sol_ms": t_sol,
            "sol_score": 1.0 / (1.0 + (tk - t_sol) / (t_base - t_sol)) if t_base > t_sol else None,
            "bytes": nbytes, "flops": flops, "achieved_tb_s": nbytes / (tk * 1e-3) / 1e12,
            "max_abs_err": row.get("max_abs_err"), "variant": row["label"]}


def write_combined(rows: list[dict], plan: dict, path: Path) -> None:
    """Per problem the realizable combination's params (analyse) and the MSKIP choice from base0
    (MSKIP=0) against base (MSKIP=1), both timed on every workload: the geomean over all M decides
    (t2 run: MSKIP=1 halved tier 0's MMA at M <= 64 on 128-row tiles, 007/011, but cost 2-5% on
    004/005/006). variants_t3 starts from these params."""
    res = analyse_grouped(rows, plan)
    out = {}
    for entry in plan["problems"]:
        name = entry["problem"]
        r = res.get(name)
        if r is None:
            continue
        torch_t = {x["M"]: x["t_ms"] for x in rows if x["problem"] == name and x["variant"] == "torch"}
        gm = {}
        for v in entry["variants"]:
            if v["label"] in ("base0", "base"):
                xs = [torch_t[x["M"]] / x["t_ms"] for x in rows if x["problem"] == name
                      and x["variant"] == v["id"] and x.get("ok") and x.get("t_ms")]
                gm[v["label"]] = _gm(xs) if len(xs) == len(torch_t) else None
        params = dict(r["params"])
        if gm.get("base0") and gm.get("base"):
            params["MSKIP"] = int(gm["base"] > gm["base0"])
        out[name] = {"params": params, "win": r["win"], "geomean_combined": _gm(list(r["speedup"].values())),
                     "geomean_base0_mskip0": gm.get("base0"), "geomean_base_mskip1": gm.get("base")}
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


def cmd_report(args) -> None:
    rows_path, plan_path = Path(args.rows), Path(args.plan)
    text = report_text(rows_path, plan_path)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.combined_out:
        write_combined(load_rows(rows_path), json.loads(plan_path.read_text()), Path(args.combined_out))
    if args.best:
        from solforge.kernels import get_family
        from solforge.problem.loader import load_problem_dir
        rows = load_rows(rows_path)
        plan = json.loads(plan_path.read_text())
        env_path = Path(args.env) if args.env else rows_path.parent / "env.json"
        env = json.loads(env_path.read_text()) if env_path.exists() else {}
        fam = get_family("gemm_wgmma")
        bdir = fam.family_dir / "best"
        bdir.mkdir(parents=True, exist_ok=True)
        for name, r in analyse_grouped(rows, plan).items():
            if r is None:
                continue
            problem = load_problem_dir(Path(args.shared) / "sol_execbench" / "FlashInfer-Bench" / name)
            cand = fam.instantiate(problem, r["params"])
            sp = r["speedup"]
            (bdir / f"{name}.json").write_text(json.dumps({
                "problem": name, "subset": "FlashInfer-Bench", "family": fam.name,
                "variant": "combined per-range winners", "params": r["params"],
                "geomean_speedup": _gm(list(sp.values())),
                "geomean_speedup_small_m": _gm([x for m, x in sp.items() if m <= SMALL_M]),
                "per_range_winner": r["win"], "gpu": env.get("gpu"), "driver": env.get("driver"),
                "torch": env.get("torch"), "commit": env.get("commit"), "copy_tb_s": env.get("copy_tb_s"),
                "timing": "CUPTI kernel spans (solforge.evaluate.timing), L2 flushed + sync before each "
                          "call, 2 input sets alternated, median; scripts/bench_gemm.py",
                "baseline": "the reference (torch.matmul(A, B.T), cuBLAS), timed the same way, interleaved",
                "overall_best": True,
                "workloads": [_workload_entry(problem, m, r["torch_ms"][m], r["rows"][m]) for m in sorted(sp)],
                "candidate": cand.model_dump()}, indent=1))
        print(f"wrote {bdir}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dir", default=str(REPO / ".carry" / "gemm"))
    p.add_argument("--shared", default=str(REPO.parent / "shared"))
    p.add_argument("--problems", default="")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--keep", action="store_true", help="reuse stages of the same params in --dir")
    p.add_argument("--t2", action="store_true", help="the large-M tier reworked (variants_t2)")
    p.add_argument("--t3", action="store_true", help="tier 1 on tall 256-row tiles, tier 1 up to M = 1024 "
                   "(variants_t3)")
    p.add_argument("--t4", action="store_true", help="the TMA producer and per-tier alternatives on it "
                   "(variants_t4)")
    p.add_argument("--final", action="store_true", help="the measured best per problem (best/) and "
                   "split-K up to M = 1024 for N <= 256, instead of the sweep")
    a = sub.add_parser("add")
    a.add_argument("--dir", default=str(REPO / ".carry" / "gemm"))
    a.add_argument("--problems", default="")
    a.add_argument("--labels", default="")
    a.add_argument("--params", default="")
    a.add_argument("--jobs", type=int, default=3)
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "gemm"))
    r.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    r.add_argument("--problems", default="")
    r.add_argument("--reps", type=int, default=10)
    r.add_argument("--m-min", type=int, default=0, help="only workloads with M >= this")
    r.add_argument("--m-max", type=int, default=1 << 30, help="only workloads with M <= this")
    r.add_argument("--labels", default="", help="only the variants with these labels (comma-separated)")
    r.add_argument("--m-list", default="", help="only workloads with these M (comma-separated)")
    r.add_argument("--time-limit", type=float, default=300.0)
    r.add_argument("--exclude", default="", help="problem/vid,... not run (set by a restart)")
    r.add_argument("--append", action="store_true")
    r.add_argument("--no-dedupe", action="store_true", help="time every variant on every workload, also "
                   "where its code path is the same as an earlier variant's")
    s = sub.add_parser("report")
    s.add_argument("--rows", required=True)
    s.add_argument("--plan", required=True)
    s.add_argument("--out", default="")
    s.add_argument("--env", default="", help="env.json of the run (default: beside --rows)")
    s.add_argument("--best", action="store_true", help="write kernels_cuda/gemm_wgmma/best/<problem>.json")
    s.add_argument("--combined-out", default="", help="write the per-problem combined params (+ MSKIP "
                   "choice) as JSON (variants_t3 reads data/results/gemm_h200_t2_combined.json)")
    s.add_argument("--shared", default=str(REPO.parent / "shared"))
    args = ap.parse_args()
    {"prepare": cmd_prepare, "add": cmd_add, "run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
