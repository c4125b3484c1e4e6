"""The bench the agents work at: static checks, compile, evaluate, roofline — behind one object.

Wraps solforge.compile, solforge.evaluate and solforge.roofline and turns their results into the
agents' Outcome. Everything that needs no GPU (checks, compile, roofline, the evaluation job) works
anywhere; the evaluation itself runs on a GPU slot (solforge.orchestrate.evaluation), or through a
stand-in evaluator a test injects. Tests and the LLM tools use the same object.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from ..candidate import Candidate, eval_expr, launch_env, parse_arg
from ..roofline.score import sol_score
from .outcome import AttemptOutcome, Outcome, WorkloadOutcome
from .prompts import GpuInfo, WorkloadSol

log = logging.getLogger(__name__)

NO_GPU = "no GPU on this machine: compiled only; correctness and timing need a GPU"
MAX_THREADS = 1024
MAX_SMEM = 227 * 1024  # Hopper/Blackwell opt-in dynamic shared memory per block


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, no GPU
        return False


def static_check(problem, cand: Candidate) -> Optional[str]:
    """Checks that need no compiler and no GPU: tensor names, launch expressions on every workload.

    Returns the first problem found (a message for the model) or None."""
    d = problem.definition
    try:
        cand.check_tensor_args(set(d.inputs), set(d.outputs))
    except ValueError as e:
        return str(e)
    # scalar inputs a custom-inputs entrypoint makes (Quant/032's global decode scales) have no value
    # before the inputs exist: a stand-in lets their launch expressions be checked for names
    made_later = {k: 1.0 for k, s in d.inputs.items() if s.is_scalar}
    for w in problem.workloads:
        env = launch_env(w.axes, {**made_later, **w.scalars()}, cand.params)
        try:
            ws = eval_expr(cand.workspace, env)
            if ws < 0:
                return f"workspace = {ws} < 0 for workload {w.uuid[:8]} {w.axes}"
            for i, launch in enumerate(cand.launches):
                if launch.when and not eval_expr(launch.when, env):
                    continue  # another variant's launch: not made at these sizes
                grid = [eval_expr(e, env) for e in launch.grid]
                block = [eval_expr(e, env) for e in launch.block]
                smem = eval_expr(launch.smem, env)
                if any(int(g) < 1 for g in grid) and all(int(g) >= 0 for g in grid):
                    continue  # an empty grid is legal (nothing to do for this workload)
                if any(int(g) < 0 for g in grid):
                    return f"launches[{i}].grid = {grid} is negative for workload {w.axes}"
                threads = 1
                for b in block:
                    threads *= int(b)
                if threads < 1 or threads > MAX_THREADS:
                    return (f"launches[{i}].block = {block} gives {threads} threads (1..{MAX_THREADS}) "
                            f"for workload {w.axes}")
                if int(smem) > MAX_SMEM or int(smem) < 0:
                    return f"launches[{i}].smem = {smem} bytes is outside 0..{MAX_SMEM}"
                for arg in map(parse_arg, launch.args):
                    # a scalar's expression; a tensor map's box sizes ("ROWS,COLS")
                    for e in arg.expr.split(",") if arg.kind == "tmap" else [arg.expr] if arg.expr else []:
                        eval_expr(e, env)
        except (ValueError, ArithmeticError, KeyError, TypeError) as e:
            return f"launch expression fails on workload {w.uuid[:8]} {w.axes}: {e}"
    return None


class Lab:
    """compile / evaluate / roofline for the agents, on this machine."""

    def __init__(self, arch: Optional[str] = None, gpu_profile: Optional[str] = None,
                 has_gpu: Optional[bool] = None, evaluator: Optional[Callable] = None,
                 use_cache: bool = True, store=None, eval_settings: Optional[dict] = None):
        from .. import settings

        cfg = settings.get()
        self.arch = arch or cfg.arch
        self.gpu_profile = gpu_profile or cfg.gpu_profile
        self.has_gpu = gpu_available() if has_gpu is None else has_gpu
        self._evaluator = evaluator  # a stand-in: (problem, cand, compile_result) -> Outcome
        self.use_cache = use_cache
        self.store = store  # roofline and baselines are read from it when it has them
        self.eval_settings = dict(eval_settings or {})  # EvalConfig overrides (reps, budgets)
        self.baseline_reps = 20
        self.eval_timeout_s: Optional[float] = None  # per candidate; None: settings.eval_timeout_s
        self.eval_timeout_overrides: list = []  # [(problem pattern, seconds)], first match wins
        self.screen_workloads = 0  # workloads a candidate screens on before the rest (0: all at once)
        self.last_hardware_id: Optional[str] = None  # what this run's evaluations report (screening)
        self.refcaches = None  # solforge.orchestrate.refcache.RefCaches, when references are cached
        self._sols: dict[str, list[WorkloadSol]] = {}

    # ---- compile -------------------------------------------------------------------------------
    def compile(self, cand: Candidate):
        """(Outcome, CompileResult or None)."""
        from ..compile import compile_candidate

        t0 = time.perf_counter()
        try:
            res = compile_candidate(cand, self.arch, use_cache=self.use_cache)
        except Exception as e:  # noqa: BLE001 - a compiler crash is this attempt's failure
            return Outcome(AttemptOutcome.COMPILE_ERROR, f"compiler failed: {e}", compile_log=str(e),
                           compile_seconds=time.perf_counter() - t0), None
        status = getattr(res.status, "value", str(res.status))
        if status == "ok":
            return Outcome(AttemptOutcome.COMPILED, "compiled", compile_log=res.log,
                           compile_seconds=res.seconds, cubin_hash=res.cubin_hash), res
        st = AttemptOutcome.TIMEOUT if status == "timeout" else AttemptOutcome.COMPILE_ERROR
        first = next((ln for ln in res.log.splitlines() if "error" in ln), res.log[:200])
        return Outcome(st, f"compile {status}: {first.strip()}", compile_log=res.log,
                       compile_seconds=res.seconds), res

    # ---- the whole path ------------------------------------------------------------------------
    def check(self, problem, cand: Candidate) -> Optional[Outcome]:
        why = static_check(problem, cand)
        if why:
            return Outcome(AttemptOutcome.INVALID, why, compile_log=why)
        return None

    def eval_job(self, problem) -> dict:
        """job.json for a candidate of this problem (solforge.evaluate.job, the one builder): this
        lab's evaluation overrides, and T_sol from its roofline for the driver's SOL floor guard."""
        from .. import settings
        from ..evaluate.job import build_job

        cfg = settings.get()
        return build_job(problem, cfg, overrides=self.eval_settings, shared_dir=cfg.shared_dir,
                         t_sol_ms={s.uuid: s.t_sol_ms for s in self.roofline(problem)})

    @property
    def stand_in(self) -> Optional[Callable]:
        """The injected evaluator, (problem, cand, compile_result) -> Outcome, that answers in place of
        the GPU (a lab built with `evaluator=`, e.g. in tests on a machine without one), or None:
        evaluate for real (solforge.orchestrate.evaluation)."""
        return self._evaluator

    # ---- roofline ------------------------------------------------------------------------------
    def roofline(self, problem) -> list[WorkloadSol]:
        if problem.name not in self._sols:
            from .roofline_adapter import workload_sols

            self._sols[problem.name] = workload_sols(problem, self.gpu_profile, self.store)
        return self._sols[problem.name]

    def set_baselines(self, problem, t_base_ms: dict[str, float]) -> None:
        """Measured baseline times (uuid -> ms), e.g. from the store's baselines table."""
        for s in self.roofline(problem):
            if s.uuid in t_base_ms:
                s.t_base_ms = t_base_ms[s.uuid]

    def gpu_info(self) -> GpuInfo:
        try:
            from ..roofline.hardware import load_profile

            p = load_profile(self.gpu_profile)
            peaks = {u: r.flops_per_s for u, r in p.compute.items()}
            return GpuInfo(p.display_name, p.arch, p.dram.bytes_per_s, peaks, p.sm_count, p.l2_bytes)
        except Exception as e:  # noqa: BLE001 - a prompt without ceilings is still a prompt
            log.warning("GPU profile %s unavailable: %s", self.gpu_profile, e)
            return GpuInfo(self.gpu_profile, self.arch)

    def score(self, problem, workloads: list[WorkloadOutcome]) -> None:
        """Fill t_sol/t_base/sol_score/speedup of each timed workload from the roofline."""
        sols = {s.uuid: s for s in self.roofline(problem)}
        for w in workloads:
            s = sols.get(w.uuid)
            if s is None or w.median_ms is None:
                continue
            w.t_sol_ms = w.t_sol_ms if w.t_sol_ms is not None else s.t_sol_ms
            if w.t_base_ms is None:
                w.t_base_ms, w.t_base_variant = s.t_base_ms, s.t_base_variant
            if w.sol_score is None and w.correct:
                w.sol_score = _score(w.median_ms, w.t_sol_ms, w.t_base_ms)
            if w.speedup is None and w.t_base_ms and w.median_ms:
                w.speedup = w.t_base_ms / w.median_ms


def _score(t_k, t_sol, t_b):
    return sol_score(t_k, t_b, t_sol)  # the project's one definition (solforge.roofline.score)
