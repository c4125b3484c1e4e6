"""The evaluator's process entry: `python -m solforge.evaluate.driver STAGE_DIR`, or main() in a child
forked by the zygote (zygote.py) that has the same modules preloaded but never initialized CUDA.

Runs in a fresh process per candidate (see runner.py). Reads STAGE_DIR/job.json, definition.json,
workload.jsonl and the candidate (candidate.json + manifest.json + cubins, or host.py), and writes JSON
lines to its real stdout: one "hardware" line, then per workload a "start" line and a "result" line (an
EvalResult), then a "phases" line (seconds per phase, see phases.py) and "done". Anything the candidate
or a library prints goes to stderr: stdout is reserved (reserve_stdout) before torch is imported.

If a workload loses the CUDA context (illegal address and other sticky errors), the remaining
workloads are reported as skipped and the process exits with code 3.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

_T_MODULE = time.time()  # spawned: the interpreter is up and this module runs
_OUT = None

import json  # noqa: E402
from pathlib import Path  # noqa: E402

from .phases import PhaseClock, own_rusage  # noqa: E402


def reserve_stdout() -> None:
    """Keep the real stdout (fd 1) for JSON lines; everything that prints afterwards (torch, the
    candidate) goes to stderr."""
    global _OUT
    fd = os.dup(1)
    os.dup2(2, 1)
    _OUT = os.fdopen(fd, "w", buffering=1)


def emit(kind: str, **payload) -> None:
    from .results import dumps_line

    _OUT.write(dumps_line({"type": kind, **payload}) + "\n")
    _OUT.flush()


def profile_rows(profiler, n: int) -> list[dict]:
    """The n functions of most own time in a cProfile run: where, calls, own and cumulative s."""
    import pstats

    st = pstats.Stats(profiler).stats  # {(file, line, func): (primitive calls, calls, tt, ct, callers)}
    rows = sorted(st.items(), key=lambda kv: -kv[1][2])[:max(n, 0)]
    return [{"func": f"{Path(f).name}:{line}:{fn}", "calls": nc, "own_s": round(tt, 6),
             "cum_s": round(ct, 6)} for (f, line, fn), (_cc, nc, tt, ct, _callers) in rows]


def load_job(stage: Path):
    from ..problem.loader import load_definition, load_workloads

    job = json.loads((stage / "job.json").read_text())
    defn = load_definition(stage / "definition.json")
    workloads = load_workloads(stage / "workload.jsonl", defn)
    wanted = job.get("workloads")
    if wanted:
        order = {u: i for i, u in enumerate(wanted)}
        workloads = sorted((w for w in workloads if w.uuid in order), key=lambda w: order[w.uuid])
    return job, defn, workloads


def _instrument(clock: PhaseClock, device):
    """Phase accounting for one process: a Timer subclass and an InputFactory subclass that add
    their seconds to `clock`. Both synchronize after their GPU work so that the seconds land in the
    phase that caused them. Installed before any candidate code is loaded (trusted code only)."""
    import torch

    from . import evaluator, gpu_share, inputs, timing

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def phased(phase: str, name: str):
        """Timer.<name>, its seconds counted in `phase`."""
        def method(self, *a, **k):
            with clock.phase(phase):
                return getattr(super(PhasedTimer, self), name)(*a, **k)
        return method

    class PhasedTimer(timing.Timer):
        warmup = phased("timing_warmup", "warmup")
        warmup_n = phased("timing_warmup", "warmup_n")
        _measure_cupti = phased("timing_profile", "_measure_cupti")
        _measure_events = phased("timing_profile", "_measure_events")
        # inside one session for the workload (Timer.batched): its start, its stop with the
        # records read back, and the timed calls; the checks between them stay "checks"
        _open_session = phased("timing_profile", "_open_session")
        _close_session = phased("timing_profile", "_close_session")
        _batched_loop = phased("timing_profile", "_timed_loop")

        def _timed_loop(self, *a, **k):
            # on its own, _measure_cupti's phase holds it already
            if self._batch is None:
                return super()._timed_loop(*a, **k)
            return self._batched_loop(*a, **k)

    class PhasedInputFactory(inputs.InputFactory):
        def make(self, *a, **k):
            with clock.phase("inputs"):
                out = super().make(*a, **k)
                sync()
                return out

    @contextlib.contextmanager
    def waited(section):
        # entering the section in its own phase: with several lanes on one GPU an evaluation waits
        # there for the others' timing, and that wait is no check; the runner pauses the
        # evaluation's own clock between "wait" and "waited" (runner.OwnClock), so a lane queued
        # behind others is not slow, while a kernel that hangs inside a section is
        with contextlib.ExitStack() as stack:
            with clock.phase("gpu_wait"):
                emit("wait")
                try:
                    stack.enter_context(section)
                finally:
                    emit("waited")
            yield

    class PhasedShare:
        """gpu_share's two sections, the wait to enter them counted as gpu_wait."""

        @staticmethod
        def shared():
            return waited(gpu_share.shared())

        @staticmethod
        def alone(path: str = ""):
            return waited(gpu_share.alone(path))

    # The evaluator builds its factories and (lazily) its timer from its module globals; point them
    # at the phased subclasses. Integrity snapshots the timing module's own callables, not these.
    evaluator.InputFactory = PhasedInputFactory
    evaluator.Timer = PhasedTimer
    evaluator.gpu_share = PhasedShare


