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
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

MIN_FLUSH_BYTES = 128 << 20


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

    def __init__(self, device=None, method: str = "auto"):
        self.device = torch.device(device or "cuda")
        self.flush_buf = torch.empty(flush_bytes(self.device), dtype=torch.uint8, device=self.device)
        self.method = method
        self._cupti_ok: Optional[bool] = None if method in ("auto", "cupti") else False
        self.cupti_error = ""

    def flush(self) -> None:
        self.flush_buf.zero_()

    def warmup(self, call: Callable[[int], object], warmup_ms: float, min_calls: int = 2,
               max_calls: int = 1000) -> float:
        """Run until warmup_ms of wall time have passed (at least min_calls); returns the mean wall ms
        of one flushed call, an upper bound of its GPU time used to size the repetitions."""
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        n = 0
        while n < min_calls or ((time.perf_counter() - t0) * 1e3 < warmup_ms and n < max_calls):
            self.flush()
            call(n)
            torch.cuda.synchronize(self.device)
            n += 1
        return (time.perf_counter() - t0) * 1e3 / n

    def measure(self, call: Callable[[int], object], reps: int, warmup_ms: float = 25.0,
                budget_s: float = 10.0, min_warmup_calls: int = 2, min_reps: int = 5) -> Timing:
        """Warm up, then time `reps` flushed calls (fewer if they would exceed budget_s, but at least
        min_reps). With warmup_ms=0 and min_warmup_calls=0 every timed call is a first call (the
        caching probe)."""
        if warmup_ms > 0 or min_warmup_calls > 0:
            per_call_ms = self.warmup(call, warmup_ms, min_calls=max(min_warmup_calls, 1))
            reps = max(min(reps, min_reps), min(reps, int(budget_s * 1e3 / max(per_call_ms, 1e-3))))
        if self._cupti_ok is not False:
            try:
                t = self._measure_cupti(call, reps)
                self._cupti_ok = True
                return t
            except TimingError as e:
                if self.method == "cupti":
                    raise
                self._cupti_ok = False
                self.cupti_error = str(e)
        return self._measure_events(call, reps)

    # ── events ──────────────────────────────────────────────────────────────────────────────────
    def _measure_events(self, call, reps: int) -> Timing:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush()
            torch.cuda.synchronize(self.device)
            starts[i].record()
            call(i)
            ends[i].record()
        torch.cuda.synchronize(self.device)
        note = f"events fallback ({self.cupti_error})" if self.cupti_error else "events"
        return Timing([s.elapsed_time(e) for s, e in zip(starts, ends)], "events", note=note)

    # ── CUPTI through kineto ────────────────────────────────────────────────────────────────────
    def _measure_cupti(self, call, reps: int) -> Timing:
        from torch.profiler import ProfilerActivity, profile

        def marker_and_flush():
            torch.cuda._sleep(1)
            self.flush()

        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(reps):
                    marker_and_flush()
                    torch.cuda.synchronize(self.device)
                    call(i)
                    torch.cuda.synchronize(self.device)
                marker_and_flush()
                torch.cuda.synchronize(self.device)
            events = _gpu_events(prof)
        except TimingError:
            raise
        except Exception as e:  # noqa: BLE001 - any profiler trouble means: use the fallback
            raise TimingError(f"profiler unavailable: {type(e).__name__}: {e}") from None
        return _split_calls(events, reps)


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


def _split_calls(events, reps: int) -> Timing:
    markers = [i for i, ev in enumerate(events) if "spin_kernel" in ev[2]]
    if len(markers) != reps + 1:
        raise TimingError(f"expected {reps + 1} marker kernels, found {len(markers)}")
    samples, streams, names, counts = [], set(), set(), []
    flush_name = None
    for k in range(reps):
        window = events[markers[k] + 1: markers[k + 1]]
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

