"""An evaluation killed at its limit (or whose driver died) writes no phases line: the runner then
sums the phases of the workloads that finished and puts the rest of the run under "unfinished", so
v_eval_phases still says where a timed-out evaluation's time went."""

from __future__ import annotations

from solforge.evaluate.phase_totals import flat_seconds
from solforge.evaluate.runner import _phases


def _result(uuid, **ph):
    return {"type": "result", "workload_uuid": uuid, "status": "passed",
            "extra": {"phases": {**ph, "workload": sum(ph.values()) + 0.5}}}


def test_killed_run_sums_finished_workloads_and_names_the_rest():
    lines = [{"type": "hardware"}, {"type": "start", "uuid": "a"},
             _result("a", inputs=1.0, timing_profile=4.0, gpu_wait=2.0),
             {"type": "start", "uuid": "b"},
             _result("b", inputs=0.5, timing_profile=3.0),
             {"type": "start", "uuid": "c"}]                # killed inside c
    out = _phases(lines, t0=100.0, t_first=100.2, t_done=None, t_exit=140.0)
    sec = out["seconds"]
    assert sec["inputs"] == 1.5 and sec["timing_profile"] == 7.0 and sec["gpu_wait"] == 2.0
    assert "workload" not in sec
    assert abs(sec["unfinished"] - (40.0 - (7.5 + 4.0))) < 1e-9
    flat = flat_seconds(out)
    assert flat["timing_profile"] == 7.0 and flat["unfinished"] > 28


def test_the_drivers_own_phases_win_and_nothing_is_made_up():
    lines = [_result("a", inputs=1.0), {"type": "phases", "seconds": {"inputs": 1.0, "checks": 2.0}}]
    assert _phases(lines, 0.0, 0.1, 5.0, 5.5)["seconds"] == {"inputs": 1.0, "checks": 2.0,
                                                              "teardown": 0.5}
    # killed before any workload finished: no phases to sum, none invented
    assert _phases([{"type": "start", "uuid": "a"}], 0.0, 0.1, None, 9.0)["seconds"] == {}
