"""benchmarks/eager_timing_windows.py without a GPU: the report from recorded windows."""

from __future__ import annotations

import pytest

from tests.unit import bench_module


@pytest.fixture(scope="module")
def win():
    return bench_module.load("eager_timing_windows")


def _row(case, nv, sf):
    # each window: three calls whose median is the given value
    return {"case": case, "uuid": f"{case}-{len(nv)}", "axes": {},
            "nvidia": {"windows": [[m * 0.9, m, m * 3] for m in nv], "errors": []},
            "solforge": {"windows": [[m, m * 1.1, m * 0.5] for m in sf], "errors": []}}


def test_median_window_agrees_where_single_windows_scatter(win):
    # a bimodal launch-bound reference: windows read 1.0 or 2.0 on both sides; the first windows
    # disagree 2x, the median windows agree
    doc = {"meta": {}, "rows": [
        _row("launch_bound", [2.0, 1.0, 1.0, 2.0, 1.0], [1.0, 2.0, 1.0, 1.0, 2.0]),
        _row("one_kernel", [0.5] * 4, [0.51] * 4),
        _row("too_few", [1.0], [1.0]),                    # one window: no scatter to report
    ]}
    sm = win.summarize(doc)
    by = {p["case"]: p for p in sm["problems"]}
    assert set(by) == {"launch_bound", "one_kernel"}
    assert by["launch_bound"]["cross"] == pytest.approx(1.0)
    assert by["launch_bound"]["first"] == pytest.approx(0.5)
    # NVIDIA's odd windows [1, 2] -> 1.5 over even [2, 1, 1] -> 1.0
    assert by["launch_bound"]["nvidia_self"] == pytest.approx(1.5)
    assert by["one_kernel"]["cross"] == pytest.approx(1.02)
    assert sm["within"] == {"cross": 2, "first": 1, "nvidia_self": 1, "solforge_self": 1}
    md = win.render(sm)
    assert "| launch_bound | 1 | 1.0000-1.0000 | 1.000 | 0.500 | 1.500 |" in md


def test_a_side_without_windows_is_left_out_not_counted(win):
    r = _row("broken", [1.0, 1.0], [1.0, 1.0])
    r["solforge"] = {"windows": [], "errors": ["load: RuntimeError: CUDA out of memory"]}
    sm = win.summarize({"meta": {}, "rows": [r]})
    assert sm["n"] == 0 and sm["within"]["cross"] == 0


def test_combine_takes_each_case_from_the_last_run_that_has_it(win):
    cut = {"meta": {"command": "run 1", "wall_s": 400, "stopped": "deadline reached at b"},
           "rows": [_row("a", [1.0, 1.0], [1.0, 1.0]), _row("b", [1.0, 1.0], [2.0, 2.0])]}
    rest = {"meta": {"command": "run 2", "wall_s": 300, "stopped": ""},
            "rows": [_row("b", [1.0, 1.0], [1.0, 1.0]), _row("b", [2.0, 2.0], [2.0, 2.0]),
                     _row("c", [1.0, 1.0], [1.0, 1.0])]}
    doc = win.combine([cut, rest])
    assert [r["case"] for r in doc["rows"]] == ["a", "b", "b", "c"]
    assert doc["meta"]["command"] == "run 1 ; run 2" and doc["meta"]["wall_s"] == 700
    sm = win.summarize(doc)
    assert {p["case"]: p["workloads"] for p in sm["problems"]} == {"a": 1, "b": 2, "c": 1}
    assert sm["within"]["cross"] == 3



def test_levels_share_and_same_round_agreement(win):
    # a two-level workload: NVIDIA fast in 2 of 4 windows, solforge in 1 of 4; one round shares it
    bi = _row("bi", [1.0, 2.0, 1.0, 2.0], [2.0, 2.0, 2.0, 1.0])
    steady = _row("steady", [1.0, 1.1, 1.0, 1.1], [1.05] * 4)   # under 1.5x: not counted
    lv = win.levels({"rows": [bi, steady]})
    assert lv["pairs"] == 4 and lv["same"] == 1
    assert lv["fast_share"] == {"nvidia": 0.5, "solforge": 0.25}
    assert lv["same_by_chance"] == pytest.approx(0.5 * 0.25 + 0.5 * 0.75)
    md = win.render(win.summarize({"meta": {}, "rows": [bi, steady]}))
    assert "the fast level in 50% of NVIDIA's windows and 25% of solforge's" in md
    assert "at the same level in 1 of 4 (25%; 50% if drawn independently" in md
