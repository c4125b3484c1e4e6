"""Screening (solforge/evaluate/screening.py): representative workloads, and screen-then-full through
the real runner (host candidates in zygote-forked processes on the CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "adversarial"))
import harness  # noqa: E402

from solforge.evaluate.results import EvalResult, EvalStatus, RunReport  # noqa: E402
from solforge.evaluate.screening import (SCREENED_OUT, could_beat, screen_then_full,  # noqa: E402
                                         screen_workloads)

SHARED = HERE.parent.parent.parent / "shared" / "sol_execbench"
HONEST = ("import torch\n"
          "def run(inputs, outputs, ctx):\n"
          "    z = inputs['x']\n"
          "    for _ in range(64):\n"
          "        z = torch.sin(z) + inputs['y']\n"
          "    outputs['out'].copy_(z)\n")


def _elements(w) -> int:
    import math

    return sum(math.prod(s or ()) for s in {**w.input_shapes, **w.output_shapes}.values())


def test_screen_picks_span_the_problem():
    from solforge.problem import load_problem_dir

    pdir = SHARED / "FlashInfer-Bench" / "021_rmsnorm_h128"
    if not pdir.exists():
        pytest.skip("shared data not present")
    p = load_problem_dir(pdir)
    assert len(p.workloads) > 3
    picks = screen_workloads(p.workloads, 3)
    assert len(picks) == len(set(picks)) == 3
    sizes = {w.uuid: _elements(w) for w in p.workloads}
    assert sizes[picks[0]] >= 0 and min(sizes.values()) in [sizes[u] for u in picks]
    assert max(sizes.values()) in [sizes[u] for u in picks]
    order = [w.uuid for w in p.workloads]
    assert picks == sorted(picks, key=order.index)  # the problem's order
    assert screen_workloads(p.workloads[:2], 3) == order[:2]


def test_could_beat():
    def rep(*rs):
        return RunReport("p", list(rs))

    ok = EvalResult("a", EvalStatus.PASSED, median_ms=1.0)
    assert could_beat(rep(ok), None)
    assert could_beat(rep(ok), {"a": 1.0})            # within the margin
    assert not could_beat(rep(ok), {"a": 0.5})        # twice as slow as the best
    assert not could_beat(rep(ok, EvalResult("b", EvalStatus.INCORRECT)), None)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    from solforge.evaluate.runner import stage_candidate
    from solforge.problem import load_problem_dir

    p = load_problem_dir(harness.PROBLEM_DIR)
    root = tmp_path_factory.mktemp("screen")
    return p, lambda name: stage_candidate(root / name, p, host_source=HONEST,
                                           job={"allow_torch": True})


@pytest.mark.parametrize("promising", [False, True])
def test_screen_then_full_through_the_runner(staged, promising):
    from solforge.evaluate.runner import run_stage

    p, make = staged
    st = make(f"cand_{promising}")
    uuids = [w.uuid for w in p.workloads]
    calls = []

    def run(sel):
        calls.append(list(sel))
        return run_stage(st, workloads=sel, timeout_s=180)

    rep = screen_then_full(run, uuids, ["adv-4k"], lambda r: promising)
    assert [r.workload_uuid for r in rep.results] == uuids
    assert calls[0] == ["adv-4k"]
    first = rep.results[0]
    assert first.status.value == "passed", first.message
    if promising:
        assert rep.mode == "screen+full" and calls[1] == ["adv-1m"]
        assert rep.results[1].status.value == "passed", rep.results[1].message
    else:
        assert rep.mode == "screen" and len(calls) == 1
        assert rep.results[1].status == EvalStatus.SKIPPED and rep.results[1].message == SCREENED_OUT
