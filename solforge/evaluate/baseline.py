"""Baselines T_b: the reference itself, timed in eager PyTorch and under torch.compile, with the same
timer (CUPTI span, L2 flush, rotated inputs) as candidates. solforge/baselines/scheduler.py restarts a worker
that dies and runs several compile workers in parallel, taking a GPU lock around every measurement.

A reference is a dataset's code, so it runs under the same rules as a candidate: time_problem_isolated
runs time_problem in the sandbox (solforge.sandbox: fresh process group, allowlisted environment,
private temp dir, limits, bwrap with the GPU's device nodes where the machine has it) and gets its
rows back as JSON; worker_env() is the sandbox's allowlisted environment for long-lived baseline
workers. time_problem itself runs the reference in the calling process: call it only inside such a
process.
"""

from __future__ import annotations

import contextlib
import fcntl
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator, Optional, Sequence

import torch

from .evaluator import classify_exception
from .inputs import InputFactory
from .reference import DEQUANT_LABEL, Fp4Shim, load_reference, needs_fp4_dequant
from .timing import Timer, Timing


@dataclass
class BaselineRow:
    problem: str
    workload_uuid: str
    variant: str                 # "eager" | "compile"
    status: str                  # EvalStatus value: passed | runtime_error | oom | timeout | skipped
    median_ms: Optional[float] = None
    p10_ms: Optional[float] = None
    p90_ms: Optional[float] = None
    spread: Optional[float] = None
    n_reps: int = 0
    timing_method: str = ""
    label: str = ""
    message: str = ""
    seconds: float = 0.0         # wall time spent on this workload (compile included)
    # the GPU's own time per call (Timing.busy_ms); median_ms - busy_ms is host time between the
    # reference's launches: a T_b far above its busy time is launch-bound, and reads the host
    busy_ms: Optional[float] = None

    def to_json(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def gpu_lock(path: Optional[str]):
    """Exclusive use of the GPU for a measurement, across processes (a no-op without a path)."""
    if not path:
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compiled(fn, backend: str = "inductor"):
    import torch._dynamo as dynamo

    # One compile per problem: the dims that differ between workloads are marked dynamic before the
    # first call (varying_dims / mark_varying_dims), so the first compile already serves every
    # workload; automatic_dynamic_shapes covers the rest (ints). A high recompile limit keeps later
    # workloads compiled rather than silently falling back to eager.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 256)
    return torch.compile(fn, backend=backend)


def varying_dims(workloads) -> dict[str, tuple[int, ...]]:
    """Input name -> the dims whose size differs between the problem's workloads (same rank only).
    Those are the dims torch.compile would make dynamic after its first recompile."""
    shapes: dict[str, set] = {}
    for w in workloads:
        for name, shape in w.input_shapes.items():
            if shape is not None:
                shapes.setdefault(name, set()).add(tuple(int(d) for d in shape))
    out = {}
    for name, seen in shapes.items():
        ranks = {len(s) for s in seen}
        if len(seen) < 2 or len(ranks) != 1:
            continue
        dims = tuple(i for i in range(ranks.pop()) if len({s[i] for s in seen}) > 1)
        if dims:
            out[name] = dims
    return out


def mark_varying_dims(inputs: dict, dims: dict[str, tuple[int, ...]]) -> int:
    """maybe_mark_dynamic (never an error when the reference specializes a dim) on these dims of
    these input tensors; returns how many dims were marked."""
    import torch._dynamo as dynamo

    n = 0
    for name, ds in dims.items():
        t = inputs.get(name)
        if isinstance(t, torch.Tensor) and t.dim() > max(ds):
            for d in ds:
                dynamo.maybe_mark_dynamic(t, d)
                n += 1
    return n


def time_problem(problem, variant: str, stage_dir: Path, *, reps: int = 20, warmup_ms: float = 10.0,
                 workload_budget_s: float = 1.5, problem_budget_s: float = 60.0,
                 lock_path: Optional[str] = None, skip: frozenset = frozenset(),
                 blob_roots: Optional[list] = None, timer: Optional[Timer] = None,
                 only: Optional[Sequence[str]] = None, device=None, min_reps: int = 5,
                 hurry_at: Optional[float] = None, hurry_after_s: Optional[float] = None,
                 inputs_in_lock: bool = False, compile_backend: str = "inductor",
                 dynamic_dims: bool = True) -> Iterator[BaselineRow]:
    """Yield one BaselineRow per workload of `problem` (a solforge.problem.Problem).

    `only`: these workload uuids, in this order (default: all but `skip`). Past `problem_budget_s`
    the remaining workloads are yielded as skipped. Slow references are cut by repetitions instead:
    a workload whose single call exceeds `workload_budget_s` is timed once (its first call was the
    warm-up); after `hurry_after_s` in this problem or past the epoch `hurry_at` (time.time()) every
    workload gets one warm-up call and as many timed calls as half the budget allows, at least one.
    `inputs_in_lock`: make inputs under the GPU lock too (several processes on one GPU).
    `compile_backend`: torch.compile's backend ("eager" only to test the machinery quickly).
    `dynamic_dims`: compile only: mark the dims that vary between workloads dynamic from the start
    (one compile for the problem instead of a static one and a dynamic recompile)."""
    dev = torch.device(device or "cuda")
    defn = problem.definition
    name = defn.name
    t_problem = time.monotonic()
    wanted = list(problem.workloads)
    if only is not None:
        by_uuid = {w.uuid: w for w in problem.workloads}
        wanted = [by_uuid[u] for u in only if u in by_uuid]
    try:
        mod = load_reference(defn, stage_dir, name="ref_" + "".join(c if c.isalnum() else "_"
                                                                   for c in name))
    except Exception as e:  # noqa: BLE001
        for w in wanted:
            if w.uuid not in skip:
                yield BaselineRow(name, w.uuid, variant, "runtime_error",
                                  message=f"reference does not load: {type(e).__name__}: {e}")
        return
    label = ""
    shim = None
    if needs_fp4_dequant(defn):
        shim = Fp4Shim().install()
        label = DEQUANT_LABEL
    try:
        fn = mod.run if variant == "eager" else _compiled(mod.run, compile_backend)
        custom = getattr(mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint \
            else None
        timer = timer or Timer(dev)
        state = {"call_s": 0.0}  # the last workload's call time (slow eager calls warm the next one)
        if variant != "eager" and dynamic_dims:
            state["dims"] = varying_dims(problem.workloads)
        for w in wanted:
            if w.uuid in skip:
                continue
            elapsed = time.monotonic() - t_problem
            if elapsed > problem_budget_s:
                yield BaselineRow(name, w.uuid, variant, "skipped", label=label,
                                  message=f"problem time box of {problem_budget_s:.0f} s reached")
                continue
            hurry = (hurry_at is not None and time.time() > hurry_at) or \
                (hurry_after_s is not None and elapsed > hurry_after_s)
            def timed(fn):
                return _time_workload(name, variant, fn, w, dev, custom, blob_roots, timer, reps,
                                      warmup_ms, workload_budget_s, lock_path, label,
                                      min_reps=min_reps, hurry=hurry, inputs_in_lock=inputs_in_lock,
                                      state=state)

            row = timed(fn)
            if row.status == "runtime_error" and state.get("dims") and not state.get("static"):
                # The compile with dynamic dims failed: the plain torch.compile (static shapes,
                # automatic dynamic on recompile) gets its chance, once per problem.
                import torch._dynamo as dynamo

                state["dims"], state["static"] = {}, True
                dynamo.reset()
                fn = _compiled(mod.run, compile_backend)
                first = row.message
                row = timed(fn)
                row.message = (f"compiled without dynamic dims (with them: {first[:160]})"
                               + ("; " + row.message if row.message else ""))
            yield row
    finally:
        if shim is not None:
            shim.remove()


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time_workload(name, variant, fn, w, dev, custom, blob_roots, timer, reps, warmup_ms,
                   budget_s, lock_path, label, *, min_reps: int = 5, hurry: bool = False,
                   inputs_in_lock: bool = False, state: Optional[dict] = None) -> BaselineRow:
    t0 = time.monotonic()
    row = BaselineRow(name, w.uuid, variant, "runtime_error", label=label)
    try:
        factory = InputFactory(w, dev, custom_fn=custom, blob_roots=blob_roots or [])
        # Input generation is GPU work: where other processes share the GPU, it waits for the lock
        # so that it never overlaps somebody else's measurement.
        with gpu_lock(lock_path if inputs_in_lock else None):
            sets = [factory.make(100 + j) for j in range(2)]
            _sync(dev)
        state = state if state is not None else {}
        if state.get("dims"):
            for s in sets:
                mark_varying_dims(s, state["dims"])
        order = list(w.definition.inputs)
        args = [[s[k] for k in order] for s in sets]
        if factory.notes:
            row.message = "; ".join(factory.notes)
        call = lambda i: fn(*args[i % 2])  # noqa: E731
        # Only a reference slow enough that a first-call effect cannot matter skips its own warm-up
        # (a cold first call of a new shape once read 77 ms for a 0.3 ms reference, and every later
        # workload then inherited "slow": single cold calls).
        if variant == "eager" and state.get("call_s", 0.0) >= max(budget_s, SLOW_REFERENCE_S):
            # The previous workload's call alone exceeded the budget, and it ran these kernels: this
            # call needs no separate warm-up. One timed call (a reference taking seconds a call in a
            # Python loop; the row says so).
            with torch.no_grad(), gpu_lock(lock_path):
                t1 = time.perf_counter()
                t = timer.measure(call, 1, warmup_ms=0, min_warmup_calls=0)
                state["call_s"] = time.perf_counter() - t1
            row.message = (row.message + "; " if row.message else "") + \
                f"slow reference ({state['call_s']:.2f} s a call): 1 timed call, warmed by the " \
                "last workload"
            row.status = "passed"
            row.median_ms, row.p10_ms, row.p90_ms, row.spread = t.median_ms, t.p10_ms, t.p90_ms, \
                t.spread
            row.n_reps, row.timing_method, row.busy_ms = t.n, t.method, t.busy_ms
            return row
        with torch.no_grad():
            t1 = time.perf_counter()
            fn(*args[0])  # eager: the first touch; compile: the compile (CPU work, outside the lock)
            _sync(dev)
            call_s = time.perf_counter() - t1
            if variant != "eager":  # the first call was mostly compiling: time a warm one
                t1 = time.perf_counter()
                fn(*args[1])
                _sync(dev)
                call_s = time.perf_counter() - t1
            state["call_s"] = call_s
            with gpu_lock(lock_path):
                if call_s >= budget_s:
                    # Slower than the whole budget: the calls so far were the warm-up; one timed call.
                    t = timer.measure(call, 1, warmup_ms=0, min_warmup_calls=0)
                    row.message = (row.message + "; " if row.message else "") + \
                        f"slow reference ({call_s:.2f} s a call): 1 timed call"
                elif variant == "eager" and isinstance(timer, Timer):
                    t = measure_eager(state, dev, fn, args, reps, budget_s / 2 if hurry
                                      else budget_s, min_reps=1 if hurry else min_reps,
                                      windows=1 if hurry else None)
                    if t.note:
                        row.message = (row.message + "; " if row.message else "") + t.note
                elif hurry:
                    t = timer.measure(call, reps, warmup_ms=0, budget_s=budget_s / 2,
                                      min_warmup_calls=1, min_reps=1)
                else:
                    t = timer.measure(call, reps, warmup_ms, budget_s, min_warmup_calls=1,
                                      min_reps=min_reps)
        row.status = "passed"
        row.median_ms, row.p10_ms, row.p90_ms, row.spread = t.median_ms, t.p10_ms, t.p90_ms, t.spread
        row.n_reps, row.timing_method, row.busy_ms = t.n, t.method, t.busy_ms
    except Exception as e:  # noqa: BLE001
        row.status, msg = classify_exception(e)
        row.message = (row.message + "; " if row.message else "") + msg[:500]
    finally:
        row.seconds = time.monotonic() - t0
    return row


# a previous workload's call at least this slow warms the next one (Python-loop references)
SLOW_REFERENCE_S = 1.0


def measure_like_nvidia(state: dict, dev, fn, args: list, reps: int, budget_s: float,
                        min_reps: int = 5):
    """The eager reference timed as SOL-ExecBench times `reference_latency_ms` (time_runnable):
    per call its inputs are copied afresh (their ShiftingMemoryPoolAllocator's copy, before the
    flush), the L2 flushed with 2 x L2 bytes, the call launched right behind the flush with no
    synchronize in between (queued), the span of the call's own kernels; 10 warm-up calls the same
    way; NVIDIA_REPS timed calls where budget_s allows, the median. docs/timing_agreement.md."""
    from .timing import NVIDIA_REPS, NVIDIA_WARMUP_CALLS

    timer = state.get("nvidia_timer")
    if timer is None:
        timer = state["nvidia_timer"] = Timer(dev, queued=True, flush_style="nvidia")
    saved = [[a.clone() if isinstance(a, torch.Tensor) else a for a in s] for s in args]

    def setup(i):
        for dst, src in zip(args[i % len(args)], saved[i % len(args)]):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)

    def call(i):
        return fn(*args[i % len(args)])

    return timer.measure(call, max(reps, NVIDIA_REPS), warmup_ms=0, budget_s=budget_s,
                         min_reps=min_reps, setup=setup, warmup_calls=NVIDIA_WARMUP_CALLS)


def eager_window_count(first_median_ms: float, windows: int, below_ms: float) -> int:
    """How many of NVIDIA's readings the eager T_b takes, given the first one's median: `windows`
    for a reference under below_ms a call (host-bound: each reading draws a host level), else 1."""
    return max(1, int(windows)) if first_median_ms < below_ms else 1


def pool_windows(readings: list) -> Timing:
    """Several readings of one workload as one Timing: their samples pooled (its median is the level
    most samples sit at), the first reading's kernels and streams; the note names the readings'
    own medians."""
    first = readings[0]
    if len(readings) == 1:
        return first
    meds = sorted(t.median_ms for t in readings)
    note = f"{len(readings)} readings, medians {meds[0]:.4f}-{meds[-1]:.4f} ms"
    busy = [t.busy_ms for t in readings if t.busy_ms is not None]
    return replace(first, samples_ms=[x for t in readings for x in t.samples_ms],
                   streams=set().union(*(t.streams for t in readings)),
                   busy_ms=statistics.median(busy) if len(busy) == len(readings) else None,
                   note="; ".join(x for x in (first.note, note) if x))


def measure_eager(state: dict, dev, fn, args: list, reps: int, budget_s: float, min_reps: int = 5,
                  windows: Optional[int] = None) -> Timing:
    """The eager T_b: NVIDIA's reading (measure_like_nvidia), taken settings.eager_windows times
    where the first reading is host-bound (eager_window_count), spaced by eager_window_gap_s,
    pooled (pool_windows). `windows` overrides the setting (1: one reading, as a hurried run)."""
    from .. import settings

    cfg = settings.get()
    first = measure_like_nvidia(state, dev, fn, args, reps, budget_s, min_reps=min_reps)
    n = eager_window_count(first.median_ms, cfg.eager_windows if windows is None else windows,
                           cfg.eager_windows_below_ms)
    readings = [first]
    for _ in range(n - 1):
        time.sleep(cfg.eager_window_gap_s)
        readings.append(measure_like_nvidia(state, dev, fn, args, reps, budget_s, min_reps=min_reps))
    return pool_windows(readings)


def worker_env(compile_threads: int = 2) -> dict:
    """Environment of a baseline worker process: the sandbox's allowlist (one list for every process
    that runs a reference or a candidate: no API keys, tokens, proxies or database URLs)."""
    from ..sandbox.env import sandbox_env

    env = sandbox_env()
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    return env


def time_problem_isolated(problem, variant: str, *, timeout_s: Optional[float] = None,
                          **kwargs) -> list[BaselineRow]:
    """time_problem in a sandboxed process (its keyword arguments must be JSON: numbers, strings,
    lists). A reference that hangs past timeout_s (default: twice the problem budget plus 5 minutes
    for torch.compile), crashes or is refused gives one runtime_error/timeout row per workload with
    the reason in one line."""
    from ..problem.loader import problem_to_json
    from ..sandbox import SandboxError, run_python

    budget = float(kwargs.get("problem_budget_s", 60.0))
    timeout_s = timeout_s or 2 * budget + 300
    kwargs = {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in kwargs.items()}
    payload = {"problem": problem_to_json(problem), "variant": variant, "kwargs": kwargs}
    try:
        # torch.compile starts compiler processes (Triton's ptxas, inductor's C++ builds); eager
        # needs none, so there a reference that starts one is refused in one line
        out = run_python("solforge.evaluate.baseline", "time_problem_entry", payload, timeout_s=timeout_s,
                         gpu=True, allow_subprocess=variant != "eager",
                         env_extra={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
        return [BaselineRow(**r) for r in out["rows"]]
    except SandboxError as e:
        status = "timeout" if e.kind == "timeout" else "runtime_error"
        return [BaselineRow(problem.name, w.uuid, variant, status, message=f"reference: {e}")
                for w in problem.workloads]
    except (KeyError, TypeError) as e:
        return [BaselineRow(problem.name, w.uuid, variant, "runtime_error",
                            message=f"reference run gave no usable rows ({type(e).__name__})")
                for w in problem.workloads]


def time_problem_entry(payload: dict) -> dict:
    """Sandbox entry point of time_problem_isolated: {"rows": [BaselineRow.to_json(), ...]}."""
    import tempfile

    from ..problem.loader import problem_from_json

    problem = problem_from_json(payload["problem"])
    kwargs = dict(payload.get("kwargs") or {})
    if "skip" in kwargs:
        kwargs["skip"] = frozenset(kwargs["skip"])
    with tempfile.TemporaryDirectory(prefix="baseline-") as stage:
        rows = list(time_problem(problem, payload["variant"], Path(stage), **kwargs))
    return {"rows": [r.to_json() for r in rows]}
