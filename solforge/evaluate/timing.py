"""GPU timing as SOL-ExecBench measures it: per call, the span from the first kernel's start to the
last kernel's end, on every stream, read from CUPTI activity records. CPU launch overhead before the
first kernel is not counted; gaps between kernels are.

CUPTI from Python, two backends reading the same activity records (kernels, memcpy, memset: GPU
start/end timestamps and stream ids): `cupti-python` (NVIDIA's CUPTI bindings, the package
SOL-ExecBench's own timer uses) when it imports, else torch.profiler (kineto). A kineto session costs
12-28 ms to start, stop and parse, which at two sessions per workload (timing, caching probe) was the
largest fixed cost of an evaluation. cupti-python in SOL-ExecBench's way (`cupti-python`: runtime and
driver API records too, every kind turned on and off around each measurement) measured dearer still
on the H200 (data/results/eval_throughput/). `cupti-gpu` reads the same GPU records through
cupti-python with the GPU kinds alone, turned on once for the process and left on: a measurement then
costs a flush that drops what the untimed work recorded, the calls and a flush that collects them.
Calls are told apart by a marker kernel (torch.cuda._sleep's spin kernel) launched before each
call's L2 flush; everything after a flush and before the next marker belongs to that call, on
whatever stream it ran. `Timer.batched(body)` holds one session around several measurements (a
workload's timing and its caching probe: settings.timing_one_session), each measurement owning its
markers in order, and reads them all when the session closes.

The window is SOL-ExecBench's ("queued"): [marker][flush][call ...] sync [marker][flush] ...: the
call is launched right behind the flush, with no synchronize in between, so its first kernel starts
on the GPU the moment the flush ends and the host's launch latency for the first kernels is hidden
behind the flush, as in NVIDIA's evaluator (docs/timing_agreement.md). queued=False puts a
synchronize between the flush and the call (the window solforge used before): then every host gap
between the call's kernels is counted from an idle GPU, which read launch-bound eager references
up to 2x slower than NVIDIA measures them.

Warm-up: `warmup_calls` calls (10, SOL-ExecBench's default), each after a flush, queued; or, the
older way, as many calls as fill `warmup_ms` of wall time.

Fallback ("events"): CUDA events on the current stream with a device synchronize before each start
event. It counts the launch overhead of the first kernel and misses work on other streams; the result
records which method produced it.

Between calls the L2 is flushed by writing a buffer of max(2 x L2, 128 MiB) (reference timing:
2 x L2, NVIDIA's size). Several input sets are rotated so that no call sees the previous call's data
in cache.

Duty cycle: after every call that takes at least `duty_min_call_ms` (wall), the timer idles for
`duty_gap_factor` times that call's time, in the warm-up and in the timed calls. Why: on the H200 a
bf16 GEMM that runs the tensor cores flat out for seconds pulls the card to its power limit and the
SM clock drops (8192^3: 1.39 ms cool, 1.60 ms after ~10 s of load; 15% between two measurements),
so back-to-back timing measures the card's recent history, not the kernel. Idling as long as the
kernel ran keeps the average power far under the limit, so each measurement starts and stays in the
same (full-clock) state; clocks are never touched. Short kernels already idle between calls (marker,
flush, synchronize, Python) and are left as they were. benchmarks/timing_spread.py measures this.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

MIN_FLUSH_BYTES = 128 << 20
# SOL-ExecBench's defaults (BenchmarkConfig): warm-up calls and timed calls per measurement
NVIDIA_WARMUP_CALLS = 10
NVIDIA_REPS = 50
BACKENDS = ("auto", "cupti-python", "cupti-gpu", "kineto")


def duty_gap_s(call_ms: float, gap_factor: float, min_call_ms: float) -> float:
    """Idle seconds after a call that took call_ms (wall): gap_factor x its time for calls of at
    least min_call_ms, none for shorter ones or when the factor is 0."""
    if gap_factor <= 0 or not call_ms or call_ms < min_call_ms:
        return 0.0
    return gap_factor * call_ms / 1e3


def is_steady(samples: list, window: int, tol: float) -> bool:
    """True once the median of the last `window` samples is within `tol` (relative) of the median
    of the `window` before them: per-call time has stopped drifting (clocks, power, caches)."""
    if window < 1 or len(samples) < 2 * window:
        return False
    last = statistics.median(samples[-window:])
    prev = statistics.median(samples[-2 * window:-window])
    return prev > 0 and abs(last - prev) / prev <= tol


@dataclass
class Timing:
    samples_ms: list[float]
    method: str                         # "cupti" | "events"
    streams: set = field(default_factory=set)      # stream ids the measured kernels ran on
    kernel_names: set = field(default_factory=set)
    kernels_per_call: float = 0.0
    base_stream: Optional[int] = None   # the stream the call was given (the marker's stream)
    note: str = ""
    backend: str = ""                   # cupti: "cupti-python" | "kineto"
    # per kernel name: the median over the timed calls of its summed durations within a call (ms);
    # a plan of several kernels shows which segment the time goes to (profiler records only)
    kernel_ms: dict = field(default_factory=dict)
    # the GPU's own time per call: the median over the timed calls of the summed durations of the
    # call's recorded activities (kernels, copies, memsets), in ms. What the span (samples_ms)
    # holds beyond it is host time between launches: a launch-bound call (a chain of small eager
    # kernels) reads the host's launch speed, not the GPU's (docs/timing_agreement.md). None when
    # timed by CUDA events.
    busy_ms: Optional[float] = None

    @property
    def side_streams(self) -> set:
        if self.base_stream is None:
            return set()
        return {s for s in self.streams if s != self.base_stream}

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def quantile(self, q: float) -> float:
        s = sorted(self.samples_ms)
        if not s:
            return float("nan")
        pos = q * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else float("nan")

    @property
    def p10_ms(self) -> float:
        return self.quantile(0.10)

    @property
    def p90_ms(self) -> float:
        return self.quantile(0.90)

    @property
    def spread(self) -> float:
        m = self.median_ms
        return (self.p90_ms - self.p10_ms) / m if m and m > 0 else float("nan")


OTHER_KERNELS = "(other kernels)"


def top_kernels(kernel_ms: dict, n: int = 24) -> dict:
    """The n kernels of most time (ms, rounded to ns), the rest summed under OTHER_KERNELS: plans of
    thousands of launches keep one row of the store readable."""
    ranked = sorted(kernel_ms.items(), key=lambda kv: -kv[1])
    out = {k: round(v, 6) for k, v in ranked[:n]}
    if len(ranked) > n:
        out[OTHER_KERNELS] = round(sum(v for _, v in ranked[n:]), 6)
    return out


class TimingError(RuntimeError):
    pass


class SideStreams(TimingError):
    """The profiler's records of a measurement show GPU work on a stream other than the one the call
    was given. Raised whatever else the records say (a window that cannot be cut is no excuse to fall
    back to CUDA events, which see only the given stream): the evaluator's side-stream guard."""

    def __init__(self, streams: set, names: set):
        self.streams, self.names = set(streams), set(names)
        super().__init__(f"GPU work on stream(s) {sorted(self.streams)} besides the given one")


