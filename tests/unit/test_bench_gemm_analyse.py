"""scripts/bench_gemm.py analyse: the realizable per-range combination, including the T1x plans
(tier 1 up to M = 1024 from a variant whose T1_MAXM says so; tier 2's winner then scored on the M
above 1024 only). Synthetic rows: the logic, not a measurement."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "scripts" / "bench_gemm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BASE = {"CSPLIT": 1, "T0_MAXM": 128, "T1_MAXM": 256, "TS0_MAXM": 16, "TS1_MAXM": 16,
        "T0_BM": 128, "T0_BN": 256, "T0_ST": 4, "T0_SPLIT": 4, "T1_BM": 128, "T1_BN": 128, "T1_ST": 7,
        "T1_SPLIT": 1, "T2_BM": 128, "T2_BN": 256, "T2_ST": 4, "T2_SPLIT": 1, "MSKIP": 1}
VARIANTS = {"base": BASE,
            "tall": dict(BASE, T1_BM=256, T1_BN=128, T1_ST=4, T1_SPLIT=2),
            "t1k": dict(BASE, T1_MAXM=1024),
            "PE": dict(BASE, T2_CTAS=132, T2_EPI=1),
            "T0v": dict(BASE, T0_BN=128, T0_ST=7, T0_SPLIT=2)}
MS = (8, 40, 100, 200, 500, 2000)


def _run(bench, times: dict):
    """times: label -> {M: t_ms}; torch takes 1.0 everywhere, a missing M means the base time."""
    plan = {"problems": [{"problem": "X", "variants": [
        {"id": f"v{i}", "label": lab, "params": p} for i, (lab, p) in enumerate(VARIANTS.items())]}]}
    rows = [{"problem": "X", "M": m, "variant": "torch", "t_ms": 1.0, "ok": True} for m in MS]
    for i, lab in enumerate(VARIANTS):
        for m in MS:
            rows.append({"problem": "X", "M": m, "variant": f"v{i}", "label": lab, "ok": True,
                         "t_ms": times.get(lab, {}).get(m, times["base"][m])})
    return bench.analyse(rows, plan)["X"]


def test_t1x_plan_taken_when_tier1_wins_up_to_1024(bench):
    base = {8: 1.0, 40: 1.0, 100: 1.0, 200: 1.2, 500: 2.5, 2000: 1.1}
    r = _run(bench, {"base": base, "tall": {200: 0.9}, "t1k": {200: 1.2, 500: 1.1}, "PE": {2000: 1.0, 500: 2.4}})
    # tier 1 up to 1024 (t1k: 1.2 and 1.1 against tall's 0.9 and tier 2's 2.4 at M = 500)
    assert r["params"]["T1_MAXM"] == 1024 and r["params"]["T1_BM"] == 128
    assert r["params"].get("T2_CTAS") == 132  # PE still wins above 1024
    assert r["speedup"][500] == pytest.approx(1 / 1.1) and r["speedup"][2000] == pytest.approx(1.0)
    assert r["speedup"][200] == pytest.approx(1 / 1.2)


def test_tall_tier1_taken_when_tier2_holds_257_to_1024(bench):
    base = {8: 1.0, 40: 1.0, 100: 1.0, 200: 1.2, 500: 1.0, 2000: 1.1}
    r = _run(bench, {"base": base, "tall": {200: 0.9}, "t1k": {500: 1.5}, "PE": {2000: 1.0}})
    assert r["params"]["T1_MAXM"] == 256 and r["params"]["T1_BM"] == 256 and r["params"]["T1_SPLIT"] == 2
    assert r["speedup"][200] == pytest.approx(1 / 0.9) and r["speedup"][500] == pytest.approx(1.0)
    assert r["win"]["T1"][0] == "tall"


def test_tier0_scored_where_it_runs_with_s1_off(bench):
    """BASE has the skinny S1 tier off (TS1_MAXM = TS0_MAXM = 16): tier 0 serves M = 17..128, so a
    T0 winner's speed at M = 40 must be its own row there (not the base's)."""
    base = {8: 1.0, 40: 1.0, 100: 1.0, 200: 1.0, 500: 1.0, 2000: 1.0}
    r = _run(bench, {"base": base, "T0v": {40: 0.5, 100: 1.1}})
    assert r["params"]["T0_SPLIT"] == 2 and r["win"]["T0"][0] == "T0v"
    assert r["speedup"][40] == pytest.approx(2.0) and r["speedup"][100] == pytest.approx(1 / 1.1)


def test_path_key_dedupes_only_same_code_path(bench):
    """run skips a variant where its code path equals an earlier one's (the row is copied): a tier-0
    variant differs only at M in tier 0's range; TMA changes the wgmma tiers, not the skinny one."""
    tma = dict(BASE, TMA=1)
    vs = [{"id": "v0", "params": BASE}, {"id": "v1", "params": tma},
          {"id": "v2", "params": dict(tma, T0_BN=128, T0_ST=7, T0_SPLIT=2)},
          {"id": "v3", "params": dict(tma, T2_CTAS=132, T2_EPI=1)},
          {"id": "v4", "params": dict(tma, T2_SWZ=1)}]
    assert bench.dup_map(vs, 8) == {"v1": "v0", "v2": "v0", "v3": "v0", "v4": "v0"}   # skinny S0
    assert bench.dup_map(vs, 40) == {"v3": "v1", "v4": "v1"}                            # tier 0
    assert bench.dup_map(vs, 200) == {"v2": "v1", "v3": "v1", "v4": "v1"}               # tier 1
    assert bench.dup_map(vs, 2000) == {"v2": "v1"}                                      # tier 2
    # an optional key at its default is the same path as the key left out
    assert bench.dup_map([{"id": "a", "params": BASE}, {"id": "b", "params": dict(BASE, T2_GROUP=16, TMA=0)}],
                         2000) == {"b": "a"}


