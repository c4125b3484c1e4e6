"""solforge.evaluate's RunReport -> the agents' Outcome (per-workload results, scored)."""

from __future__ import annotations

import time

from .outcome import AttemptOutcome, Outcome, WorkloadOutcome


def evaluate_on_gpu(lab, problem, cand, compiled, env=None) -> Outcome:
    """Run the spawned-process evaluator (solforge.evaluate.runner) on this machine's GPU and score
    the result. The candidate runs in its own process and staging directory. `env` adds to the
    evaluator's environment (e.g. CUDA_VISIBLE_DEVICES to pin one GPU)."""
    import tempfile
    from pathlib import Path

    from .. import settings
    from ..evaluate import runner

    cfg = settings.get()
    sols = lab.roofline(problem)
    job = {"problem": problem.name,
           "settings": {"correctness_rounds": cfg.correctness_rounds, "rep_count": cfg.rep_count,
                        "warmup_ms": cfg.warmup_ms, "sol_floor_fraction": cfg.sol_floor_fraction,
                        **lab.eval_settings},
           # the SOL floor guard rejects a time below a fraction of T_sol (a wrong kernel, not a fast one)
           "t_sol_ms": {s.uuid: s.t_sol_ms for s in sols if s.t_sol_ms is not None},
           "candidate_kind": "cuda"}  # CuTe kernels are cubins too: same launcher
    blob_root = getattr(problem, "source", None)
    if blob_root and Path(blob_root).is_dir():
        job["blob_roots"] = [str(Path(blob_root).resolve())]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="solforge-eval-") as tmp:
        try:
            stage = runner.stage_candidate(Path(tmp) / "stage", problem, candidate=cand,
                                           compile_result=compiled, job=job)
            timeout = lab.eval_timeout_s or cfg.eval_timeout_s
            # a hung workload is killed early; the whole candidate never exceeds `timeout`
            report = runner.run_stage(stage, timeout_s=timeout, env=env,
                                      workload_timeout_s=max(10.0, min(60.0, timeout / 2)))
        except Exception as e:  # noqa: BLE001 - the evaluator failing is this attempt's failure
            wall = time.perf_counter() - t0
            return Outcome(AttemptOutcome.RUNTIME_ERROR, f"evaluator failed: {type(e).__name__}: {e}",
                           eval_seconds=wall, gpu_seconds=wall)
    out = outcome_of_report(report)
    out.eval_seconds = time.perf_counter() - t0
    out.gpu_seconds = float(getattr(report, "wall_s", 0.0) or out.eval_seconds)
    hw = getattr(getattr(report, "hardware", None), "hardware_id", None)
    out.eval_rows = [r.to_row(hardware_id=hw) for r in report.results if hasattr(r, "to_row")]
    lab.score(problem, out.workloads)
    return out


def outcome_of_report(report) -> Outcome:
    wls = []
    for r in report.results:
        st = getattr(r.status, "value", str(r.status))
        wls.append(WorkloadOutcome(
            uuid=r.workload_uuid, status=st, correct=bool(r.correct), max_abs_err=r.max_abs_err,
            max_rel_err=r.max_rel_err, matched_ratio=r.matched_ratio,
            median_ms=r.median_ms if st == "passed" else None, error=r.message or ""))
    statuses = {w.status for w in wls}
    if wls and statuses == {"passed"}:
        status, msg = AttemptOutcome.OK, "correct on every workload"
    elif "timeout" in statuses or getattr(report, "killed", False):
        status, msg = AttemptOutcome.TIMEOUT, "timed out"
    elif statuses & {"runtime_error", "oom", "rejected"} or not wls:
        status = AttemptOutcome.RUNTIME_ERROR
        first = next((w for w in wls if w.status in ("runtime_error", "oom", "rejected")), None)
        msg = (f"{first.status} on {first.uuid[:8]}: {first.error[:300]}" if first else
               f"no results (exit code {getattr(report, 'exit_code', None)}): "
               f"{getattr(report, 'stderr_tail', '')[-300:]}")
    else:
        bad = [w for w in wls if w.status == "incorrect"]
        status = AttemptOutcome.INCORRECT
        msg = f"incorrect on {len(bad)}/{len(wls)} workloads" + (
            f"; first: {bad[0].uuid[:8]} max_abs_err={bad[0].max_abs_err} {bad[0].error[:200]}"
            if bad else "")
    from ..evaluate.phase_totals import flat_seconds

    return Outcome(status, msg, workloads=wls, eval_launch=getattr(report, "launch", "") or "",
                   eval_mode=getattr(report, "mode", "") or "",
                   eval_phases=flat_seconds(getattr(report, "phases", None)))
