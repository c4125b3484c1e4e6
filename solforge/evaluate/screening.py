"""Screening for search: evaluate a candidate on a few representative workloads first, and on the
rest only when it could be a new best. Every workload that runs gets the full evaluation (all
correctness rounds, timing, every guard); screening only decides how many workloads run.

    picks = screen_workloads(problem.workloads, k=3)               # smallest, median, largest
    report = screen_then_full(lambda uuids: run_uuids(uuids), [w.uuid for w in problem.workloads],
                              picks, lambda rep: could_beat(rep, best_ms))
    report.mode   # "screen" (stopped after the picks) | "screen+full" | "full" (no screening)

A screened-out candidate's report holds results for the picks only; the others are SKIPPED with the
message "not evaluated: screened out". Whoever scores it must not rank it against fully evaluated
candidates (the agents' loop decides; it records report.mode with the attempt). Stdlib only.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from .results import EvalResult, EvalStatus, RunReport

SCREENED_OUT = "not evaluated: screened out (a few workloads first; not a possible new best)"


def _size(rw) -> int:
    total = 0
    for shape in (getattr(rw, "input_shapes", None) or {}).values():
        total += math.prod(int(s) for s in (shape or ()))
    for shape in (getattr(rw, "output_shapes", None) or {}).values():
        total += math.prod(int(s) for s in (shape or ()))
    return total


def screen_workloads(workloads: Sequence, k: int = 3) -> list[str]:
    """Up to k workload uuids that span the problem: the smallest and the largest (by elements of
    inputs and outputs), then evenly spaced ones between them, in the problem's order. Small
    problems (<= k workloads) get all of them."""
    if k <= 0 or len(workloads) <= k:
        return [w.uuid for w in workloads]
    ranked = sorted(range(len(workloads)), key=lambda i: (_size(workloads[i]), i))
    picks = {ranked[round(j * (len(ranked) - 1) / (k - 1))] for j in range(k)} if k > 1 \
        else {ranked[len(ranked) // 2]}
    j = 0
    while len(picks) < k:  # equal sizes collapsed two picks: fill from the middle outwards
        picks.add(ranked[(len(ranked) // 2 + j) % len(ranked)])
        j += 1
    return [workloads[i].uuid for i in sorted(picks)]


def could_beat(report: RunReport, best_ms: Optional[dict], margin: float = 0.05) -> bool:
    """Whether a screened candidate could be a new best: every screened workload passed, and the
    geometric mean of its time over the best known time on those workloads is below 1 + margin
    (noise and the other workloads may still tip it). No best known: yes."""
    rs = [r for r in report.results if r.status != EvalStatus.SKIPPED or r.message != SCREENED_OUT]
    if not rs or not all(r.passed for r in rs):
        return False
    if not best_ms:
        return True
    ratios = [r.median_ms / best_ms[r.workload_uuid] for r in rs
              if r.median_ms and best_ms.get(r.workload_uuid)]
    if not ratios:
        return True
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) < 1.0 + margin


def screen_then_full(run: Callable[[list[str]], RunReport], all_uuids: Sequence[str],
                     screen_uuids: Sequence[str],
                     promising: Callable[[RunReport], bool]) -> RunReport:
    """run(uuids) evaluates those workloads (a fresh process each call). Runs the screen first; when
    promising(screen report), runs the remaining workloads too and merges both reports."""
    all_uuids = list(all_uuids)
    picks = [u for u in all_uuids if u in set(screen_uuids)]
    if not picks or len(picks) == len(all_uuids):
        rep = run(all_uuids)
        rep.mode = "full"
        return rep
    first = run(picks)
    rest = [u for u in all_uuids if u not in set(picks)]
    if not promising(first):
        got = {r.workload_uuid: r for r in first.results}
        first.results = [got.get(u) or EvalResult(u, EvalStatus.SKIPPED, problem=first.problem,
                                                  message=SCREENED_OUT) for u in all_uuids]
        first.mode = "screen"
        return first
    second = run(rest)
    got = {r.workload_uuid: r for r in first.results + second.results}
    phases = {"screen": first.phases, "rest": second.phases,
              "total_s": (first.phases.get("total_s") or first.wall_s) +
              (second.phases.get("total_s") or second.wall_s)}
    return RunReport(problem=first.problem or second.problem,
                     results=[got[u] for u in all_uuids if u in got],
                     hardware=second.hardware or first.hardware, wall_s=first.wall_s + second.wall_s,
                     exit_code=second.exit_code if second.exit_code else first.exit_code,
                     killed=first.killed or second.killed,
                     stderr_tail=(first.stderr_tail + second.stderr_tail)[-4000:],
                     log=first.log + second.log, launch=second.launch or first.launch,
                     phases=phases, mode="screen+full")
