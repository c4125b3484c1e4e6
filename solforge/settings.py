"""Configuration with defaults in one place. Every value can be overridden by an environment variable
SOLFORGE_<NAME> (upper case), so a Prefect worker, a CI job and a user's shell agree on the same knobs.
Import-light on purpose: the GPU evaluator imports this module too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default_shared() -> Path:
    # The shared dataset copy sits beside the checkout in this workplace; users point elsewhere.
    return REPO_ROOT.parent / "shared"


@dataclass
class Settings:
    db_path: Path = Path("solforge.duckdb")
    cache_dir: Path = Path.home() / ".cache" / "solforge"
    shared_dir: Path = field(default_factory=_default_shared)
    hardware_dir: Path = REPO_ROOT / "data" / "hardware"
    gpu_profile: str = "h200"
    # compile
    arch: str = "sm_90a"
    compile_timeout_s: float = 120.0
    # the compiler's sandboxed trace of a reference (make_fx twice, then each distinct workload for
    # its variants): references that loop in Python over large inputs take minutes; the same box
    # for `solforge coverage` and for the compiler worker, so what coverage serves the worker serves
    trace_timeout_s: float = 300.0
    # a compiler plan with size-selected variants renders its templates (GEMM, flash attention) once
    # per variant: up to this much source (kB) a template plan is tried before the generic plan
    # (NVRTC on a 2-core box, which goes more with the template instances than the text: 4.6 s for
    # 232 kB, 21 s for 383 kB, 8.8 s for a 520 kB flash plan, 110 s for 858 kB, against a
    # compile_timeout_s of 120), above it after, the generic plan being quick to compile
    template_first_max_kb: float = 600.0
    # evaluation (SOL-ExecBench's defaults where it has them)
    eval_timeout_s: float = 300.0
    # one workload's own time in an optimize evaluation (inputs, reference, checks, timing; waits for
    # other lanes' timing excluded): a kernel that never returns (a pipeline barrier waiting for
    # bytes that never arrive) is killed here rather than at eval_timeout_s; 0: no limit
    workload_timeout_s: float = 120.0
    # screening in search (evaluate/screening.py, orchestrate/evaluation.py): a candidate of a problem
    # that has a timed best on this GPU model runs on this many representative workloads first
    # (smallest, largest, evenly between) and on the rest only where it could be a new best there
    # (within 5% of the best's geomean time); 0: every workload. Off until eval_throughput has
    # measured it on the GPU; `solforge optimize --screen K` turns it on for a run
    screen_workloads: int = 0
    warmup_ms: float = 25.0
    rep_count: int = 50
    correctness_rounds: int = 3
    # how a candidate's calls are read from CUPTI: kineto (its records parsed in C++) or auto
    # (cupti-python with SOL-ExecBench's five activity kinds, runtime and driver API included, every
    # record handed to Python). The same candidates on the H200 (benchmarks/eval_throughput.py,
    # 2026-12-03): kernel times within 0.3% either way, but 0.69-0.76 s of timing per evaluation of
    # ~15 workloads under kineto against 2.8-3.5 s under cupti-python. A launch plan runs as one
    # kernel or one CUDA graph (graph_launch), so API records add nothing to its span; the eager reference's
    # T_b, whose span is host-bound, keeps SOL-ExecBench's kinds (evaluate/baseline.py)
    candidate_timing_backend: str = "kineto"
    # the eager T_b (evaluate/baseline.py): NVIDIA's reading of the reference (10 warm-up calls, 50
    # timed, its window) taken this many times and the samples pooled, where the first reading's
    # median is under eager_windows_below_ms. Such a reading of a launch-bound reference is host time,
    # and each reading draws the host's speed level (about 1.6x apart) independently, at the same rate
    # in NVIDIA's process as in ours (data/results/sol_execbench_compare/, pinned, 2026-12-05): one
    # reading is a draw between two levels, the pooled median of several the level a reading gives
    # most often. Slower references are GPU-bound or Python loops that already run for long. The
    # readings are spaced by eager_window_gap_s of sleep, as the benchmark's were by the other side's
    # reading (back to back, untested, a process may keep its level)
    eager_windows: int = 5
    eager_windows_below_ms: float = 2.0
    eager_window_gap_s: float = 0.05
    # a timed call whose GPU was busy (Timing.busy_ms) under this share of its span is host-bound:
    # its time is the host launching small kernels, and moves with the host. Over 48 eager workloads
    # on an H100 box (2026-12-05) the shares fell at 7-75% and 83-100%, none between
    # (data/results/sol_execbench_compare/); the baselines' summary and the side by side's split
    host_bound_busy_share: float = 0.8
    # timing duty cycle (evaluate/timing.py): after each call of at least duty_min_call_ms (wall),
    # idle duty_gap_factor x its time, so power-limited kernels (long bf16 GEMMs) are measured at
    # the same clock every time instead of at whatever the card's recent load left it
    duty_gap_factor: float = 1.0
    duty_min_call_ms: float = 0.5
    # a warm-up of such paced calls stops once the calls after the first would take longer than this
    # (at least two calls; timing.paced_warmup_calls); short calls keep SOL-ExecBench's ten
    paced_warmup_ms: float = 100.0
    # a workload's timed calls, post-timing re-check and caching probe in one profiler session
    # (timing.Timer.batched) instead of two (timing, probe), the probe then sized from the warm-up's
    # estimate of a call: off until benchmarks/eval_throughput.py's after_one_session config has
    # measured it against after_kineto on the GPU
    timing_one_session: bool = False
    # caching probe (evaluate/evaluator.py): calls per side = clamp(budget / kernel time, min, max).
    # 12 at most: the probe of a microsecond kernel was half its evaluation's timed calls, and 12
    # instead of 24 gave 1.26x the evaluations per GPU-minute side by side on the H200
    # (data/results/eval_throughput/, 2026-12-04) with the same verdicts; a cache of the seen set
    # answers all 12 seen calls from it either way
    caching_probe_min_calls: int = 3
    caching_probe_max_calls: int = 12
    caching_probe_budget_ms: float = 5.0
    # the probe's fresh input sets are made before the GPU is taken alone when all of them together
    # take at most this many bytes (evaluator._prepare_probe), else one by one in the probe's setup
    caching_probe_premade_bytes: int = 256 << 20
    # and at most as many fresh calls per side as this many seconds of making their input sets allow
    # (the correctness rounds time one set; caching_probe.most_calls)
    caching_probe_make_budget_s: float = 2.0
    # the runner returns once the driver says "done" (its results are all in) instead of waiting for
    # its exit, a CUDA context's teardown of ~0.08 s, when the driver held at most this many bytes of
    # GPU memory (torch's reserved peak): a larger one's memory must be free before the next
    # evaluation allocates. 1.06x the evaluations per GPU-minute side by side on the H200
    # (benchmarks/eval_throughput.py's at_done against after_spare, 2026-12-04); 0: always wait for
    # the exit (evaluate/runner.py)
    eval_return_at_done_bytes: int = 8 << 30
    # evaluations sharing a GPU (evaluate/gpu_share.py): a younger one waits for the timing section
    # while an older one that has timed is between its sections, at most this many seconds, so
    # evaluations end one after another instead of advancing a workload each in lockstep
    gpu_share_hold_s: float = 30.0
    # a candidate faster than this fraction of T_sol is rejected as impossible
    sol_floor_fraction: float = 0.5
    # launch plans of several GPU operations (workspace memset + kernels) as one CUDA graph, so
    # Python's time between driver calls does not fall inside the timed span (graph_launch.py)
    graph_launch: bool = True
    # LLM
    llm_model: str = ""

    @classmethod
    def load(cls, **overrides) -> "Settings":
        s = cls()
        for f in fields(cls):
            env = os.environ.get(f"SOLFORGE_{f.name.upper()}")
            if env is not None:
                setattr(s, f.name, _coerce(f.type, env, getattr(s, f.name)))
        for k, v in overrides.items():
            if v is not None:
                setattr(s, k, _coerce("", v, getattr(s, k)) if isinstance(v, str) else v)
        return s


def _coerce(_type, raw: str, current):
    if isinstance(current, Path):
        return Path(raw).expanduser()
    if isinstance(current, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(current, int):
        return int(raw)
    if isinstance(current, float):
        return float(raw)
    return raw


def get() -> Settings:
    return Settings.load()
