"""One profiler session per workload (Timer.batched, EvalConfig.one_session), on the CPU.

The timer's side: measurements made inside one session get their own calls back, cut at the marker
kernels in order, with whatever ran between them (the re-check, a reference) left out; a measurement
cannot be read before the session closes; a session that cannot start runs nothing, one whose
records do not add up says so. The evaluator's side: the timed calls, the re-check and the caching
probe's first round share one session, the probe still catches a cache, and when the session's
records cannot be read the workload is timed again (the probe left the buffers as the re-check
needs them)."""

from __future__ import annotations

import time

import pytest
import torch

from solforge.evaluate import evaluator
from solforge.evaluate import timing as timing_mod
from solforge.evaluate.evaluator import EvalConfig, Env, evaluate_workload
from solforge.evaluate.results import EvalStatus
from solforge.evaluate.timing import BatchUnavailable, Pending, Timing, TimingError
from tests.unit.adv_problem import reference_run, write_problem

MARK, FLUSH = "void at::cuda::(anonymous namespace)::spin_kernel(long)", "flush_kernel"


class _Gpu:
    """A pretend GPU timeline: each launch becomes a record (start_ns, end_ns, name, stream)."""

    def __init__(self, monkeypatch):
        self.t, self.events, self.opened = 0, [], []
        monkeypatch.setattr(timing_mod.torch.cuda, "_sleep", lambda c: self.run(MARK, 1_000))
        monkeypatch.setattr(timing_mod.torch.cuda, "synchronize", lambda *a, **k: None)

    def run(self, name: str, ns: int, stream: int = 7) -> None:
        self.events.append((self.t, self.t + ns, name, stream))
        self.t += ns + 500

    def timer(self, fail_open: bool = False):
        t = timing_mod.Timer.__new__(timing_mod.Timer)
        t.device, t.queued, t.method, t.backend = "cpu", True, "auto", "kineto"
        t._cupti_ok, t._batch, t.cupti_error = None, None, ""
        t.duty_gap_factor, t.duty_min_call_ms, t.paced_warmup_ms = 0.0, 0.5, 100.0
        t.last_warmup_calls, t.last_gap_s, t.last_call_ms = 0, 0.0, None
        t.strict_streams = True  # a candidate's timer: every record on the given stream
        t.flush = lambda: self.run(FLUSH, 40_000)

        def open_session():
            if fail_open:
                raise TimingError("profiler unavailable: no CUPTI here")
            self.opened.append(len(self.events))
            return ("kineto", None)

        def close_session(opened, ok):
            self.closed_ok = ok
            return sorted(self.events[self.opened[-1]:]) if ok else []

        t._open_session, t._close_session = open_session, close_session
        return t


def test_measurements_in_one_session_get_their_own_calls(monkeypatch):
    gpu = _Gpu(monkeypatch)
    timer = gpu.timer()
    got = {}

    def body():
        got["timed"] = timer.measure(lambda i: gpu.run("gemm", 10_000), 4, warmup_calls=3)
        with pytest.raises(TimingError):      # not readable while its session is open
            got["timed"].result()
        gpu.run("recheck_gemm", 90_000)        # between measurements: in no window
        gpu.run("reference_kernel", 70_000)
        got["probe"] = timer.measure(lambda i: gpu.run("gemm", 20_000), 3, warmup_ms=0,
                                     min_warmup_calls=0, setup=lambda i: gpu.run("randn", 5_000))
        return "body's answer"

    assert timer.batched(body) == "body's answer" and gpu.closed_ok
    timed, probe = got["timed"], got["probe"]
    assert isinstance(timed, Pending) and timed.result().samples_ms == pytest.approx([0.010] * 4)
    assert probe.result().samples_ms == pytest.approx([0.020] * 3)
    assert timed.result().kernel_names == {"gemm"} and probe.result().kernel_names == {"gemm"}
    assert timed.result().backend == "kineto"
    assert timer.last_call_ms is not None      # the warm-up's estimate, for the probe's size
    assert timer._batch is None
    # outside a session, measure measures on its own again (here: the events fallback's turn)
    timer._cupti_ok = False
    monkeypatch.setattr(timer, "_measure_events", lambda *a, **k: Timing([1.0], "events"))
    assert isinstance(timer.measure(lambda i: None, 2, warmup_ms=0, min_warmup_calls=0), Timing)


def test_a_session_whose_markers_do_not_add_up_is_an_error_after_its_body_ran(monkeypatch):
    gpu = _Gpu(monkeypatch)
    timer = gpu.timer()
    ran = []

    def body():
        timer.measure(lambda i: gpu.run("k", 10_000), 2, warmup_ms=0, min_warmup_calls=0)
        gpu.run(MARK, 1_000)                   # a kernel of the same name as the marker
        ran.append(True)

    with pytest.raises(TimingError) as e:
        timer.batched(body)
    assert not isinstance(e.value, BatchUnavailable) and ran and "marker" in str(e.value)