def test_analyse_grouped_picks_the_tma_family_per_problem(bench):
    """TMA is a switch of every wgmma tier: the cp.async variants (base) and the TMA ones (tma as
    their base) are analysed apart; the realizable combination of the better family wins and its
    params carry TMA=1 with the tma family's tier winners."""
    tma = dict(BASE, TMA=1)
    variants = {"base": BASE, "tma": tma, "tma.T1": dict(tma, T1_BM=256, T1_BN=128, T1_ST=4, T1_SPLIT=2),
                "tma.T2.P": dict(tma, T2_CTAS=132, T2_EPI=1)}
    plan = {"problems": [{"problem": "X", "variants": [
        {"id": f"v{i}", "label": lab, "params": p} for i, (lab, p) in enumerate(variants.items())]}]}
    times = {"base": {8: 1.0, 40: 1.0, 100: 1.0, 200: 1.2, 500: 1.0, 2000: 1.1},
             "tma": {8: 1.0, 40: 0.9, 100: 0.9, 200: 1.1, 500: 0.95, 2000: 1.0},
             "tma.T1": {200: 0.8}, "tma.T2.P": {500: 0.9, 2000: 0.95}}
    rows = [{"problem": "X", "M": m, "variant": "torch", "t_ms": 1.0, "ok": True} for m in MS]
    for i, lab in enumerate(variants):
        for m in MS:
            t = times[lab].get(m, times["tma"][m] if lab.startswith("tma") else times["base"][m])
            rows.append({"problem": "X", "M": m, "variant": f"v{i}", "label": lab, "ok": True, "t_ms": t})
    r = bench.analyse_grouped(rows, plan)["X"]
    assert r["params"]["TMA"] == 1 and r["params"]["T1_BM"] == 256 and r["params"]["T2_CTAS"] == 132
    assert r["speedup"][200] == pytest.approx(1 / 0.8) and r["speedup"][2000] == pytest.approx(1 / 0.95)
    # the cp.async family wins when TMA is slower everywhere
    slow = [dict(x, t_ms=x["t_ms"] * 2) if x["variant"] in ("v1", "v2", "v3") else x for x in rows]
    r2 = bench.analyse_grouped(slow, plan)["X"]
    assert r2["params"].get("TMA", 0) == 0 and r2["speedup"][40] == pytest.approx(1.0)
    orc = bench.oracle(rows)["X"]
    assert orc[200] == pytest.approx(1 / 0.8) and orc[8] == pytest.approx(1.0)