class BatchUnavailable(TimingError):
    """Timer.batched could not start a profiler session; its body has not run."""


class Pending:
    """A measurement made inside Timer.batched: its Timing, read once the session has closed."""

    def __init__(self, reps: int, stride: int):
        self.reps, self.stride = reps, stride
        self.timing: Optional[Timing] = None

    def result(self) -> Timing:
        if self.timing is None:
            raise TimingError("a measurement read before its profiler session closed")
        return self.timing


def resolved(t) -> Timing:
    """A Timing, whether measured on its own or inside Timer.batched (then once it has closed)."""
    return t.result() if isinstance(t, Pending) else t


def _l2_bytes(device=None) -> int:
    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 0)


def flush_size(l2_bytes: int, style: str = "solforge") -> int:
    """Bytes written to flush the L2: solforge max(2 x L2, 128 MiB); "nvidia" 2 x L2 (their
    _get_empty_cache_for_benchmark), 128 MiB where the L2 size is unknown."""
    if style == "nvidia" and l2_bytes > 0:
        return 2 * l2_bytes
    return max(2 * l2_bytes, MIN_FLUSH_BYTES)


def flush_bytes(device=None) -> int:
    return flush_size(_l2_bytes(device))


def default_backend() -> str:
    """$SOLFORGE_CUPTI_BACKEND (one of BACKENDS), else auto."""
    import os

    v = os.environ.get("SOLFORGE_CUPTI_BACKEND", "auto").strip().lower()
    return v if v in BACKENDS else "auto"


