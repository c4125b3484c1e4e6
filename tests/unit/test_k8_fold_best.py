"""scripts/k8_fold_best.py: which k8 variant replaces a best/ entry (CPU, no files)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import k8_fold_best as fold  # noqa: E402


def _s(params, gm, mn, ok=True):
    return {"variant": "rmsnorm:v", "params": params, "all_correct": ok, "gm_tb": gm, "min_large_pct_copy": mn}


def test_winner_needs_higher_gmtb_and_keeps_the_target():
    cur = _s({"VEC": 8, "TPR": 256, "ROWS": 1, "WPRE": 0}, 1.008, 0.915)
    stats = [cur,
             _s({"VEC": 8, "TPR": 256, "ROWS": 1, "WPRE": 0, "SPOL": 1}, 1.006, 0.931),  # better % but lower gmTb
             _s({"VEC": 8, "TPR": 512, "ROWS": 1, "PERSIST": 1, "PF": 2, "BPS": 2}, 1.10, 0.806),  # loses the target
             _s({"VEC": 8, "TPR": 256, "ROWS": 1, "PERSIST": 1, "PF": 1, "BPS": 4}, 1.043, 0.881),
             _s({"VEC": 8, "TPR": 128, "ROWS": 1}, 1.2, 0.95, ok=False)]                       # wrong somewhere
    assert fold.choose(cur, stats)["params"]["BPS"] == 4


def test_target_missed_by_both_then_no_lower_min_large():
    cur = _s({"VEC": 8, "TPR": 32, "ROWS": 8, "WPRE": 1}, 1.003, 0.719)
    stats = [cur, _s({"VEC": 8, "TPR": 64, "ROWS": 2, "WPRE": 1}, 1.019, 0.737),
             _s({"VEC": 8, "TPR": 64, "ROWS": 4, "WPRE": 1}, 1.05, 0.654),
             _s({"VEC": 8, "TPR": 32, "ROWS": 8}, 1.01, 0.80)]   # the same params (WPRE 1 is the default)
    assert fold.choose(cur, stats)["params"] == {"VEC": 8, "TPR": 64, "ROWS": 2, "WPRE": 1}
    assert fold.choose(cur, [cur]) is None
