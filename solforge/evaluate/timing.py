"""GPU timing as SOL-ExecBench measures it: per call, the span from the first kernel's start to the
last kernel's end, on every stream, read from CUPTI activity records. CPU launch overhead before the
first kernel is not counted; gaps between kernels are.

CUPTI from Python: cuda-bindings 13.x has no CUPTI module and the nvidia-cuda-cupti wheel ships only
the C library, so we read CUPTI through torch.profiler (kineto), which enables CUPTI's kernel, memcpy
and memset activity records and hands them back with GPU start/end timestamps and stream ids.
Calls are told apart by a marker kernel (torch.cuda._sleep's spin kernel) launched before each
call's L2 flush: [marker][flush] sync [call ...] sync [marker][flush] ...; everything after a flush
and before the next marker belongs to that call, on whatever stream it ran.

Fallback ("events"): CUDA events on the current stream with a device synchronize before each start
event. It counts the launch overhead of the first kernel and misses work on other streams; the result
records which method produced it.

Between calls the L2 is flushed by writing a buffer of max(2 x L2, 128 MiB). Several input sets are
rotated so that no call sees the previous call's data in cache.

Duty cycle: after every call that takes at least `duty_min_call_ms` (wall), the timer idles for
`duty_gap_factor` times that call's time, in the warm-up and in the timed calls. Why: on the H200 a
bf16 GEMM that runs the tensor cores flat out for seconds pulls the card to its power limit and the
SM clock drops (8192^3: 1.39 ms cool, 1.60 ms after ~10 s of load; 15% between two measurements),
so back-to-back timing measures the card's recent history, not the kernel. Idling as long as the
kernel ran keeps the average power far under the limit, so each measurement starts and stays in the
same (full-clock) state; clocks are never touched. Short kernels already idle between calls (marker,
flush, synchronize, Python) and are left as they were. scripts/timing_spread.py measures this.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

MIN_FLUSH_BYTES = 128 << 20


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


class TimingError(RuntimeError):
    pass


def flush_bytes(device=None) -> int:
    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return max(2 * l2, MIN_FLUSH_BYTES)


class Timer:
    """Times a call on the GPU. `call(i)` must launch one call's work using input set i (mod sets)."""

    def __init__(self, device=None, method: str = "auto", duty_gap_factor: Optional[float] = None,
                 duty_min_call_ms: Optional[float] = None):
        self.device = torch.device(device or "cuda")
        self.flush_buf = torch.empty(flush_bytes(self.device), dtype=torch.uint8, device=self.device)
        self.method = method
        self._cupti_ok: Optional[bool] = None if method in ("auto", "cupti") else False
        self.cupti_error = ""
        if duty_gap_factor is None or duty_min_call_ms is None:
            from .. import settings

            cfg = settings.get()
            duty_gap_factor = cfg.duty_gap_factor if duty_gap_factor is None else duty_gap_factor
            duty_min_call_ms = cfg.duty_min_call_ms if duty_min_call_ms is None else duty_min_call_ms
        self.duty_gap_factor = float(duty_gap_factor)
        self.duty_min_call_ms = float(duty_min_call_ms)
        self.last_warmup_calls = 0      # how many calls the last warm-up ran (steady warm-ups vary)
        self.last_gap_s = 0.0           # idle after each timed call in the last measurement

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

    def measure(self, call: Callable[[int], object], reps: int, warmup_ms: float = 25.0,
                budget_s: float = 10.0, min_warmup_calls: int = 2, min_reps: int = 5,
                setup: Optional[Callable[[int], object]] = None,
                steady: Optional[tuple] = None) -> Timing:
        """Warm up, then time `reps` flushed calls (fewer if they would exceed budget_s, but at least
        min_reps). With warmup_ms=0 and min_warmup_calls=0 every timed call is a first call (the
        caching probe). `setup(i)`, if given, runs before call i's marker and flush, untimed (the
        caching probe writes new values into the buffers there)."""
        gap = 0.0
        if warmup_ms > 0 or min_warmup_calls > 0:
            per_call_ms = self.warmup(call, warmup_ms, min_calls=max(min_warmup_calls, 1),
                                      steady=steady)
            gap = self.gap_s(per_call_ms)
            busy_ms = per_call_ms + gap * 1e3
            reps = max(min(reps, min_reps), min(reps, int(budget_s * 1e3 / max(busy_ms, 1e-3))))
        self.last_gap_s = gap
        if self._cupti_ok is not False:
            try:
                t = self._measure_cupti(call, reps, gap, setup)
                self._cupti_ok = True
                return t
            except TimingError as e:
                if self.method == "cupti":
                    raise
                self._cupti_ok = False
                self.cupti_error = str(e)
        return self._measure_events(call, reps, gap, setup)

    # ── events ──────────────────────────────────────────────────────────────────────────────────
    def _measure_events(self, call, reps: int, gap_s: float = 0.0, setup=None) -> Timing:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if setup is not None:
                setup(i)
            self.flush()
            torch.cuda.synchronize(self.device)
            starts[i].record()
            call(i)
            ends[i].record()
            if gap_s:
                # the idle must follow the call's GPU work, not its launch
                torch.cuda.synchronize(self.device)
                time.sleep(gap_s)
        torch.cuda.synchronize(self.device)
        note = f"events fallback ({self.cupti_error})" if self.cupti_error else "events"
        return Timing([s.elapsed_time(e) for s, e in zip(starts, ends)], "events", note=note)

    # ── CUPTI through kineto ────────────────────────────────────────────────────────────────────
    def _measure_cupti(self, call, reps: int, gap_s: float = 0.0, setup=None) -> Timing:
        from torch.profiler import ProfilerActivity, profile

        def marker_and_flush():
            torch.cuda._sleep(1)
            self.flush()

        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(reps):
                    if setup is not None:
                        # setup's GPU work sits between two markers of its own, outside every
                        # call's window: [end marker][setup] [marker][flush] [call] [end marker]...
                        torch.cuda._sleep(1)
                        setup(i)
                    marker_and_flush()
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
            events = _gpu_events(prof)
        except TimingError:
            raise
        except Exception as e:  # noqa: BLE001 - any profiler trouble means: use the fallback
            raise TimingError(f"profiler unavailable: {type(e).__name__}: {e}") from None
        return _split_calls(events, reps, stride=2 if setup is not None else 1)


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


def _split_calls(events, reps: int, stride: int = 1) -> Timing:
    """Cut the event list at the marker kernels. stride 1: [marker][flush][call] per call and a
    closing marker; stride 2 (with setup): [marker][setup][marker][flush][call] per call, the
    setup windows skipped, and a closing marker."""
    markers = [i for i, ev in enumerate(events) if "spin_kernel" in ev[2]]
    if len(markers) != stride * reps + 1:
        raise TimingError(f"expected {stride * reps + 1} marker kernels, found {len(markers)}")
    samples, streams, names, counts = [], set(), set(), []
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
    return Timing(samples, "cupti", streams=streams, kernel_names=names,
                  kernels_per_call=sum(counts) / len(counts), base_stream=events[markers[0]][3])

