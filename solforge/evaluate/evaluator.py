"""Evaluating one candidate on one workload, inside the (already isolated) driver process.

Per workload: `correctness_rounds` rounds with fresh inputs (round 1 writes its new data into round
0's buffers, so a kernel that caches by pointer returns stale output), each against the reference run
on its own copies, outputs poisoned first; then timing over rotated input sets; then a poisoned
re-check of the last timed set, a caching probe on never-seen inputs, the side-stream check and the
SOL floor. With `one_session` the timed calls, the re-check and the probe's first round share one
profiler session (Timer.batched) and are read once it closes.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from . import caching_probe, gpu_share, guards
from .correctness import allocate_outputs, compare_all, normalize_reference_outputs, poison_
from .guards import GuardTripped
from .inputs import InputFactory, clone_inputs, write_into
from .results import EvalResult, EvalStatus
from .timing import (NVIDIA_WARMUP_CALLS, BatchUnavailable, SideStreams, Timer, Timing, TimingError,
                     default_backend, resolved, top_kernels)


def _setting(name: str):
    from .. import settings

    return getattr(settings.get(), name)


class ReferenceFailed(Exception):
    pass


class ContextLost(Exception):
    """The CUDA context is unusable (a sticky error such as an illegal address)."""


@dataclass
class EvalConfig:
    correctness_rounds: int = 3
    rep_count: int = 50
    warmup_ms: float = 25.0
    sol_floor_fraction: float = 0.5
    timing: bool = True
    timing_method: str = "auto"
    max_sets: int = 4
    set_bytes_budget: int = 4 << 30
    caching_probe: bool = True
    caching_probe_calls: int = field(default_factory=lambda: _setting("caching_probe_min_calls"))
    caching_probe_max_calls: int = field(default_factory=lambda: _setting("caching_probe_max_calls"))
    caching_probe_budget_ms: float = field(
        default_factory=lambda: _setting("caching_probe_budget_ms"))
    caching_probe_premade_bytes: int = field(
        default_factory=lambda: _setting("caching_probe_premade_bytes"))
    caching_probe_make_budget_s: float = field(
        default_factory=lambda: _setting("caching_probe_make_budget_s"))
    timing_budget_s: float = 10.0
    duty_gap_factor: float = field(default_factory=lambda: _setting("duty_gap_factor"))
    duty_min_call_ms: float = field(default_factory=lambda: _setting("duty_min_call_ms"))
    # SOL-ExecBench's measurement (docs/timing_agreement.md): 10 warm-up calls (0: warmup_ms of
    # them instead), the call queued right behind its L2 flush; timing_backend auto | cupti-python
    # | kineto (auto: $SOLFORGE_CUPTI_BACKEND, else cupti-python where it imports), by default
    # settings.candidate_timing_backend
    warmup_calls: int = NVIDIA_WARMUP_CALLS
    timing_queued: bool = True
    timing_backend: str = field(default_factory=lambda: _setting("candidate_timing_backend"))
    # a workload's timed calls, re-check and caching probe in one profiler session (Timer.batched)
    # instead of one session for the timing and one for the probe
    one_session: bool = field(default_factory=lambda: _setting("timing_one_session"))

    @classmethod
    def from_dict(cls, d: dict) -> "EvalConfig":
        return cls(**{k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__})


@dataclass
class Env:
    """What every workload of one candidate shares."""

    problem: str
    reference: Callable                  # the reference's run()
    caller: Any                          # .prepare(rw, inputs, outputs) -> zero-arg call
    device: torch.device
    config: EvalConfig
    integrity: Optional[guards.Integrity] = None
    custom_fn: Optional[Callable] = None
    blob_roots: list = field(default_factory=list)
    t_sol_ms: dict = field(default_factory=dict)
    reference_label: str = ""
    timer: Optional[Timer] = None
    refcache: Any = None                 # refcache.RefCacheReader (cuda candidates only) or None

    def cached_reference(self, rw, seed):
        """With a reference cache that has an entry for (workload, seed): a callable that returns the
        expected outputs for the inputs made from `seed` (loaded and verified, else run live), to be
        called only after the candidate's call (refcache.py). None: no entry, use the live path."""
        if self.refcache is None or seed is None or not self.refcache.has(rw.uuid, seed):
            return None

        def expected(inputs):
            out = self.refcache.get(rw.uuid, seed, inputs, self.device)
            if out is None:
                return self.run_reference(rw, clone_inputs(inputs))
            return normalize_reference_outputs(out, rw, self.device)
        return expected

    def get_timer(self) -> Timer:
        if self.timer is None:
            cfg = self.config
            backend = cfg.timing_backend if cfg.timing_backend != "auto" else default_backend()
            self.timer = Timer(self.device, cfg.timing_method,
                               duty_gap_factor=cfg.duty_gap_factor,
                               duty_min_call_ms=cfg.duty_min_call_ms,
                               queued=cfg.timing_queued, backend=backend, strict_streams=True)
        return self.timer

    def run_reference(self, rw, inputs: dict) -> dict:
        args = [inputs[k] for k in rw.definition.inputs]
        try:
            with torch.no_grad():
                out = self.reference(*args)
            return normalize_reference_outputs(out, rw, self.device)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ReferenceFailed(f"{type(e).__name__}: {e}") from None


