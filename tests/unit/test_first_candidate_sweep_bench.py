"""benchmarks/first_candidate_sweep.py without a GPU: each problem's staging runs in a forked child
with a wall-clock limit, so one problem whose lowering never ends costs its limit, not the run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.unit import bench_module


@pytest.fixture(scope="module")
def bench():
    return bench_module.load("first_candidate_sweep")


def test_a_problem_past_its_box_is_one_line_and_the_next_is_staged(bench, monkeypatch, tmp_path):
    def stage(pdir, workers, out, arch, t_sol):
        if pdir.name == "hangs":
            time.sleep(60)
        if pdir.name == "breaks":
            raise ValueError("bad definition\nmore")
        return [{"problem": f"{pdir.parent.name}/{pdir.name}", "worker": "compiler", "staged": True}]

    monkeypatch.setattr(bench, "_stage_one", stage)  # the forked child runs this module's function
    t0 = time.time()
    hung = bench._prepare_one(Path("L9/hangs"), ["compiler"], tmp_path, "sm_90a", False, box_s=1.0)
    assert time.time() - t0 < 20
    assert hung == [{"problem": "L9/hangs", "worker": None, "staged": False, "prepare_s": hung[0]["prepare_s"],
                     "reason": "stopped: no answer within 1 s (trace, lowering and compile)"}]
    ok = bench._prepare_one(Path("L9/fine"), ["compiler"], tmp_path, "sm_90a", False, box_s=30.0)
    assert ok[0]["staged"] and ok[0]["problem"] == "L9/fine"
    bad = bench._prepare_one(Path("L9/breaks"), ["compiler"], tmp_path, "sm_90a", False, box_s=30.0)
    assert not bad[0]["staged"] and bad[0]["reason"] == "ValueError: bad definition"


def test_ever_correct_keeps_an_earlier_runs_verdict(bench, tmp_path):
    """A problem correct in one run stays counted when a later run stopped it on time; one never
    correct is not counted."""
    import json

    def run(name, rows):
        staged = [{"problem": p, "worker": "compiler", "staged": True, "stage": f"{p}__c", "order": 0,
                   "workloads": 2} for p, _ in rows]
        res = [{"stage": f"{p}__c", "results": [{"status": s, "message": ""},
                                                  {"status": "passed", "message": ""}]} for p, s in rows]
        (tmp_path / f"{name}.json").write_text(json.dumps(staged))
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in res))
        return [str(tmp_path / f"{name}.json")], [str(tmp_path / f"{name}.jsonl")]

    first = run("a", [("L9/x", "passed"), ("L9/y", "incorrect")])
    later = run("b", [("L9/x", "timeout"), ("L9/y", "incorrect"), ("L9/z", "passed")])
    assert bench.ever_correct([first, later]) == {"L9/x", "L9/z"}
