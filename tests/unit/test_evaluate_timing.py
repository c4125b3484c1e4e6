"""The timer's logic that needs no GPU: the duty-cycle gap, steady-state detection, and cutting a
CUPTI event list into calls (with and without an untimed setup between calls)."""

from __future__ import annotations

import pytest

from solforge import settings
from solforge.evaluate.timing import TimingError, _split_calls, duty_gap_s, is_steady

MARK = "void at::native::(anonymous namespace)::spin_kernel(long)"
FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"


def test_duty_gap_only_for_long_calls():
    assert duty_gap_s(1.5, 1.0, 0.5) == pytest.approx(0.0015)
    assert duty_gap_s(1.5, 2.0, 0.5) == pytest.approx(0.003)
    assert duty_gap_s(0.2, 1.0, 0.5) == 0.0           # short calls idle enough already
    assert duty_gap_s(1.5, 0.0, 0.5) == 0.0           # duty cycle off
    assert duty_gap_s(0.0, 1.0, 0.0) == 0.0


def test_duty_defaults_come_from_settings(monkeypatch):
    monkeypatch.setenv("SOLFORGE_DUTY_GAP_FACTOR", "0.25")
    monkeypatch.setenv("SOLFORGE_DUTY_MIN_CALL_MS", "2")
    cfg = settings.get()
    assert (cfg.duty_gap_factor, cfg.duty_min_call_ms) == (0.25, 2.0)
    assert settings.Settings().duty_gap_factor > 0     # on by default


def test_steady_needs_two_windows_and_a_flat_median():
    assert not is_steady([1.0] * 19, 10, 0.01)        # fewer than 2 windows
    assert is_steady([1.0] * 20, 10, 0.01)
    # a clock sagging 0.5% per call: each window's median is ~5% above the previous one
    sag = [1.0 * (1.005 ** i) for i in range(40)]
    assert not is_steady(sag, 10, 0.01)
    # the sag stops: steady once two windows sit on the plateau
    plateau = sag + [sag[-1]] * 20
    assert is_steady(plateau, 10, 0.01)
    # one outlier per window does not move a median
    noisy = [1.0, 1.0, 3.0, 1.0, 1.0] * 4
    assert is_steady(noisy, 5, 0.01)
    assert not is_steady([1.0] * 10 + [1.02] * 10, 10, 0.01)
    assert is_steady([1.0] * 10 + [1.02] * 10, 10, 0.03)


def _ev(t0, t1, name, stream=7):
    return (int(t0 * 1000), int(t1 * 1000), name, stream)


def test_split_calls_stride1_spans_first_start_to_last_end():
    ev = []
    t = 0.0
    for k in range(3):
        ev += [_ev(t, t + 1, MARK), _ev(t + 2, t + 10, FLUSH), _ev(t + 20, t + 30, "k1"),
               _ev(t + 35, t + 50, "k2", stream=9)]
        t += 100
    ev += [_ev(t, t + 1, MARK), _ev(t + 2, t + 10, FLUSH)]
    tm = _split_calls(sorted(ev), 3)
    assert tm.samples_ms == pytest.approx([0.030] * 3)    # 20 -> 50 us, the gap counted
    assert tm.kernels_per_call == 2 and tm.side_streams == {9}


def test_split_calls_stride2_leaves_setup_out():
    """With a setup hook: [marker][setup][marker][flush][call] per call, closing marker. The
    setup's work (writing new values) must not land in any call's span."""
    ev = []
    t = 0.0
    for k in range(4):
        ev += [_ev(t, t + 1, MARK), _ev(t + 2, t + 400, "copy_setup"),       # long setup
               _ev(t + 500, t + 501, MARK), _ev(t + 502, t + 510, FLUSH),
               _ev(t + 520, t + 540, "kernel")]
        t += 1000
    ev += [_ev(t, t + 1, MARK)]
    tm = _split_calls(sorted(ev), 4, stride=2)
    assert tm.samples_ms == pytest.approx([0.020] * 4)
    assert tm.kernel_names == {"kernel"}
    with pytest.raises(TimingError):                          # stride 1 reading stride-2 events
        _split_calls(sorted(ev), 4)


def test_split_calls_rejects_a_missing_flush():
    ev = [_ev(0, 1, MARK), _ev(2, 10, FLUSH), _ev(20, 30, "k"),
          _ev(100, 101, MARK), _ev(120, 130, "k"), _ev(140, 150, "k"),
          _ev(200, 201, MARK)]
    with pytest.raises(TimingError):
        _split_calls(ev, 2)
