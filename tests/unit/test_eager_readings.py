"""The eager T_b's several readings (evaluate/baseline.py): how many a reference gets, and how they
pool into one Timing. The readings themselves are GPU work (tests/gpu/test_gpu_timing_window.py)."""

from __future__ import annotations

import statistics

import pytest

from solforge.evaluate.baseline import eager_window_count, pool_windows
from solforge.evaluate.timing import Timing


def test_host_bound_references_get_several_readings_and_slow_ones_one():
    assert eager_window_count(0.15, 5, 2.0) == 5
    assert eager_window_count(2.0, 5, 2.0) == 1          # at the bound: GPU-bound or a Python loop
    assert eager_window_count(40.0, 5, 2.0) == 1
    assert eager_window_count(0.15, 0, 2.0) == 1          # a setting of 0 still takes one reading


def test_readings_at_two_levels_pool_to_the_level_most_samples_sit_at():
    fast = [0.10 + 0.001 * i for i in range(50)]
    slow = [0.16 + 0.001 * i for i in range(50)]
    readings = [Timing(fast, "cupti", streams={7}), Timing(slow, "cupti", streams={7}),
                Timing(list(fast), "cupti", streams={7, 9}), Timing(list(fast), "cupti"),
                Timing(list(slow), "cupti")]
    t = pool_windows(readings)
    assert t.n == 250 and t.method == "cupti"
    assert t.median_ms == statistics.median(fast + slow + fast + fast + slow)
    assert 0.10 <= t.median_ms < 0.16                   # three of five readings at the fast level
    assert t.streams == {7, 9}
    assert t.note == "5 readings, medians 0.1245-0.1845 ms"
    assert t.busy_ms is None                              # no reading knew its GPU time
    timed = [Timing(list(fast), "cupti", busy_ms=b) for b in (0.05, 0.07, 0.06)]
    assert pool_windows(timed).busy_ms == pytest.approx(0.06)
    assert pool_windows(timed + [Timing(list(slow), "events")]).busy_ms is None
    # one reading is itself, note and all
    only = Timing(fast, "cupti", note="events fallback (x)")
    assert pool_windows([only]) is only
    assert pool_windows([only, Timing(slow, "cupti")]).note.startswith("events fallback (x); 2 readings")
