"""Baselines T_b: the reference itself, timed in eager PyTorch and under torch.compile, with the same
timer (CUPTI span, L2 flush, rotated inputs) as candidates. References are trusted code, so one
long-lived worker process may time many problems; scripts/run_baselines.py restarts a worker that
dies and runs several compile workers in parallel, taking a GPU lock around every measurement.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch

from .evaluator import classify_exception
from .inputs import InputFactory
from .reference import DEQUANT_LABEL, Fp4Shim, load_reference, needs_fp4_dequant
from .timing import Timer


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


def _compiled(fn):
    import torch._dynamo as dynamo

    # One compile per problem: shapes that change between workloads turn on dynamic shapes
    # (automatic_dynamic_shapes); a high recompile limit keeps later workloads compiled rather
    # than silently falling back to eager.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 256)
    return torch.compile(fn)


def time_problem(problem, variant: str, stage_dir: Path, *, reps: int = 20, warmup_ms: float = 10.0,
                 workload_budget_s: float = 1.5, problem_budget_s: float = 60.0,
                 lock_path: Optional[str] = None, skip: frozenset = frozenset(),
                 blob_roots: Optional[list] = None, timer: Optional[Timer] = None
                 ) -> Iterator[BaselineRow]:
    """Yield one BaselineRow per workload of `problem` (a solforge.problem.Problem)."""
    dev = torch.device("cuda")
    defn = problem.definition
    name = defn.name
    t_problem = time.monotonic()
    try:
        mod = load_reference(defn, stage_dir, name="ref_" + "".join(c if c.isalnum() else "_"
                                                                   for c in name))
    except Exception as e:  # noqa: BLE001
        for w in problem.workloads:
            yield BaselineRow(name, w.uuid, variant, "runtime_error",
                              message=f"reference does not load: {type(e).__name__}: {e}")
        return
    label = ""
    shim = None
    if needs_fp4_dequant(defn):
        shim = Fp4Shim().install()
        label = DEQUANT_LABEL
    try:
        fn = mod.run if variant == "eager" else _compiled(mod.run)
        custom = getattr(mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint \
            else None
        timer = timer or Timer(dev)
        for w in problem.workloads:
            if w.uuid in skip:
                continue
            if time.monotonic() - t_problem > problem_budget_s:
                yield BaselineRow(name, w.uuid, variant, "skipped", label=label,
                                  message=f"problem time box of {problem_budget_s:.0f} s reached")
                continue
            yield _time_workload(name, variant, fn, w, dev, custom, blob_roots, timer, reps,
                                 warmup_ms, workload_budget_s, lock_path, label)
    finally:
        if shim is not None:
            shim.remove()


def _time_workload(name, variant, fn, w, dev, custom, blob_roots, timer, reps, warmup_ms,
                   budget_s, lock_path, label) -> BaselineRow:
    t0 = time.monotonic()
    row = BaselineRow(name, w.uuid, variant, "runtime_error", label=label)
    try:
        factory = InputFactory(w, dev, custom_fn=custom, blob_roots=blob_roots or [])
        sets = [factory.make(100 + j) for j in range(2)]
        order = list(w.definition.inputs)
        args = [[s[k] for k in order] for s in sets]
        if factory.notes:
            row.message = "; ".join(factory.notes)
        with torch.no_grad():
            fn(*args[0])  # the compile (outside the lock: it is CPU work)
            torch.cuda.synchronize()
            with gpu_lock(lock_path):
                t = timer.measure(lambda i: fn(*args[i % 2]), reps, warmup_ms, budget_s)
        row.status = "passed"
        row.median_ms, row.p10_ms, row.p90_ms, row.spread = t.median_ms, t.p10_ms, t.p90_ms, t.spread
        row.n_reps, row.timing_method = t.n, t.method
    except Exception as e:  # noqa: BLE001
        row.status, msg = classify_exception(e)
        row.message = (row.message + "; " if row.message else "") + msg[:500]
    finally:
        row.seconds = time.monotonic() - t0
    return row


def worker_env(compile_threads: int = 2) -> dict:
    env = dict(os.environ)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads))
    env["PYTHONUNBUFFERED"] = "1"
    return env