def test_no_session_no_body_and_a_failing_body_closes_its_session(monkeypatch):
    gpu = _Gpu(monkeypatch)
    ran = []
    with pytest.raises(BatchUnavailable):
        gpu.timer(fail_open=True).batched(lambda: ran.append(True))
    assert not ran
    timer = gpu.timer()

    def body():
        timer.measure(lambda i: gpu.run("k", 10_000), 2, warmup_ms=0, min_warmup_calls=0)
        raise ValueError("the candidate's own error")

    with pytest.raises(ValueError):
        timer.batched(body)
    assert gpu.closed_ok is False and timer._batch is None
    events = timing_mod.Timer.__new__(timing_mod.Timer)
    events._cupti_ok, events._batch, events.method = False, None, "auto"
    with pytest.raises(BatchUnavailable):      # timing by events: nothing to share
        events.batched(lambda: ran.append(True))
    assert not ran


# ── the evaluator ────────────────────────────────────────────────────────────────────────────────
REF = "import torch\n\n\n@torch.no_grad()\ndef run(x, y):\n    return torch.sin(x) + y\n"


class _WallTimer:
    """Timer's contract on the CPU, wall-clock samples; batched() defers every measurement inside it
    to the session's close, as the real one does. Counts sessions."""

    queued = True

    def __init__(self, fail_close: int = 0):
        self._batch, self.sessions, self.last_call_ms, self.fail_close = None, 0, 0.01, fail_close
        self.measured_in_session = []

    def measure(self, call, reps, *_a, setup=None, **_k):
        samples = []
        for i in range(reps):
            if setup is not None:
                setup(i)
            t0 = time.perf_counter()
            call(i)
            samples.append((time.perf_counter() - t0) * 1e3)
        t = Timing(samples, "events")
        if self._batch is not None:
            p = Pending(reps, 2 if setup is not None else 1)
            self._batch.append((p, t))
            return p
        self.sessions += 1
        return t

    def batched(self, body):
        self._batch, self.sessions = [], self.sessions + 1
        try:
            out = body()
        finally:
            pending, self._batch = self._batch, None
        self.measured_in_session.append(len(pending))
        if self.fail_close:
            self.fail_close -= 1
            raise TimingError("profiler stop failed: pretend")
        for p, t in pending:
            p.timing = t
        return out


class _Caller:
    """Honest, or (caching=True) answering values it has seen from a table and sleeping 3 ms on new
    ones: a cache the probe must catch in both rounds."""

    def __init__(self, caching: bool = False):
        self.caching, self.table = caching, {}

    def prepare(self, rw, inputs, outputs):
        def call():
            key = (inputs["x"][:8].tolist().__repr__(), inputs["y"][:8].tolist().__repr__())
            if self.caching and key in self.table:
                outputs["out"].copy_(self.table[key])
                return
            # 2 ms a call, honest: long enough that a loaded machine's wall-clock jitter stays well
            # under the probe's 20% between seen and fresh inputs (sin on 512 values alone is a few
            # microseconds, where that jitter read as a cache)
            time.sleep(0.003 if self.caching else 0.002)
            outputs["out"].copy_(torch.sin(inputs["x"]) + inputs["y"])
            self.table[key] = outputs["out"].clone()
        return call


@pytest.fixture()
def problem(tmp_path):
    from solforge.problem import load_problem_dir

    return load_problem_dir(write_problem(tmp_path, "S", "one_session", REF, [("w1", 512)]), subset="S")


def _env(problem, timer, caller, one_session=True):
    cfg = EvalConfig(correctness_rounds=2, timing=True, caching_probe=True, rep_count=8,
                     one_session=one_session, caching_probe_calls=4, caching_probe_max_calls=6)
    return Env(problem=problem.name, reference=reference_run(problem, "_one_session_ref"),
               caller=caller, device=torch.device("cpu"), config=cfg, timer=timer)


def test_timing_recheck_and_probe_share_one_session(problem):
    one, two = _WallTimer(), _WallTimer()
    res = evaluate_workload(_env(problem, one, _Caller()), problem.workloads[0])
    assert res.status is EvalStatus.PASSED, res.message
    assert one.sessions == 1 and one.measured_in_session == [2]   # timing and the probe's round
    assert res.extra["timing_session"] == "one per workload" and res.median_ms > 0
    assert res.extra["caching_probe"]["calls"] == 6              # sized from the warm-up estimate
    res2 = evaluate_workload(_env(problem, two, _Caller(), one_session=False), problem.workloads[0])
    assert res2.status is EvalStatus.PASSED and two.sessions == 2  # one each, as before
    assert "timing_session" not in res2.extra


def test_the_probe_still_catches_a_cache_in_one_session(problem):
    timer = _WallTimer()
    res = evaluate_workload(_env(problem, timer, _Caller(caching=True)), problem.workloads[0])
    assert res.status is EvalStatus.REJECTED and res.guard == "caching", (res.status, res.message)
    # the first round in the session, the second (the first was suspicious) in one of its own
    assert timer.sessions == 2 and len(res.message) > 0


def test_a_session_that_cannot_be_read_is_timed_again(problem):
    timer = _WallTimer(fail_close=1)
    res = evaluate_workload(_env(problem, timer, _Caller()), problem.workloads[0])
    # timed again one session per measurement; the re-check passes because the probe put the seen
    # values back into the buffers it had written new ones into
    assert res.status is EvalStatus.PASSED, res.message
    # the failed session, the timing's and one per probe round (a second round runs when the first
    # looked suspicious: wall-clock noise on a busy machine)
    rounds = len(res.extra["caching_probe"]["rounds"])
    assert "timed again" in res.message and timer.sessions == 2 + rounds
