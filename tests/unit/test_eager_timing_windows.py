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
    # pooled, each side's 15 calls: NVIDIA's median 1.8 (its windows' slow third calls), solforge's
    # 1.0; against NVIDIA's first window (2.0) 0.5
    assert by["launch_bound"]["pooled"] == pytest.approx(1.0 / 1.8)
    assert by["launch_bound"]["pooled_vs_one"] == pytest.approx(0.5)
    assert sm["within"] == {"cross": 2, "first": 1, "pooled": 1, "pooled_vs_one": 1,
                            "nvidia_self": 1, "solforge_self": 1}
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


def _with_host(row, side, hosts, mhz, busy=None):
    row[side]["host"] = hosts
    row[side]["sm_mhz"] = mhz
    if busy is not None:
        row[side]["busy_ms"] = busy
    return row


def _h(cpus, nivcsw=0, steal=0):
    return {"cpus": cpus, "nivcsw": nivcsw, "nvcsw": 3, "cpu_frac": 1.0, "steal_ticks": steal}


def test_level_companions_split_windows_by_what_was_recorded_with_them(win):
    # solforge's slow windows (2.0) were preempted and ended on CPU 7; its kernels' own GPU time is
    # the same on both levels: the level is host time
    bi = _row("bi", [1.0, 2.0, 1.0, 2.0], [2.0, 2.0, 1.0, 1.0])
    _with_host(bi, "nvidia", [_h([4, 4]), _h([4, 4]), _h([4, 4]), _h([4, 4])], [1980] * 4)
    _with_host(bi, "solforge", [_h([4, 7], nivcsw=2), _h([7, 7], nivcsw=1, steal=3),
                                _h([4, 4]), _h([4, 4])], [1980, 1980, 1755, 1755],
               busy=[0.30, 0.30, 0.30, 0.31])
    # the host's launch of a call: 0.1 ms on the fast level, 0.2 ms on the slow one, both sides
    bi["nvidia"]["launch_ms"] = [0.1, 0.2, 0.1, 0.2]
    bi["solforge"]["launch_ms"] = [0.2, 0.2, 0.1, None]
    old = _row("old_run", [1.0, 2.0], [1.0, 2.0])           # no records: left out
    lc = win.level_companions({"rows": [bi, old]})
    assert lc["windows"] == 8
    # fast: NVIDIA's windows 0 and 2, solforge's 2 and 3
    assert lc["split"]["preempted"] == {True: [0, 2], False: [4, 6]}
    assert lc["split"]["steal"] == {True: [0, 1], False: [4, 7]}
    assert lc["split"]["moved CPU"] == {True: [0, 1], False: [4, 7]}
    assert lc["split"]["CPU"] == {4: [4, 6], 7: [0, 2]}
    # [1980, 1980 (NVIDIA fast), 1755, 1755 (solforge fast)] and 4 slow at 1980
    assert lc["sm_mhz"] == {"fast": (1980 + 1755) / 2, "slow": 1980}
    # the mark of a host-bound level: the span doubles, the kernels do not
    assert lc["workloads_both_levels"] == 1
    assert lc["span_slow_over_fast"] == pytest.approx(2.0)
    assert lc["busy_slow_over_fast"] == pytest.approx(0.30 / 0.305)
    assert lc["sides_both_levels"] == 2 and lc["launch_slow_over_fast"] == pytest.approx(2.0)
    md = win.render(win.summarize({"meta": {}, "rows": [bi, old]}))
    assert "- preempted during the window (involuntary context switches): False: 4 of 6, " \
           "True: 0 of 2" in md
    assert "the slow level's span is 2.00x the fast one's, its kernels' own GPU time 0.98x" in md
    assert "slow level over fast (2 workload sides read at both levels): 2.00x" in md


def test_a_run_without_host_records_renders_as_before(win):
    md = win.render(win.summarize({"meta": {}, "rows": [_row("bi", [1.0, 2.0], [2.0, 1.0])]}))
    assert "What the level goes with" not in md


def test_host_state_reads_this_threads_cpu_and_switches(win):
    import os
    import time

    if not os.path.exists("/proc/thread-self/stat"):
        pytest.skip("no /proc")
    a = win._host_state()
    time.sleep(0.01)                                    # one voluntary switch at least
    d = win._host_delta(a, win._host_state(), 0.01)
    assert a["cpu"] in os.sched_getaffinity(0)
    assert d["nvcsw"] >= 1 and d["nivcsw"] >= 0
    assert 0.0 <= d["cpu_frac"] < 0.9                   # asleep most of the window
    assert d["steal_ticks"] is None or d["steal_ticks"] >= 0