def main(argv: list[str], *, t_start: float | None = None, mode: str = "spawn") -> int:
    """`t_start`: epoch seconds at which this process started running Python (the zygote child's
    fork return); `mode` ("spawn" | "zygote" | "zygote-spare": a child whose CUDA context the zygote
    made ahead) is reported in the phases line."""
    if len(argv) != 1:
        print("usage: python -m solforge.evaluate.driver STAGE_DIR", file=sys.stderr)
        return 2
    t_start = _T_MODULE if t_start is None else t_start
    clock = PhaseClock()
    launch_t = os.environ.get("SOLFORGE_LAUNCH_T")
    if launch_t:
        try:
            clock.add("launch", max(0.0, t_start - float(launch_t)))
        except ValueError:
            pass
    stage = Path(argv[0]).resolve()
    t0 = time.perf_counter()
    with clock.phase("imports"):
        import torch

        from . import guards, hardware
        from .evaluator import EvalConfig, Env, classify_exception, context_alive, evaluate_workload
        from .reference import DEQUANT_LABEL, Fp4Shim, load_reference, needs_fp4_dequant
        from .results import EvalResult, EvalStatus
        from ..problem import loader  # noqa: F401 - pydantic, counted here rather than in "load"
    with clock.phase("load"):
        job, defn, workloads = load_job(stage)

    problem = job.get("problem") or defn.name
    config = EvalConfig.from_dict(job.get("settings", {}))
    with clock.phase("cuda_init"):
        if torch.cuda.is_available():
            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
            torch.empty(1, device=device)  # the context exists from here on
            torch.cuda.synchronize(device)
        else:  # CPU: correctness of host candidates only (how CI exercises the process machinery)
            device = torch.device("cpu")
            config.timing = False
    torch.backends.cuda.matmul.allow_tf32 = False  # references are fp32 ground truth
    torch.backends.cudnn.allow_tf32 = False
    with clock.phase("hardware"):
        emit("hardware", **hardware.capture(device).__dict__)
    _instrument(clock, device)

    def fail_all(status, message, from_index=0):
        for w in workloads[from_index:]:
            emit("result", **EvalResult(w.uuid, status, problem=problem, message=message).to_json())

    # job settings "cprofile": N (benchmarks only, e.g. eval_throughput's `profile` configuration):
    # the workload loop under cProfile, its N functions of most own time in the phases line, to see
    # what a phase such as "checks" is made of
    n_profile = int(job.get("settings", {}).get("cprofile") or 0)
    profiler = None

    def finish(**extra):
        if profiler is not None:
            profiler.disable()
            extra["profile"] = profile_rows(profiler, n_profile)
        emit("phases", mode=mode, pid=os.getpid(), seconds=clock.to_json(),
             driver_s=round(time.perf_counter() - t0, 6), **extra)
        # how much GPU memory the exit will hand back (the runner may return before it has)
        try:
            peak = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else 0
        except Exception:  # noqa: BLE001 - unknown: the runner waits for the exit
            peak = -1
        emit("done", gpu_reserved_peak=int(peak), rusage=own_rusage(), **extra)

    with clock.phase("load"):
        ref_mod = load_reference(defn, stage)
    label = ""
    if needs_fp4_dequant(defn):
        Fp4Shim().install()
        label = DEQUANT_LABEL
    custom_fn = getattr(ref_mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint \
        else None

    def reference(*args):
        with clock.phase("reference"):
            out = ref_mod.run(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out

    kind = job.get("candidate_kind", "cuda")
    integrity = guards.Integrity()  # before any candidate code is loaded
    try:
        with clock.phase("load"):
            if kind == "host":
                from .callers import HostCaller

                caller = HostCaller(stage, device, allow_torch=bool(job.get("allow_torch", False)))
            else:
                from .callers import CudaCaller

                caller = CudaCaller(stage, device)
    except Exception as e:  # noqa: BLE001
        status, msg = classify_exception(e)
        fail_all(status, f"loading the candidate failed: {msg}")
        finish()
        return 0
    roots = [stage] + [Path(p) for p in job.get("blob_roots", [])]
    refcache = None
    if job.get("refcache") and kind == "cuda":
        # cuda candidates only: they have no host code that could read the cache (refcache.py)
        from .refcache import RefCacheReader

        refcache = RefCacheReader(job["refcache"], problem=problem, reference_source=defn.reference,
                                  device_name=(torch.cuda.get_device_name(device)
                                               if device.type == "cuda" else "cpu"))
    env = Env(problem=problem, reference=reference, caller=caller, device=device, config=config,
              integrity=integrity, custom_fn=custom_fn, blob_roots=roots,
              t_sol_ms=job.get("t_sol_ms", {}), reference_label=label, refcache=refcache)
    if n_profile > 0:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    for i, w in enumerate(workloads):
        emit("start", uuid=w.uuid, index=i)
        before = clock.snapshot()
        tw = time.perf_counter()
        res = evaluate_workload(env, w)
        total = time.perf_counter() - tw
        parts = clock.since(before)
        clock.add("checks", max(0.0, total - sum(parts.values())))
        res.extra["phases"] = {**{k: round(v, 6) for k, v in parts.items()},
                               "workload": round(total, 6)}
        if refcache is not None:
            st = refcache.stats.get(w.uuid, {"hits": 0, "live": 0, "rejected": []})
            res.extra["refcache"] = st
            note = f"reference cache: {st['hits']} hit(s), {st['live']} live" + (
                f", rejected: {'; '.join(st['rejected'])[:300]}" if st["rejected"] else "")
            res.message = f"{res.message}; {note}" if res.message else note
        emit("result", **res.to_json())
        if res.extra.get("context_lost"):
            fail_all(EvalStatus.SKIPPED, f"not evaluated: workload {w.uuid} lost the CUDA context "
                                         f"({res.message[:200]})", i + 1)
            finish(context_lost=True)
            os._exit(3)  # the context is unusable; skip atexit handlers that would touch it
        if i + 1 < len(workloads) and not context_alive(device):
            fail_all(EvalStatus.SKIPPED, "not evaluated: the CUDA context was lost", i + 1)
            finish(context_lost=True)
            os._exit(3)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    finish()
    return 0


if __name__ == "__main__":
    reserve_stdout()
    _rc = main(sys.argv[1:])
    # Results are flushed line by line; skip interpreter teardown (seconds with torch and a CUDA
    # context loaded, and nothing of it is needed: the process ends here).
    for _f in (sys.stdout, sys.stderr, _OUT):
        _f.flush()
    os._exit(_rc)
