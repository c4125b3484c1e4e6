"""Evaluate one compiled candidate on one GPU slot: the spawned evaluator, pinned, then the Outcome.
The one evaluation path of the optimize loop and of replay: the job from Lab.eval_job (the one job
builder), staging, the slot, the runner, RunReport -> Outcome (agents.evaluate_adapter).

Split from scoring so an orchestrator can run (and retry) the GPU part on its own: `evaluate_pinned`
raises GpuLost when the GPU or the worker failed rather than the candidate (worth a retry), and
returns an unscored Outcome otherwise; `score` fills SOL scores and speedups from the roofline.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path

from ..agents.evaluate_adapter import outcome_of_report
from ..agents.outcome import Outcome
from .errors import GpuLost, gpu_lost
from .gpus import GpuPool

log = logging.getLogger(__name__)


def eval_timeout_for(lab, name: str):
    """The per-candidate limit for this problem: the first matching --eval-timeout-for pattern
    (lab.eval_timeout_overrides: [(pattern, seconds)]), else lab.eval_timeout_s (None: settings)."""
    from .refcache import matches

    for pat, secs in getattr(lab, "eval_timeout_overrides", None) or []:
        if matches([pat], name):
            return float(secs)
    return getattr(lab, "eval_timeout_s", None)


def evaluate_pinned(lab, problem, cand, compiled, pool: GpuPool, timeout_s: float | None = None,
                    hold=None) -> Outcome:
    """`hold(slot)`: an extra context manager held with the slot (e.g. a Prefect concurrency limit
    named after the GPU, so other processes and hosts sharing the server see it busy)."""
    from .. import settings
    from ..evaluate import runner

    label = f"{problem.name}:{cand.source_hash()[:8]}"
    if lab.stand_in is not None:  # answers in place of the GPU, on a slot like a real evaluation
        with pool.slot(label=label) as slot, (hold(slot) if hold else contextlib.nullcontext()):
            return lab.stand_in(problem, cand, compiled)
    timeout_s = timeout_s or eval_timeout_for(lab, problem.name) or settings.get().eval_timeout_s
    job = lab.eval_job(problem)
    caches = getattr(lab, "refcaches", None)
    if caches is not None:
        extra = caches.job_for(lab, problem, pool)  # fills once per problem and run (own GPU slot)
        if extra:
            job.update(extra)
    spent = {"wall": 0.0, "shared": 0.0}

    def run(uuids):
        """One evaluator process over these workloads (None: all) on a slot; again alone where it ran
        out of memory beside other lanes."""
        with pool.slot(label=label) as slot, (hold(slot) if hold else contextlib.nullcontext()):
            report, wall = _run(runner, stage, slot, timeout_s, pool.lanes, uuids)
        if pool.lanes > 1 and ran_out_of_memory(report) and not gpu_lost(report):
            # out of memory beside the other lanes' inputs, outputs and caches: not the candidate's
            # verdict until it has the GPU's memory to itself (the first try's time is reported)
            log.info("%s ran out of memory beside other lanes: evaluating it alone on GPU %s",
                     label, slot.gpu)
            spent["shared"] += wall
            with pool.alone(slot.gpu, label=label) as slot, \
                    (hold(slot) if hold else contextlib.nullcontext()):
                report, wall = _run(runner, stage, slot, timeout_s, 1, uuids)
        spent["wall"] += wall
        if gpu_lost(report):
            raise GpuLost(f"GPU {slot.gpu}: evaluator lost (exit {report.exit_code}): "
                          f"{(report.stderr_tail or '')[-300:]}")
        if report.hardware is not None:
            lab.last_hardware_id = report.hardware.hardware_id
        return report

    with tempfile.TemporaryDirectory(prefix="solforge-eval-") as tmp:
        stage = runner.stage_candidate(Path(tmp) / "stage", problem, candidate=cand,
                                       compile_result=compiled, job=job)
        k = getattr(lab, "screen_workloads", 0) or 0
        best = _best_times(lab, problem) if 0 < k < len(problem.workloads) else {}
        if best:
            from ..evaluate import screening

            report = screening.screen_then_full(
                run, [w.uuid for w in problem.workloads],
                screening.screen_workloads(problem.workloads, k),
                lambda first: screening.could_beat(first, best))
        else:
            report = run(None)
    out = outcome_of_report(report)
    out.eval_seconds = spent["wall"] + spent["shared"]
    out.gpu_seconds = (out.gpu_seconds or spent["wall"]) + spent["shared"]
    if spent["shared"]:
        out.eval_phases["shared_oom_retry"] = spent["shared"]
    return out


def _best_times(lab, problem) -> dict:
    """The best timed attempt's per-workload times on the GPU model this run's evaluations have
    reported (none before the first report: the first evaluation of a run is never screened)."""
    hw = getattr(lab, "last_hardware_id", None)
    if not hw or getattr(lab, "store", None) is None:
        return {}
    from ..store import attempt_queries

    return attempt_queries.best_times(lab.store, problem.name, hw)


def _run(runner, stage, slot, timeout_s: float, lanes: int, workloads=None):
    """One run of the staged evaluation on `slot` (these workload uuids; None: all): (RunReport,
    wall seconds)."""
    from .. import settings

    t0 = time.perf_counter()
    # the lanes of one GPU time one at a time (gpu_share): an evaluation may wait for every
    # other lane's timing; the limits count its own time (runner.OwnClock), so a kernel
    # that hangs is killed at its workload limit instead of holding every lane behind it
    report = runner.run_stage(stage, timeout_s=timeout_s, wall_cap_s=timeout_s * lanes,
                              workload_timeout_s=settings.get().workload_timeout_s or None,
                              env=slot.env, workloads=workloads)
    return report, time.perf_counter() - t0


def ran_out_of_memory(report) -> bool:
    """Some workload ended out of device memory (the evaluator's OOM verdict)."""
    return any(getattr(r.status, "value", str(r.status)) == "oom" for r in report.results)


def score(lab, problem, out: Outcome) -> Outcome:
    lab.score(problem, out.workloads)
    return out
