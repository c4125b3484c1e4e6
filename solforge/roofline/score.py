"""Scores: speedup and SOL score, per workload and per problem. Small pure functions.

SOL score (SOL-ExecBench, src/sol_execbench/sol_score.py):

    S(T_k) = 1 / (1 + (T_k - T_sol) / (T_b - T_sol))

S = 1 when the kernel reaches the speed of light, 0.5 when it matches the baseline, -> 0 as it slows.
Edge cases, as SOL-ExecBench handles them:
- T_b <= T_sol (the baseline is already at or past the bound, so the anchor is degenerate):
  S = 1 if T_k <= T_sol else 0.
- T_k < T_sol (with T_b > T_sol): the formula is applied as is and gives S > 1; SOL-ExecBench does not
  clamp it. A time below the speed of light means a wrong T_sol or a broken measurement; `sol_score`
  keeps the upstream value (so our numbers compare with theirs) and `below_sol` lets callers flag it.
A failed or missing measurement (None, NaN, <= 0) scores None, not 0: it is not a time.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional


def _valid(t: Optional[float]) -> bool:
    return t is not None and isinstance(t, (int, float)) and math.isfinite(t) and t > 0


def sol_score(t_k: Optional[float], t_b: Optional[float], t_sol: Optional[float]) -> Optional[float]:
    """SOL score of a kernel time t_k against baseline t_b and speed of light t_sol (any one unit)."""
    if not (_valid(t_k) and _valid(t_b) and _valid(t_sol)):
        return None
    gap = t_b - t_sol
    if gap <= 0:
        return 1.0 if t_k <= t_sol else 0.0
    return 1.0 / (1.0 + (t_k - t_sol) / gap)


def below_sol(t_k: Optional[float], t_sol: Optional[float]) -> bool:
    """True when a measured time beats the speed of light (something is wrong, not fast)."""
    return _valid(t_k) and _valid(t_sol) and t_k < t_sol


def speedup(t_b: Optional[float], t_k: Optional[float]) -> Optional[float]:
    """Baseline time over kernel time (> 1: the kernel is faster)."""
    if not (_valid(t_b) and _valid(t_k)):
        return None
    return t_b / t_k


def geomean(values: Iterable[Optional[float]]) -> Optional[float]:
    """Geometric mean of the positive values; None if there are none. Zeros (a 0 SOL score from the
    degenerate-anchor case) would send a geomean to 0, so they are kept and do exactly that."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None
    if any(v <= 0 for v in vals):
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def problem_sol_score(per_workload: Iterable[Optional[float]]) -> Optional[float]:
    """A problem's SOL score: the geometric mean over its workloads' scores. A workload without a score
    (failed or unmeasured) makes the whole problem None: a kernel must pass every workload to score."""
    vals = list(per_workload)
    if not vals or any(v is None for v in vals):
        return None
    return geomean(vals)


def problem_speedup(per_workload: Iterable[Optional[float]]) -> Optional[float]:
    vals = list(per_workload)
    if not vals or any(v is None for v in vals):
        return None
    return geomean(vals)