def warmup_plan(first_wall_ms: float, n: int, duty_min_call_ms: float, gap_factor: float) -> str:
    """How the rest of a count-based warm-up runs after its first (synchronized) call: "queued"
    (launched back to back behind their flushes, one synchronize at the end: short calls) or
    "paced" (each synchronized and followed by its duty-cycle idle: calls long enough to heat the
    card). "done" when the first call was the only one."""
    if n <= 1:
        return "done"
    return "paced" if duty_gap_s(first_wall_ms, gap_factor, duty_min_call_ms) > 0 else "queued"


def paced_warmup_calls(first_wall_ms: float, n: int, budget_ms: float) -> int:
    """How many calls a paced warm-up (calls long enough for the duty cycle) runs, the first included:
    SOL-ExecBench's n, cut once the calls after the first would take more than `budget_ms`, at
    least two. Paced calls run on a card the duty cycle keeps cool, so the warm-up only settles
    first-call effects (lazy loads, allocator growth), which one more call does; ten calls of a
    30 ms compiler plan, each followed by its idle, were most of an evaluation's exclusive time."""
    if n <= 2 or budget_ms <= 0:
        return n
    return max(2, min(n, 1 + int(budget_ms // max(first_wall_ms, 1e-3))))


class Timer:
    """Times a call on the GPU. `call(i)` must launch one call's work using input set i (mod sets)."""

    def __init__(self, device=None, method: str = "auto", duty_gap_factor: Optional[float] = None,
                 duty_min_call_ms: Optional[float] = None, queued: bool = True,
                 flush_style: str = "solforge", backend: Optional[str] = None,
                 strict_streams: bool = False):
        self.device = torch.device(device or "cuda")
        # a candidate's measurement: GPU records on any stream but the given one raise SideStreams
        # (an eager reference's own library streams are its business)
        self.strict_streams = bool(strict_streams)
        self.flush_buf = torch.empty(flush_size(_l2_bytes(self.device), flush_style),
                                     dtype=torch.uint8, device=self.device)
        self.method = method
        self.queued = bool(queued)      # no synchronize between the flush and the call (NVIDIA's)
        self.backend = backend if backend in BACKENDS else default_backend()
        self._cupti_ok: Optional[bool] = None if method in ("auto", "cupti") else False
        self.cupti_error = ""
        from .. import settings

        cfg = settings.get()
        self.duty_gap_factor = float(cfg.duty_gap_factor if duty_gap_factor is None else duty_gap_factor)
        self.duty_min_call_ms = float(cfg.duty_min_call_ms if duty_min_call_ms is None
                                      else duty_min_call_ms)
        self.paced_warmup_ms = float(cfg.paced_warmup_ms)
        self.last_warmup_calls = 0      # how many calls the last warm-up ran (steady warm-ups vary)
        self.last_gap_s = 0.0           # idle after each timed call in the last measurement
        # the last warm-up's wall ms of one flushed call (an upper bound of its GPU time): what sizes
        # work that follows a measurement inside Timer.batched, before its samples can be read
        self.last_call_ms: Optional[float] = None
        self._batch: Optional[list] = None   # the Pendings of the open Timer.batched session

    def gap_s(self, call_ms: float) -> float:
        return duty_gap_s(call_ms, self.duty_gap_factor, self.duty_min_call_ms)

    def flush(self) -> None:
        self.flush_buf.zero_()

    def warmup(self, call: Callable[[int], object], warmup_ms: float, min_calls: int = 2,
               max_calls: int = 1000, steady: Optional[tuple] = None) -> float:
        """Run until warmup_ms of wall time have passed (at least min_calls); returns the median wall
        ms of one flushed call, an upper bound of its GPU time used to size the repetitions and the
        duty-cycle gap. Each call is followed by the duty-cycle idle, as in the timed calls.
        steady=(window, tol, max_ms): go on past warmup_ms until is_steady(per-call wall times) or
        max_ms of wall time."""
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        walls: list[float] = []
        n = 0
        while True:
            elapsed_ms = (time.perf_counter() - t0) * 1e3
            if n >= min_calls:
                if steady is not None:
                    window, tol, max_ms = steady
                    if elapsed_ms >= max_ms or (elapsed_ms >= warmup_ms and
                                                is_steady(walls, int(window), float(tol))):
                        break
                elif elapsed_ms >= warmup_ms or n >= max_calls:
                    break
            t1 = time.perf_counter()
            self.flush()
            call(n)
            torch.cuda.synchronize(self.device)
            walls.append((time.perf_counter() - t1) * 1e3)
            n += 1
            gap = self.gap_s(walls[-1])
            if gap:
                time.sleep(gap)
        self.last_warmup_calls = n
        return statistics.median(walls)

    def warmup_n(self, call: Callable[[int], object], n: int,
                 setup: Optional[Callable[[int], object]] = None) -> float:
        """SOL-ExecBench's warm-up: n calls, each after an L2 flush. The first is synchronized to
        learn its wall time; short calls then run queued (no synchronize until the end), long ones
        paced by the duty cycle (warmup_plan). Returns an upper bound of one flushed call's GPU
        time in ms (sizes the repetitions and the duty-cycle gap)."""
        n = max(int(n), 1)
        torch.cuda.synchronize(self.device)
        t1 = time.perf_counter()
        if setup is not None:
            setup(0)
        self.flush()
        call(0)
        torch.cuda.synchronize(self.device)
        first = (time.perf_counter() - t1) * 1e3
        plan = warmup_plan(first, n, self.duty_min_call_ms, self.duty_gap_factor)
        walls = [first]
        if plan == "paced":
            n = paced_warmup_calls(first, n, self.paced_warmup_ms)
            time.sleep(self.gap_s(first))
            for i in range(1, n):
                t1 = time.perf_counter()
                if setup is not None:
                    setup(i)
                self.flush()
                call(i)
                torch.cuda.synchronize(self.device)
                walls.append((time.perf_counter() - t1) * 1e3)
                time.sleep(self.gap_s(walls[-1]))
        elif plan == "queued":
            t1 = time.perf_counter()
            for i in range(1, n):
                if setup is not None:
                    setup(i)
                self.flush()
                call(i)
            torch.cuda.synchronize(self.device)
            walls = [(time.perf_counter() - t1) * 1e3 / (n - 1)]
        self.last_warmup_calls = n
        return statistics.median(walls)

    def measure(self, call: Callable[[int], object], reps: int, warmup_ms: float = 25.0,
                budget_s: float = 10.0, min_warmup_calls: int = 2, min_reps: int = 5,
                setup: Optional[Callable[[int], object]] = None,
                steady: Optional[tuple] = None, warmup_calls: Optional[int] = None) -> Timing:
        """Warm up, then time `reps` flushed calls (fewer if they would exceed budget_s, but at least
        min_reps). warmup_calls > 0: that many warm-up calls (warmup_n, SOL-ExecBench's way) instead
        of warmup_ms of them. With warmup_ms=0 and min_warmup_calls=0 (no warmup_calls) every timed
        call is a first call (the caching probe). `setup(i)`, if given, runs before call i's marker
        and flush, untimed (the caching probe writes new values into the buffers there)."""
        gap = 0.0
        per_call_ms = None
        if warmup_calls is not None and warmup_calls > 0:
            per_call_ms = self.warmup_n(call, warmup_calls, setup=setup)
        elif warmup_ms > 0 or min_warmup_calls > 0:
            per_call_ms = self.warmup(call, warmup_ms, min_calls=max(min_warmup_calls, 1),
                                      steady=steady)
        if per_call_ms is not None:
            self.last_call_ms = per_call_ms
            gap = self.gap_s(per_call_ms)
            busy_ms = per_call_ms + gap * 1e3
            reps = max(min(reps, min_reps), min(reps, int(budget_s * 1e3 / max(busy_ms, 1e-3))))
        self.last_gap_s = gap
        if self._batch is not None:
            # inside Timer.batched: the calls go into its session, read when it closes
            self._timed_loop(call, reps, gap, setup)
            pending = Pending(reps, 2 if setup is not None else 1)
            self._batch.append(pending)
            return pending
        if self._cupti_ok is not False:
            try:
                t = self._measure_cupti(call, reps, gap, setup)
                self._cupti_ok = True
                return t
            except SideStreams:
                raise
            except TimingError as e:
                if self.method == "cupti":
                    raise
                self._cupti_ok = False
                self.cupti_error = str(e)
        return self._measure_events(call, reps, gap, setup)

    # ── one profiler session around several measurements ────────────────────────────────────────
    def batched(self, body: Callable[[], object]):
        """Run body() inside one profiler session; returns what body returns. Every measure() body
        makes times its calls in that session and returns a Pending, whose Timing is read once the
        session has closed: the marker kernels are counted off in order (a measurement of `reps`
        calls owns stride x reps + 1 of them), and whatever body runs between measurements (the
        re-check, a reference) lies outside every window. One session where a workload had two
        (timing, then the caching probe): kineto's start, stop and parse cost 12-28 ms each.
        Raises BatchUnavailable (body not run) where no session can be had, TimingError where the
        session's records cannot be read after body ran (its calls must be timed again)."""
        if self._batch is not None:
            return body()               # already inside one
        if self._cupti_ok is False or self.method == "events":
            raise BatchUnavailable("timing by CUDA events: no profiler session")
        try:
            cupti = self._cupti_session()
        except TimingError as e:
            raise BatchUnavailable(str(e)) from None
        if cupti is not None:
            # cupti-python handed over no records of a session that held several measurements on
            # the H200 (tests/gpu/test_gpu_timing_window.py, 2026-12-03), one measurement's own
            # session reads fine: with cupti-python each measurement keeps its session
            raise BatchUnavailable("cupti-python: one session per measurement")
        try:
            opened = self._open_session()
        except TimingError as e:
            raise BatchUnavailable(str(e)) from None
        pending: list[Pending] = []
        self._batch = pending
        try:
            out = body()                # the candidate's errors propagate as they are
        except BaseException:
            try:
                self._close_session(opened, ok=False)
            except Exception:  # noqa: BLE001 - the body's error is the one that counts
                pass
            raise
        finally:
            self._batch = None
        events = self._close_session(opened, ok=True)
        _split_batch(events, pending, opened[0], self.strict_streams)
        return out

    def _cupti_session(self) -> Optional["CuptiPython"]:
        """The cupti-python session this timer's backend asks for, or None: kineto (asked for, or
        `auto` where cupti-python does not import). A cupti backend asked for by name that does not
        import raises TimingError."""
        if self.backend not in ("auto", "cupti-python", "cupti-gpu"):
            return None
        session = CuptiPython.get()
        if session is None:
            if self.backend != "auto":
                raise TimingError(f"{self.backend} unavailable: {CuptiPython.error}")
            self.backend = "kineto"
        return session

    def _open_session(self) -> tuple:
        """(backend, handle) of a started kineto session (batched's; cupti-python is not batched)."""
        return ("kineto", _kineto_start())

    def _close_session(self, opened: tuple, ok: bool) -> list:
        return _kineto_stop(opened[1], ok)

    # ── events ──────────────────────────────────────────────────────────────────────────────────
    def _measure_events(self, call, reps: int, gap_s: float = 0.0, setup=None) -> Timing:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if setup is not None:
                setup(i)
            self.flush()
            if not self.queued:
                torch.cuda.synchronize(self.device)
            starts[i].record()
            call(i)
            ends[i].record()
            if gap_s or not self.queued:
                # the idle must follow the call's GPU work, not its launch
                torch.cuda.synchronize(self.device)
                if gap_s:
                    time.sleep(gap_s)
        torch.cuda.synchronize(self.device)
        note = f"events fallback ({self.cupti_error})" if self.cupti_error else "events"
        return Timing([s.elapsed_time(e) for s, e in zip(starts, ends)], "events", note=note)

    # ── CUPTI ───────────────────────────────────────────────────────────────────────────────────
    def _timed_loop(self, call, reps: int, gap_s: float, setup) -> None:
        """The profiled calls: [marker][flush][call] (queued) or [marker][flush] sync [call], a
        synchronize after each call, a closing marker; with setup, its work between two markers."""
        def marker_and_flush():
            torch.cuda._sleep(1)
            self.flush()

        for i in range(reps):
            if setup is not None:
                # setup's GPU work sits between two markers of its own, outside every
                # call's window: [end marker][setup] [marker][flush] [call] [end marker]...
                torch.cuda._sleep(1)
                setup(i)
            marker_and_flush()
            if not self.queued:
                torch.cuda.synchronize(self.device)
            call(i)
            torch.cuda.synchronize(self.device)
            if gap_s:
                time.sleep(gap_s)
        if setup is not None:
            torch.cuda._sleep(1)
        else:
            marker_and_flush()
        torch.cuda.synchronize(self.device)

    def _measure_cupti(self, call, reps: int, gap_s: float = 0.0, setup=None) -> Timing:
        body = lambda: self._timed_loop(call, reps, gap_s, setup)  # noqa: E731
        backend = self.backend
        events = None
        session = self._cupti_session()
        if session is None:
            backend = "kineto"
        else:
            try:
                api = backend != "cupti-gpu"
                events = session.collect(body, self.device, api=api)
                backend = "cupti-python" if api else "cupti-gpu"
            except TimingError as e:
                if backend != "auto":
                    raise
                # kineto gets its turn (the calls run again; nothing was measured yet)
                self.cupti_error = str(e)
                self.backend = backend = "kineto"
        if events is None:
            events = _kineto_collect(body)
        t = _split_calls(events, reps, stride=2 if setup is not None else 1,
                         strict_streams=self.strict_streams)
        t.backend = backend
        return t


class CuptiPython:
    """CUPTI's activity API through cupti-python, one registration per process.
    collect(body, api=True) is SOL-ExecBench's measurement: runtime and driver API, kernel, memcpy
    and memset records on, body, synchronize, flush, all of them off again (never finalizes: the
    next measurement costs no re-initialization). collect(body, api=False) turns the GPU kinds on
    once and leaves them on; each measurement first drops what was recorded since the last one.
    get() is None where the package does not import (then kineto is used)."""

    _instance: Optional["CuptiPython"] = None
    error = ""

    @classmethod
    def get(cls) -> Optional["CuptiPython"]:
        if cls._instance is None and not cls.error:
            try:
                cls._instance = cls()
            except Exception as e:  # noqa: BLE001 - no package, no libcupti: kineto instead
                cls.error = f"{type(e).__name__}: {e}"[:300]
        return cls._instance

    def __init__(self):
        from cupti import cupti

        self.cupti = cupti
        kinds = cupti.ActivityKind
        # SOL-ExecBench's timing turns the runtime and driver API records on as well; tracing every
        # API call adds host time between a multi-kernel call's launches (an eager reference's
        # span grows by it, a single kernel's does not), so the same kinds give the same window.
        # Their records are only read for what they cost: _completed keeps GPU activity alone.
        self.gpu_kinds = (kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET)
        self.api_kinds = (kinds.RUNTIME, kinds.DRIVER)
        self._names = {int(kinds.MEMCPY): "memcpy", int(kinds.MEMSET): "memset"}
        self._kernel = int(kinds.CONCURRENT_KERNEL)
        self._on: set = set()
        self.records: list = []
        cupti.activity_register_callbacks(self._requested, self._completed)

    @staticmethod
    def _requested():
        return 8 << 20, 0           # bytes per buffer, no record limit

    def _completed(self, activities) -> None:
        out = self.records
        for a in activities:
            k = int(a.kind)
            if k == self._kernel:
                name = a.name
            else:
                name = self._names.get(k)
                if name is None:
                    continue
            out.append((int(a.start), int(a.end), str(name), int(getattr(a, "stream_id", -1))))

    def _turn_on(self, kinds) -> None:
        # nothing is ever on beyond `kinds`: the API kinds go off with everything after their
        # measurement (_turn_off), the GPU kinds are in every measurement's set
        try:
            for k in kinds:
                if k not in self._on:
                    self.cupti.activity_enable(k)
                    self._on.add(k)
        except Exception as e:  # noqa: BLE001
            raise TimingError(f"cupti-python: activity_enable failed: {e}") from None

    def _turn_off(self) -> None:
        for k in list(self._on):
            try:
                self.cupti.activity_disable(k)
            except Exception:  # noqa: BLE001
                pass
            self._on.discard(k)

    def begin(self, device, api: bool = True) -> None:
        """Start a measurement: its kinds on (the GPU kinds stay on between measurements)."""
        kinds = self.gpu_kinds + (self.api_kinds if api else ())
        if not api and set(kinds) <= self._on:
            # left on since the last measurement: drop what the untimed work recorded meanwhile
            torch.cuda.synchronize(device)
            self.cupti.activity_flush_all(0)
        self.records = []
        self._turn_on(kinds)

    def stop(self, device, api: bool = True) -> None:
        try:
            torch.cuda.synchronize(device)
        finally:
            try:
                # after the synchronize every record is complete, and the unforced flush (the
                # one SOL-ExecBench's timing calls) hands every completed record over
                self.cupti.activity_flush_all(0)
            finally:
                if api:
                    self._turn_off()

    def end(self, device, api: bool = True) -> list[tuple[int, int, str, int]]:
        """Stop the measurement begun last; its GPU records in start order."""
        self.stop(device, api)
        events, self.records = sorted(self.records), []
        if not events:
            raise TimingError("cupti-python recorded no GPU activity")
        return events

    def collect(self, body: Callable[[], None], device, api: bool = True
                ) -> list[tuple[int, int, str, int]]:
        self.begin(device, api)
        try:
            body()                    # the candidate's errors propagate as they are
        except BaseException:
            self.stop(device, api)
            raise
        return self.end(device, api)


def _kineto_start():
    from torch.profiler import ProfilerActivity, profile

    try:
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as e:  # noqa: BLE001 - any profiler trouble means: use the fallback
        raise TimingError(f"profiler unavailable: {type(e).__name__}: {e}") from None
    return prof


def _kineto_stop(prof, ok: bool) -> list[tuple[int, int, str, int]]:
    """Stop a session; its GPU events when what ran inside it ended well (ok), else nothing (the
    error that ended it is the one that counts)."""
    try:
        prof.__exit__(None, None, None)
    except Exception as e:  # noqa: BLE001
        if ok:
            raise TimingError(f"profiler stop failed: {type(e).__name__}: {e}") from None
    return _gpu_events(prof) if ok else []


def _kineto_collect(body: Callable[[], None]) -> list[tuple[int, int, str, int]]:
    prof = _kineto_start()
    try:
        body()                        # the candidate's errors propagate as they are
    except BaseException:
        _kineto_stop(prof, ok=False)
        raise
    return _kineto_stop(prof, ok=True)


def _gpu_events(prof) -> list[tuple[int, int, str, int]]:
    """(start_ns, end_ns, name, stream) for every GPU activity kineto recorded."""
    try:
        raw = prof.profiler.kineto_results.events()
    except Exception as e:  # noqa: BLE001
        raise TimingError(f"no kineto results: {e}") from None
    out = []
    for e in raw:
        try:
            dev_type = str(e.device_type())
        except Exception:  # noqa: BLE001
            continue
        if "CUDA" not in dev_type:
            continue
        start = int(e.start_ns())
        end = int(e.end_ns()) if hasattr(e, "end_ns") else start + int(e.duration_ns())
        try:
            stream = int(e.device_resource_id())
        except Exception:  # noqa: BLE001
            stream = -1
        out.append((start, end, e.name(), stream))
    if not out:
        raise TimingError("the profiler recorded no GPU activity (CUPTI unavailable?)")
    out.sort()
    return out


def _split_calls(events, reps: int, stride: int = 1, strict_streams: bool = False) -> Timing:
    """Cut the event list at the marker kernels. stride 1: [marker][flush][call] per call and a
    closing marker; stride 2 (with setup): [marker][setup][marker][flush][call] per call, the
    setup windows skipped, and a closing marker. strict_streams: any record on a stream other than
    the first marker's raises SideStreams before anything else is checked."""
    markers = [i for i, ev in enumerate(events) if "spin_kernel" in ev[2]]
    if strict_streams and markers:
        base = events[markers[0]][3]
        other = [e for e in events if e[3] != base]
        if other:
            raise SideStreams({e[3] for e in other}, {e[2] for e in other})
    if len(markers) != stride * reps + 1:
        raise TimingError(f"expected {stride * reps + 1} marker kernels, found {len(markers)}")
    samples, streams, names, counts, per_call = [], set(), set(), [], []
    flush_name = None
    for k in range(reps):
        a = stride * k + stride - 1
        window = events[markers[a] + 1: markers[a + 1]]
        if not window:
            raise TimingError(f"call {k}: no GPU activity after the marker")
        flush, work = window[0], window[1:]
        if flush_name is None:
            flush_name = flush[2]
        elif flush[2] != flush_name:
            raise TimingError(f"call {k}: expected the L2 flush after the marker, got {flush[2]!r}")
        if not work:
            raise TimingError(f"call {k}: no kernels recorded for the call")
        samples.append((max(e[1] for e in work) - min(e[0] for e in work)) / 1e6)
        streams.update(e[3] for e in work)
        names.update(e[2] for e in work)
        counts.append(len(work))
        own: dict = {}
        for e in work:
            own[e[2]] = own.get(e[2], 0.0) + (e[1] - e[0]) / 1e6
        per_call.append(own)
    kernel_ms = {n: statistics.median(c.get(n, 0.0) for c in per_call) for n in names}
    return Timing(samples, "cupti", streams=streams, kernel_names=names,
                  kernels_per_call=sum(counts) / len(counts), base_stream=events[markers[0]][3],
                  kernel_ms=kernel_ms, busy_ms=statistics.median(sum(c.values()) for c in per_call))


def _split_batch(events, pending: list, backend: str, strict_streams: bool = False) -> None:
    """Give each measurement of one session (Timer.batched) its Timing: measurement k owns the
    next stride x reps + 1 marker kernels in start order, and only its windows between them."""
    markers = [i for i, ev in enumerate(events) if "spin_kernel" in ev[2]]
    need = sum(p.stride * p.reps + 1 for p in pending)
    if len(markers) != need:
        raise TimingError(f"expected {need} marker kernels over {len(pending)} measurement(s) of one "
                          f"session, found {len(markers)}")
    off = 0
    for p in pending:
        last = off + p.stride * p.reps
        t = _split_calls(events[markers[off]: markers[last] + 1], p.reps, p.stride, strict_streams)
        t.backend = backend
        p.timing = t
        off = last + 1
