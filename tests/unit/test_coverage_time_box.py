"""`solforge coverage` gives each problem its line within --problem-timeout: a problem whose line does
not come in time is reported as stopped and the command goes on (cli/coverage.py)."""

from __future__ import annotations

import time

from solforge.cli import coverage


class _P:
    name, subset = "slow_one", "S"


def test_a_problem_past_its_time_box_is_one_stopped_line(monkeypatch):
    def forever(*a, **k):
        time.sleep(60)
    monkeypatch.setattr(coverage, "cover_problem", forever)
    t0 = time.time()
    row = coverage.cover_problem_boxed(_P(), False, "sm_90a", 10.0, "first", box_s=1.0)
    assert time.time() - t0 < 10
    assert row["served"] is False and row["reason"].startswith("stopped: no answer within 1 s")


def test_a_line_in_time_comes_back_whole(monkeypatch):
    monkeypatch.setattr(coverage, "cover_problem",
                        lambda p, *a: {"problem": p.name, "subset": p.subset, "served": True,
                                       "reason": "", "candidate": None})
    row = coverage.cover_problem_boxed(_P(), False, "sm_90a", 10.0, "first", box_s=30.0)
    assert row == {"problem": "slow_one", "subset": "S", "served": True, "reason": "", "candidate": None}
