import math

import pytest

from solforge.roofline.score import (below_sol, geomean, problem_sol_score, sol_score, speedup)


def test_sol_score_anchor_points():
    # T_k = T_sol -> 1; T_k = T_b -> 0.5
    assert sol_score(2.0, 10.0, 2.0) == 1.0
    assert sol_score(10.0, 10.0, 2.0) == 0.5


def test_sol_score_hand_computed():
    # T_sol=1, T_b=5, T_k=3: 1/(1+(3-1)/(5-1)) = 1/1.5
    assert sol_score(3.0, 5.0, 1.0) == pytest.approx(2 / 3)
    # slower than baseline: T_k=9 -> 1/(1+8/4) = 1/3
    assert sol_score(9.0, 5.0, 1.0) == pytest.approx(1 / 3)


def test_sol_score_baseline_at_or_below_sol():
    # SOL-ExecBench: gap <= 0 -> 1 if T_k <= T_sol else 0
    assert sol_score(1.0, 1.0, 1.0) == 1.0
    assert sol_score(0.9, 0.8, 1.0) == 1.0
    assert sol_score(1.1, 0.8, 1.0) == 0.0


def test_sol_score_kernel_below_sol_is_not_clamped():
    # upstream applies the formula: T_k=0.5, T_b=5, T_sol=1 -> 1/(1-0.5/4) = 8/7
    assert sol_score(0.5, 5.0, 1.0) == pytest.approx(8 / 7)
    assert below_sol(0.5, 1.0) and not below_sol(1.0, 1.0)


@pytest.mark.parametrize("bad", [None, 0.0, -1.0, float("nan"), float("inf")])
def test_invalid_times_score_none(bad):
    assert sol_score(bad, 5.0, 1.0) is None
    assert sol_score(2.0, bad, 1.0) is None
    assert sol_score(2.0, 5.0, bad) is None
    assert speedup(bad, 1.0) is None


def test_speedup_and_geomean():
    assert speedup(10.0, 4.0) == 2.5
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.0, 0.0]) == 0.0
    assert geomean([]) is None
    # per-problem score: geomean of workloads; a missing workload voids the problem
    assert problem_sol_score([0.5, 0.5 * 4]) == pytest.approx(1.0)
    assert problem_sol_score([0.5, None]) is None
    assert math.isclose(problem_sol_score([1 / 3, 3.0]), 1.0)
