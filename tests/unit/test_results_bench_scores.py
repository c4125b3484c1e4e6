"""solforge.results.bench_scores (scoring benchmarks/bench_kernels.py rows): T_b precedence, best-variant choice and the score on hand-made rows
(the scoring formula itself is solforge.roofline.score's, tested there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mod():
    from solforge.results import bench_scores

    return bench_scores


def _row(variant, params, wl, t_k, ok=True, t_eager=10.0, kind="bench"):
    return {"problem": "P", "family": "f", "variant": variant, "params": params, "workload": wl,
            "uuid": f"u{wl}", "axes": {"n": wl}, "t_eager_ms": t_eager, "t_compile_ms": None,
            "ok": ok, "t_kernel_ms": t_k if ok else None, "_tb_kind": kind}


def test_best_variant_is_correct_everywhere_and_fastest(mod):
    rows = [_row("f:v0", {"a": 0}, 0, 1.0), _row("f:v0", {"a": 0}, 1, 1.0),
            _row("f:v1", {"a": 1}, 0, 0.1), _row("f:v1", {"a": 1}, 1, 0.1, ok=False),  # fast but wrong once
            _row("f:v2", {"a": 2}, 0, 0.5), _row("f:v2", {"a": 2}, 1, 2.0)]          # geomean 1.0 ties v0
    key, rs = mod.best_variant(rows)
    assert json.loads(key.split(" ", 1)[1]) in ({"a": 0}, {"a": 2}) and len(rs) == 2
    rows.append(_row("f:v3", {"a": 3}, 0, 0.9))
    rows.append(_row("f:v3", {"a": 3}, 1, 0.9))
    assert json.loads(mod.best_variant(rows)[0].split(" ", 1)[1]) == {"a": 3}


def test_same_id_different_params_are_different_variants(mod):
    """ids are per bench run: v0 of a second run with other params must not merge with the first."""
    rows = [_row("f:v0", {"a": 0}, 0, 1.0), _row("f:v0", {"a": 0}, 1, 1.0),
            _row("f:v0", {"a": 9}, 0, 0.2), _row("f:v0", {"a": 9}, 1, 0.2, ok=False)]
    key, rs = mod.best_variant(rows)
    assert json.loads(key.split(" ", 1)[1]) == {"a": 0}


def test_tb_precedence_and_scores(mod):
    rows = [_row("f:v0", {"a": 0}, 0, 1.0), _row("f:v0", {"a": 0}, 1, 1.0, kind="ref-once"),
            _row("f:v0", {"a": 0}, 2, 1.0, t_eager=None)]
    baselines = {("P", "u0"): (3.0, "compile")}
    tsol = {("P", f"u{i}"): {"t_sol_ms": 0.5, "limiter": "memory", "bytes": 1, "flops": 1} for i in range(3)}
    res = mod.score_problem("P", rows, baselines, tsol, {0: 2.0})
    w0, w1, w2 = res["workloads"]
    assert (w0["t_b_ms"], w0["t_b_kind"]) == (3.0, "csv:compile")        # the CSV wins over the bench
    assert w0["sol"] == pytest.approx(1 / (1 + (1.0 - 0.5) / (3.0 - 0.5)))
    assert w0["sol_nv"] == pytest.approx(1 / (1 + 0.5 / 1.5))             # NVIDIA's anchor, same T_k/T_sol
    assert w1["t_b_kind"] == "ref-once" and w2["t_b_kind"] == "missing" and w2["sol"] is None
    assert res["lacking_tb"] == [1, 2] and res["n_proper_tb"] == 1
    assert res["sol_geomean_proper"] == pytest.approx(w0["sol"])


def test_baselines_csv_rows_without_tb_are_skipped(mod, tmp_path):
    f = tmp_path / "b.csv"
    f.write_text("problem,workload_uuid,T_b_ms,T_b_variant\nP,u0,2.5,eager\nP,u1,,\n")
    assert mod.load_baselines(f) == {("P", "u0"): (2.5, "eager")}
