"""The timer's logic that needs no GPU: the duty-cycle gap, steady-state detection, and cutting a
CUPTI event list into calls (with and without an untimed setup between calls)."""

from __future__ import annotations

import pytest

from solforge import settings
from solforge.evaluate.timing import SideStreams, TimingError, _split_calls, duty_gap_s, is_steady

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


def test_split_calls_times_each_kernel_of_a_plan():
    """Per kernel name: its summed time within each call (a kernel launched twice in a call counts
    twice), the median over the calls; the span of the call keeps the gaps, the kernels' times do
    not. top_kernels keeps the largest and sums the rest."""
    from solforge.evaluate.timing import OTHER_KERNELS, top_kernels

    ev, t = [], 0.0
    for k, mm_us in enumerate((10, 12, 40)):          # one slow outlier call for k0_mm
        ev += [_ev(t, t + 1, MARK), _ev(t + 2, t + 10, FLUSH), _ev(t + 20, t + 20 + mm_us, "k0_mm"),
               _ev(t + 70, t + 73, "k1_out"), _ev(t + 80, t + 83, "k1_out")]
        t += 100
    ev += [_ev(t, t + 1, MARK), _ev(t + 2, t + 10, FLUSH)]
    tm = _split_calls(sorted(ev), 3)
    assert tm.kernel_ms == pytest.approx({"k0_mm": 0.012, "k1_out": 0.006})
    assert tm.samples_ms == pytest.approx([0.063] * 3)    # 20 -> 83 us, gaps included
    # the GPU's own time per call: the kernels' summed durations (16, 18, 46 us), their median
    assert tm.busy_ms == pytest.approx(0.018)
    top = top_kernels({"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5}, n=2)
    assert top == {"a": 3.0, "b": 2.0, OTHER_KERNELS: 1.5}
    assert top_kernels({"a": 1.0}) == {"a": 1.0}


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


def test_a_side_stream_kernel_ahead_of_the_flush_is_named_not_taken_for_it():
    """A kernel on a stream of its own that starts between the marker and the flush is the first
    record of each window: read window by window it is taken for the flush (and the flush for the
    call's work), so the call's streams look like the given one alone. Strict (a candidate's
    measurement), every record's stream is checked first: SideStreams, the side-stream guard's
    evidence. An eager reference's timer keeps the window reading."""
    ev = []
    t = 0.0
    for k in range(2):
        ev += [_ev(t, t + 1, MARK), _ev(t + 1.5, t + 40, "side_work", stream=13),
               _ev(t + 2, t + 10, FLUSH), _ev(t + 20, t + 30, "k")]
        t += 100
    ev += [_ev(t, t + 1, MARK)]
    assert _split_calls(sorted(ev), 2).side_streams == set()   # what the window reading saw
    with pytest.raises(SideStreams) as strict:
        _split_calls(sorted(ev), 2, strict_streams=True)
    assert strict.value.streams == {13} and strict.value.names == {"side_work"}
    honest = [e for e in ev if e[3] == 7]
    assert _split_calls(sorted(honest), 2, strict_streams=True).n == 2


# ── SOL-ExecBench's window: queued calls, count-based warm-up, flush size ───────────────────────
from solforge.evaluate import timing as timing_mod  # noqa: E402
from solforge.evaluate.phases import PhaseClock  # noqa: E402


def test_flush_size_nvidia_is_twice_l2_solforge_has_a_floor():
    l2 = 60 << 20
    assert timing_mod.flush_size(l2, "nvidia") == 120 << 20
    assert timing_mod.flush_size(l2) == max(120 << 20, timing_mod.MIN_FLUSH_BYTES)
    assert timing_mod.flush_size(16 << 20) == timing_mod.MIN_FLUSH_BYTES
    assert timing_mod.flush_size(0, "nvidia") == timing_mod.MIN_FLUSH_BYTES


def test_warmup_plan_queues_short_calls_and_paces_long_ones():
    assert timing_mod.warmup_plan(0.05, 10, 0.5, 1.0) == "queued"
    assert timing_mod.warmup_plan(2.0, 10, 0.5, 1.0) == "paced"
    assert timing_mod.warmup_plan(2.0, 10, 0.5, 0.0) == "queued"     # duty cycle off
    assert timing_mod.warmup_plan(2.0, 1, 0.5, 1.0) == "done"


class _Log:
    """Records the order of GPU-side steps the timer issues (no GPU here)."""

    def __init__(self, monkeypatch):
        self.steps: list[str] = []
        monkeypatch.setattr(timing_mod.torch.cuda, "_sleep", lambda c: self.steps.append("marker"))
        monkeypatch.setattr(timing_mod.torch.cuda, "synchronize",
                            lambda *a, **k: self.steps.append("sync"))

    def timer(self, queued: bool):
        t = timing_mod.Timer.__new__(timing_mod.Timer)
        t.queued, t.device = queued, "cpu"
        t.flush = lambda: self.steps.append("flush")
        return t


def test_queued_window_has_no_synchronize_between_flush_and_call(monkeypatch):
    log = _Log(monkeypatch)
    log.timer(True)._timed_loop(lambda i: log.steps.append(f"call{i}"), 2, 0.0, None)
    assert log.steps == ["marker", "flush", "call0", "sync", "marker", "flush", "call1", "sync",
                         "marker", "flush", "sync"]
    log.steps.clear()
    log.timer(False)._timed_loop(lambda i: log.steps.append(f"call{i}"), 1, 0.0, None)
    assert log.steps == ["marker", "flush", "sync", "call0", "sync", "marker", "flush", "sync"]


def test_queued_window_with_setup_keeps_setup_between_its_own_markers(monkeypatch):
    log = _Log(monkeypatch)
    log.timer(True)._timed_loop(lambda i: log.steps.append("call"), 1, 0.0,
                                lambda i: log.steps.append("setup"))
    assert log.steps == ["marker", "setup", "marker", "flush", "call", "sync", "marker", "sync"]


def test_split_calls_queued_call_starts_when_the_flush_ends():
    """Queued: the call's first kernel starts at the flush's end (no idle gap); the span is still
    first kernel start -> last kernel end, the flush never inside it."""
    ev = []
    t = 0.0
    for k in range(3):
        ev += [_ev(t, t + 1, MARK), _ev(t + 1, t + 40, FLUSH), _ev(t + 40, t + 45, "k1"),
               _ev(t + 45.5, t + 50, "k2")]
        t += 100
    ev += [_ev(t, t + 1, MARK), _ev(t + 1, t + 40, FLUSH)]
    tm = timing_mod._split_calls(sorted(ev), 3)
    assert tm.samples_ms == pytest.approx([0.010] * 3)


class _Act:
    def __init__(self, kind, start, end, name=None, stream_id=7):
        self.kind, self.start, self.end, self.stream_id = kind, start, end, stream_id
        if name is not None:
            self.name = name


def test_cupti_python_records_become_timer_events():
    """cupti-python hands back mangled kernel names: the marker is still found by its name."""
    import enum

    class Kind(enum.IntEnum):
        CONCURRENT_KERNEL = 10
        MEMCPY = 1
        MEMSET = 2
        RUNTIME = 5

    s = timing_mod.CuptiPython.__new__(timing_mod.CuptiPython)
    s._kernel, s._names, s.records = int(Kind.CONCURRENT_KERNEL), {1: "memcpy", 2: "memset"}, []
    mangled_marker = "_ZN2at6native12_GLOBAL__N_111spin_kernelEl"
    s._completed([_Act(Kind.CONCURRENT_KERNEL, 0, 1000, mangled_marker),
                  _Act(Kind.MEMSET, 1000, 40000), _Act(Kind.RUNTIME, 0, 5),
                  _Act(Kind.CONCURRENT_KERNEL, 40000, 50000, "_Z6kernelPf"),
                  _Act(Kind.CONCURRENT_KERNEL, 100000, 101000, mangled_marker),
                  _Act(Kind.MEMSET, 101000, 140000)])
    assert len(s.records) == 5 and s.records[1][2] == "memset"
    tm = timing_mod._split_calls(sorted(s.records), 1)
    assert tm.samples_ms == pytest.approx([0.010]) and tm.kernel_names == {"_Z6kernelPf"}


def test_backend_from_environment(monkeypatch):
    monkeypatch.setenv("SOLFORGE_CUPTI_BACKEND", "kineto")
    assert timing_mod.default_backend() == "kineto"
    monkeypatch.setenv("SOLFORGE_CUPTI_BACKEND", "nonsense")
    assert timing_mod.default_backend() == "auto"


def test_phase_clock_nested_phases_are_exclusive(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("solforge.evaluate.phases.time.perf_counter", lambda: now[0])
    c = PhaseClock()
    with c.phase("timing_profile"):
        now[0] += 1.0
        with c.phase("inputs"):
            now[0] += 0.25
        now[0] += 0.5
    with c.phase("inputs"):
        now[0] += 0.1
    assert c.seconds["timing_profile"] == pytest.approx(1.5)
    assert c.seconds["inputs"] == pytest.approx(0.35)
    assert sum(c.seconds.values()) == pytest.approx(now[0])     # no second counted twice


def test_a_paced_warmup_stops_at_its_budget_but_runs_two_calls():
    calls = timing_mod.paced_warmup_calls
    assert calls(0.6, 10, 100.0) == 10          # 0.6 ms calls: all ten fit in 100 ms
    assert calls(30.0, 10, 100.0) == 4          # the first, then three more within 100 ms
    assert calls(250.0, 10, 100.0) == 2         # one more call at least, past the budget
    assert calls(30.0, 10, 0.0) == 10           # no budget: SOL-ExecBench's count
    assert calls(30.0, 1, 100.0) == 1


class _FakeCupti:
    """The three calls CuptiPython makes on cupti, logged; a flush hands over what `pending` holds."""

    def __init__(self, session):
        self.session, self.log, self.pending = session, [], []

    def activity_enable(self, k):
        self.log.append(("on", k))

    def activity_disable(self, k):
        self.log.append(("off", k))

    def activity_flush_all(self, forced):
        self.log.append(("flush", forced))
        acts, self.pending = self.pending, []
        self.session._completed(acts)


def _fake_session(monkeypatch):
    import enum

    class Kind(enum.IntEnum):
        MEMCPY, MEMSET, RUNTIME, DRIVER, CONCURRENT_KERNEL = 1, 2, 5, 6, 10

    monkeypatch.setattr(timing_mod.torch.cuda, "synchronize", lambda *a: None)
    s = timing_mod.CuptiPython.__new__(timing_mod.CuptiPython)
    s._kernel, s._names, s.records, s._on = 10, {1: "memcpy", 2: "memset"}, [], set()
    s.gpu_kinds = (Kind.CONCURRENT_KERNEL, Kind.MEMCPY, Kind.MEMSET)
    s.api_kinds = (Kind.RUNTIME, Kind.DRIVER)
    s.cupti = _FakeCupti(s)
    return s, Kind


def test_cupti_gpu_kinds_stay_on_and_untimed_records_are_dropped(monkeypatch):
    s, Kind = _fake_session(monkeypatch)
    untimed = _Act(Kind.CONCURRENT_KERNEL, 0, 10, "correctness_check_kernel")
    timed = _Act(Kind.CONCURRENT_KERNEL, 100, 110, "timed_kernel")

    def body():
        s.cupti.pending.append(timed)

    assert [e[2] for e in s.collect(body, None, api=False)] == ["timed_kernel"]
    turned_on = [k for op, k in s.cupti.log if op == "on"]
    assert sorted(turned_on) == sorted(s.gpu_kinds) and not any(op == "off" for op, _ in s.cupti.log)
    s.cupti.log.clear()
    s.cupti.pending.append(untimed)          # recorded between two measurements
    assert [e[2] for e in s.collect(body, None, api=False)] == ["timed_kernel"]
    assert [op for op, _ in s.cupti.log] == ["flush", "flush"]   # nothing turned on or off again
    # SOL-ExecBench's way afterwards: the API kinds join for one measurement, then all go off
    s.cupti.log.clear()
    s.collect(body, None, api=True)
    assert {k for op, k in s.cupti.log if op == "on"} == set(s.api_kinds)
    assert {k for op, k in s.cupti.log if op == "off"} == set(s.api_kinds) | set(s.gpu_kinds)
    assert s._on == set()


def test_cupti_gpu_is_a_backend(monkeypatch):
    monkeypatch.setenv("SOLFORGE_CUPTI_BACKEND", "cupti-gpu")
    assert timing_mod.default_backend() == "cupti-gpu"


def test_evaluate_command_names_the_slowest_kernel():
    """`solforge evaluate`'s table names each workload's kernel of most time and its share."""
    from solforge.cli.evaluate_cmds import _slowest_kernel
    from solforge.evaluate.results import EvalResult

    r = EvalResult("u", "passed", extra={"kernel_ms": {"k0_mm": 0.03, "k1_out": 0.01}})
    assert _slowest_kernel(r) == "k0_mm 75%"
    assert _slowest_kernel(EvalResult("u", "incorrect")) == ""
