"""Where an evaluation's seconds go: named phases, accumulated in the driver and returned in the result.

The driver emits one "phases" JSON line before "done"; the runner adds what only it can see (process
start until the driver's first line, and teardown after "done") and puts the whole dict on
RunReport.phases. Stdlib only (the runner imports it and never imports torch).

Phase names (seconds):
  launch          runner asked for a process -> the driver's first Python line ran (spawn: interpreter
                  start; zygote: fork + handshake; a spare child: handing it the request, plus any
                  rest of its CUDA context creation still running when the request came)
  imports         torch and the evaluator's modules (zero-ish in a zygote child: preloaded)
  cuda_init       CUDA context creation on the device (near zero in a spare child: made ahead,
                  while the previous candidate ran, so it is not on this evaluation's GPU time)
  hardware        GPU identity and clocks (hardware.capture)
  load            the reference module and the candidate (cubins)
  inputs          making input sets (correctness rounds, rotated timing sets, caching probe)
  reference       running the reference (synchronized)
  timing_warmup   warm-up calls before each timed measurement
  timing_profile  the timed calls under CUPTI (or events), including the profiler's own start/stop
                  and reading its records back (inputs the caching probe makes meanwhile: "inputs")
  gpu_wait        waiting to enter gpu_share's sections: lanes sharing one GPU wait there while
                  another lane times (a wait, not GPU work of this evaluation)
  checks          the remainder of each workload: candidate correctness calls, comparisons, guards
  teardown        "done" -> process exit (runner side)
  unfinished      (runner, only when the driver ended without its phases: killed at a limit, or
                  died) the run's time outside the workloads it finished: start-up and the
                  workload it was in; the finished workloads' phases are summed beside it
  shared_oom_retry  (orchestrate.evaluation, not the driver) seconds of a first try that ran out of
                  device memory beside other lanes' evaluations; the phases are the second try's,
                  run with the GPU to itself
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class PhaseClock:
    """Accumulates wall seconds per phase name (perf_counter). Phases are exclusive: a phase opened
    inside another (inputs made by the caching probe's setup inside timing_profile) counts its
    seconds for itself only and they are taken out of the enclosing one, so the phases of a
    workload add up to at most its wall time and no second is counted twice."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._open: list[list[float]] = []    # per open phase: [seconds of nested phases]

    def add(self, name: str, dt: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + dt
        self.counts[name] = self.counts.get(name, 0) + 1

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        nested = [0.0]
        self._open.append(nested)
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self._open.pop()
            self.add(name, max(0.0, dt - nested[0]))
            if self._open:
                self._open[-1][0] += dt

    def snapshot(self) -> dict[str, float]:
        return dict(self.seconds)

    def since(self, before: dict[str, float]) -> dict[str, float]:
        """Seconds per phase accumulated after `before` (a snapshot())."""
        return {k: v - before.get(k, 0.0) for k, v in self.seconds.items()
                if v - before.get(k, 0.0) > 0}

    def to_json(self) -> dict:
        return {k: round(v, 6) for k, v in self.seconds.items()}


def rusage_dict(ru) -> dict:
    """What a reaped child used (os.wait4): CPU seconds in user and kernel mode, context switches
    (voluntary: it waited, e.g. on the GPU or a lock; involuntary: preempted, the CPU was wanted
    elsewhere) and page faults. Tells apart the ways an evaluation gets slower when another runs on
    the other GPU: more CPU seconds for the same work (slower cores, or more kernel/driver work) or
    the same CPU seconds over a longer wall time (waiting)."""
    return {"user_s": round(ru.ru_utime, 6), "sys_s": round(ru.ru_stime, 6),
            "nvcsw": int(ru.ru_nvcsw), "nivcsw": int(ru.ru_nivcsw),
            "minflt": int(ru.ru_minflt), "majflt": int(ru.ru_majflt)}


def own_rusage() -> dict:
    """What this process and its reaped children used so far, as rusage_dict (what the zygote
    reports of a reaped child): the driver's CPU counters, for a runner that returns before the
    driver's exit."""
    import resource

    both = rusage_dict(resource.getrusage(resource.RUSAGE_SELF))
    for k, v in rusage_dict(resource.getrusage(resource.RUSAGE_CHILDREN)).items():
        both[k] = round(both[k] + v, 6) if isinstance(v, float) else both[k] + v
    return both