def timing_set_count(cfg: EvalConfig, set_bytes: int) -> int:
    """How many input sets the timing rotates over (the reference cache's filler plans with it)."""
    return max(1, min(cfg.max_sets, cfg.set_bytes_budget // max(set_bytes, 1)))


def _nbytes(d: dict) -> int:
    return sum(v.numel() * v.element_size() for v in d.values() if isinstance(v, torch.Tensor))


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def context_alive(device) -> bool:
    try:
        _sync(device)
        return float(torch.ones(1, device=device).add_(1).item()) == 2.0
    except Exception:  # noqa: BLE001
        return False


def classify_exception(e: BaseException) -> tuple[EvalStatus, str]:
    msg = f"{type(e).__name__}: {e}"
    low = msg.lower()
    if isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in low or \
            "out_of_memory" in low:
        return EvalStatus.OOM, msg
    return EvalStatus.RUNTIME_ERROR, msg


def evaluate_workload(env: Env, rw) -> EvalResult:
    res = EvalResult(workload_uuid=rw.uuid, status=EvalStatus.RUNTIME_ERROR, problem=env.problem,
                     reference_label=env.reference_label)
    try:
        try:
            _evaluate(env, rw, res)
        except SideStreams as e:
            # the records showed work on another stream, wherever they were read (the timed calls,
            # the probe, a session's split): the guard, never a fallback to events
            guards.check_side_streams(e.streams, e.names)
            raise
    except GuardTripped as g:
        res.status, res.guard, res.message = EvalStatus.REJECTED, g.guard.value, g.message
        res.correct = False
    except ReferenceFailed as e:
        res.status, res.message = EvalStatus.SKIPPED, f"not evaluated: the reference failed: {e}"
    except _InputsFailed as e:
        res.status, res.message = EvalStatus.SKIPPED, f"not evaluated: making inputs failed: {e}"
    except Exception as e:  # noqa: BLE001 - the candidate's failure, recorded
        res.status, res.message = classify_exception(e)
        res.correct = False
        res.extra["traceback"] = traceback.format_exc(limit=6)[-2000:]
        if not context_alive(env.device):
            res.extra["context_lost"] = True
    return res


class _InputsFailed(Exception):
    pass


def _make(factory: InputFactory, r: int) -> dict:
    try:
        return factory.make(r)
    except torch.cuda.OutOfMemoryError:
        # the device's memory, not the problem's inputs: an OOM verdict, which lanes sharing a GPU
        # retry alone (orchestrate.evaluation); "skipped" would read as the candidate's fault
        raise
    except Exception as e:  # noqa: BLE001
        raise _InputsFailed(f"{type(e).__name__}: {e}") from None


def _evaluate(env: Env, rw, res: EvalResult) -> None:
    # Lanes sharing a GPU (gpu_share) wait for each other's `alone` sections, so everything that
    # does not need a quiet GPU happens in the shared one: the correctness rounds, the extra timing
    # input sets and the reference output of the re-check after timing.
    with gpu_share.shared():
        timed = _check(env, rw, res)
        plan = _prepare_timing(env, rw, *timed) if timed is not None else None
    if plan is not None:
        with gpu_share.alone():
            _time(env, rw, res, plan)


@dataclass
class _Costs:
    """Wall seconds seen in the correctness rounds, the least of each (a first call or set pays
    one-off costs): one candidate call with its synchronisation (an upper bound on its kernel time)
    and one input set. They size the caching probe before the GPU is taken alone."""
    call_s: Optional[float] = None
    make_s: Optional[float] = None

    def saw(self, what: str, seconds: float) -> None:
        old = getattr(self, what)
        setattr(self, what, seconds if old is None else min(old, seconds))


def _check(env: Env, rw, res: EvalResult):
    """The correctness rounds; what timing needs (factory, inputs, outputs, notes, last_round,
    costs) when they passed and timing is on, else None (res says why)."""
    cfg, dev = env.config, env.device
    try:
        factory = InputFactory(rw, dev, custom_fn=env.custom_fn, blob_roots=env.blob_roots)
    except torch.cuda.OutOfMemoryError:
        raise  # as in _make
    except Exception as e:  # noqa: BLE001
        raise _InputsFailed(f"{type(e).__name__}: {e}") from None
    notes = list(factory.notes)
    tol = rw.workload.tolerance
    worst = None
    inputs = outputs = None
    costs = _Costs()
    for r in range(max(cfg.correctness_rounds, 1)):
        t0 = time.perf_counter()
        fresh = _make(factory, r)
        costs.saw("make_s", time.perf_counter() - t0)
        if r == 1 and inputs is not None:
            # Same buffers, new data: a kernel that caches by pointer now returns stale output.
            for k, v in fresh.items():
                if not (isinstance(v, torch.Tensor) and isinstance(inputs.get(k), torch.Tensor)
                        and write_into(inputs[k], v)):
                    inputs[k] = v
            for t in outputs.values():
                poison_(t, r)
        else:
            inputs, outputs = fresh, allocate_outputs(rw, dev, r)
        ref = env.cached_reference(rw, r) or env.run_reference(rw, clone_inputs(inputs))
        cmp = _checked_call(env, rw, inputs, outputs, ref, tol, costs=costs)
        res.rounds = r + 1
        if not cmp.ok:
            res.status, res.correct = EvalStatus.INCORRECT, False
            res.max_abs_err, res.max_rel_err = cmp.max_abs_err, cmp.max_rel_err
            res.matched_ratio, res.message = cmp.matched_ratio, f"round {r}: {cmp.reason}"
            return
        if cmp.worse_than(worst):
            worst = cmp
    res.correct = True
    res.max_abs_err, res.max_rel_err, res.matched_ratio = (worst.max_abs_err, worst.max_rel_err,
                                                           worst.matched_ratio)
    if not cfg.timing:
        res.status = EvalStatus.PASSED
        res.message = "; ".join(notes + ["correctness only (timing off)"])
        return None
    return factory, inputs, outputs, notes, max(cfg.correctness_rounds, 1) - 1, costs


def _checked_call(env: Env, rw, inputs, outputs, ref, tol, call=None, costs=None):
    """`ref`: the expected outputs, or a callable(inputs) giving them (a cached reference: read only
    after the candidate's call and its guards). costs: a _Costs that sees the call's wall time."""
    snap = guards.snapshot_inputs(inputs)
    before = guards.python_threads()
    if call is None:
        call = env.caller.prepare(rw, inputs, outputs)
    t0 = time.perf_counter()
    call()
    _sync(env.device)
    if costs is not None:
        costs.saw("call_s", time.perf_counter() - t0)
    if env.integrity is not None:
        env.integrity.check()
    guards.check_threads(before)
    guards.check_inputs_unchanged(inputs, snap)
    if callable(ref):
        ref = ref(inputs)
    return compare_all(outputs, ref, tol)


@dataclass
class _TimingPlan:
    """What the timed calls need, made before the GPU is taken alone: the input sets (rotated), their
    prepared calls, the re-check's expected output for the last set, the notes so far and the
    caching probe's draws (with the factory that makes its never-seen inputs)."""
    sets: list
    calls: list
    recheck_ref: object
    notes: list
    probe: Optional["_ProbePrep"] = None


@dataclass
class _ProbePrep:
    """The caching probe's draws, made while the GPU is shared: its seed base, the seeds of the
    fresh calls whose outputs are checked (a cached reference's, else None) and the first round's
    fresh input sets made ahead ({seed: inputs}; none when they would not fit in
    caching_probe_premade_bytes: each fresh call then makes its set in the probe's setup)."""
    factory: InputFactory
    set_bytes: int
    budget: int
    seed: int
    final: Optional[list]
    premade: dict = field(default_factory=dict)
    max_calls: int = 1              # calls per side at most, for the time a set takes to make

    def fits(self, n: int) -> bool:
        return (n + 1) * self.set_bytes <= self.budget

    def make_ahead(self, seeds: list) -> bool:
        """The sets of `seeds` made now (those not made yet), if they fit; whether they are."""
        if not self.fits(len(seeds)):
            return False
        for s in seeds:
            if s not in self.premade:
                self.premade[s] = _make(self.factory, s)
        return True

    def make_inputs(self, seed: int) -> dict:
        ready = self.premade.pop(seed, None)
        return ready if ready is not None else _make(self.factory, seed)


def _prepare_timing(env: Env, rw, factory, inputs, outputs, notes: list,
                    last_round: int = 0, costs: Optional[_Costs] = None) -> _TimingPlan:
    cfg, dev = env.config, env.device
    set_bytes = max(_nbytes(inputs) + _nbytes(outputs), 1)
    n_sets = timing_set_count(cfg, set_bytes)
    last_seed = 100 + n_sets - 1 if n_sets > 1 else last_round
    sets = [(inputs, outputs)]
    for j in range(1, n_sets):
        sets.append((_make(factory, 100 + j), allocate_outputs(rw, dev, 0)))
    if n_sets == 1:
        notes.append("one input set (too large to rotate)")
    calls = [env.caller.prepare(rw, i, o) for i, o in sets]
    # The re-check's expected output, computed now from a copy of the last set: the candidate may
    # not change its inputs (guards.check_inputs_unchanged), so it is the same after timing. A
    # cached one stays a callable read after the candidate's call, as in the correctness rounds.
    last_in = sets[-1][0]
    ref = env.cached_reference(rw, last_seed) or env.run_reference(rw, clone_inputs(last_in))
    probe = _prepare_probe(env, rw, factory, last_in, costs) if cfg.caching_probe and \
        cfg.caching_probe_calls > 0 else None
    return _TimingPlan(sets, calls, ref, notes, probe)


def _prepare_probe(env: Env, rw, factory: InputFactory, inputs: dict,
                   costs: Optional[_Costs] = None) -> _ProbePrep:
    """The probe's seeds, the most calls a side may get for the time its input sets take to make,
    and, where at most caching_probe_premade_bytes, its first round's fresh input sets (as many as
    a side would get at the correctness rounds' call time, which is at least the kernel's: the
    probe is sized by the timed median later, and makes any further sets before its calls).
    Made here, they cost the GPU-alone section one copy per tensor instead of a call to the input
    factory per fresh call (0.2 s of an evaluation of 15 small workloads, benchmarks/eval_throughput)."""
    cfg = env.config
    seed = caching_probe.fresh_seed()
    # With a reference cache: every timed fresh call still gets never-seen values (os.urandom seeds);
    # only the last one of each probe round, whose output is checked, uses one of the run's pool
    # seeds (drawn when the cache was filled) so that its expected output is cached (refcache.py).
    final = None
    if env.refcache is not None:
        pool = [s for s in env.refcache.probe_seeds.get(rw.uuid, []) if env.refcache.has(rw.uuid, s)]
        if pool:
            import random

            final = random.sample(pool, k=min(2, len(pool)))
            final += final[:1] * (2 - len(final))
    costs = costs or _Costs()
    prep = _ProbePrep(factory, max(_nbytes(inputs), 1), cfg.caching_probe_premade_bytes, seed, final)
    lo, budget = cfg.caching_probe_calls, cfg.caching_probe_budget_ms
    prep.max_calls = caching_probe.most_calls(lo, cfg.caching_probe_max_calls, costs.make_s or 0.0,
                                              cfg.caching_probe_make_budget_s)
    guess = prep.max_calls if costs.call_s is None else \
        caching_probe.probe_calls(costs.call_s * 1e3, budget, lo, prep.max_calls)
    prep.make_ahead([caching_probe.fresh_call_seed(seed, j) for j in range(guess)] + (final or [])[:1])
    return prep


def _time(env: Env, rw, res: EvalResult, plan: _TimingPlan) -> None:
    timer = env.get_timer()
    if env.config.one_session and hasattr(timer, "batched"):
        finish = None
        try:
            finish = timer.batched(lambda: _timed_calls(env, rw, res, plan))
        except BatchUnavailable:
            pass                        # no session to share: one per measurement, as below
        except SideStreams:
            raise
        except TimingError as e:
            # its records could not be read after the calls ran: they run again, each measurement
            # in a session of its own (the probe left the buffers as the re-check needs them)
            plan.notes.append(f"one profiler session for the workload failed ({e}); timed again")
        if finish is not None:
            return finish()
    _timed_calls(env, rw, res, plan)()


def _timed_calls(env: Env, rw, res: EvalResult, plan: _TimingPlan) -> Callable[[], None]:
    """The calls that need the GPU alone: the timed calls, the post-timing re-check and the caching
    probe's first round. Returns what reads their results into res, to be called after them (inside
    Timer.batched: once its session has closed, the probe sized from the warm-up's estimate of one
    call instead of the median it cannot read yet)."""
    cfg, dev = env.config, env.device
    timer = env.get_timer()
    sets, calls, notes = plan.sets, plan.calls, plan.notes
    before = guards.python_threads()
    timing = timer.measure(lambda i: calls[i % len(calls)](), cfg.rep_count, cfg.warmup_ms,
                           cfg.timing_budget_s,
                           warmup_calls=cfg.warmup_calls if cfg.warmup_calls > 0 else None)
    _sync(dev)
    if env.integrity is not None:
        env.integrity.check()
    guards.check_threads(before)
    # work on a side stream: the timer is strict (Env.get_timer), so its records raise SideStreams
    # before any Timing is made of them (evaluate_workload turns that into the guard)
    # The last timed set once more, poisoned, through the plan that was timed (its workspace as the
    # timed calls left it: a kernel that must leave it zeroed, workspace_zero "0", and did not, or one
    # that skips work on inputs it has seen, fails here).
    last_in, last_out = sets[-1]
    for t in last_out.values():
        poison_(t, 1)
    cmp = _checked_call(env, rw, last_in, last_out, plan.recheck_ref, rw.workload.tolerance,
                        call=calls[-1])
    if not cmp.ok:
        def incorrect() -> None:
            res.status, res.correct = EvalStatus.INCORRECT, False
            res.message = f"after timing (inputs seen before): {cmp.reason}"
        return incorrect
    probe = None
    if cfg.caching_probe and cfg.caching_probe_calls > 0:
        estimate = timing.median_ms if isinstance(timing, Timing) else timer.last_call_ms
        probe = _start_probe(env, rw, sets[-1], calls[-1], estimate, plan.probe)

    def finish() -> None:
        t = resolved(timing)
        res.median_ms, res.p10_ms, res.p90_ms = t.median_ms, t.p10_ms, t.p90_ms
        res.spread, res.n_reps, res.timing_method = t.spread, t.n, t.method
        res.extra["kernels_per_call"] = t.kernels_per_call
        if t.kernel_ms:
            res.extra["kernel_ms"] = top_kernels(t.kernel_ms)
        res.extra["n_sets"] = len(sets)
        res.extra["timing_window"] = "queued" if timer.queued else "synced"
        if t.backend:
            res.extra["timing_backend"] = t.backend
        if not isinstance(timing, Timing):
            res.extra["timing_session"] = "one per workload"
        if t.note and t.note != t.method:
            notes.append(t.note)
        if probe is not None:
            _finish_probe(env, res, *probe)
            if res.status == EvalStatus.INCORRECT:
                return
        guards.check_sol_floor(t.median_ms, env.t_sol_ms.get(rw.uuid), cfg.sol_floor_fraction)
        res.status = EvalStatus.PASSED
        res.message = "; ".join(notes)

    return finish


def _start_probe(env: Env, rw, timing_set, call, median_ms: Optional[float], prep: _ProbePrep):
    """The caching probe (caching_probe.py) on the last timing set's own buffers and prepared call:
    its first round now; (calls per side, what finishes it) for _finish_probe. median_ms sizes it:
    the timed median, or inside one session the warm-up's estimate of a call (an upper bound)."""
    cfg = env.config
    n = caching_probe.probe_calls(median_ms, cfg.caching_probe_budget_ms, cfg.caching_probe_calls,
                                  prep.max_calls)
    inputs, outputs = timing_set

    def reference(ins, seed=None):
        expected = env.cached_reference(rw, seed) if seed is not None else None
        return expected(ins) if expected else env.run_reference(rw, ins)

    finish = caching_probe.start_probe(
        env.get_timer(), prep.make_inputs, inputs, outputs, call,
        reference, rw.workload.tolerance, n, seed=prep.seed,
        symmetric_setup=bool(median_ms) and median_ms < caching_probe.SYMMETRIC_BELOW_MS,
        final_seeds=prep.final, make_ahead=prep.make_ahead)
    prep.premade.clear()            # the sets made for more calls than the probe got
    if env.integrity is not None:
        env.integrity.check()       # the probe's calls ran candidate code before its verdict is used
    return n, finish


def _finish_probe(env: Env, res: EvalResult, n: int, finish) -> None:
    """Sets res INCORRECT if never-seen values gave a wrong output; raises GuardTripped(CACHING) if
    two independent rounds both find seen values clearly faster than new ones."""
    out = finish()
    if env.integrity is not None:
        env.integrity.check()       # a second round runs candidate code here
    if out.wrong_output:
        res.status, res.correct = EvalStatus.INCORRECT, False
        res.message = "caching probe: wrong output on never-seen values in reused buffers"
        return
    v = out.last
    res.extra["seen_inputs_probe_ms"], res.extra["fresh_inputs_ms"] = v.seen_ms, v.fresh_ms
    res.extra["caching_probe"] = {"calls": n, "rounds": [
        {"seen_ms": r.seen_ms, "fresh_ms": r.fresh_ms, "noise_ms": r.noise_ms,
         "suspicious": r.suspicious} for r in out.rounds]}
    if out.caching:
        rounds = "; ".join(f"{r.seen_ms:.4f} vs {r.fresh_ms:.4f} ms" for r in out.rounds)
        raise GuardTripped(guards.Guard.CACHING,
                           f"{v.seen_ms:.4f} ms on repeated inputs vs {v.fresh_ms:.4f} ms on fresh "
                           f"ones (< 80%, gap above the noise floor {v.noise_ms:.4f} ms) in "
                           f"{len(out.rounds)} independent probes ({rounds}, {n} calls each side): "
                           f"results or work cached across calls")
