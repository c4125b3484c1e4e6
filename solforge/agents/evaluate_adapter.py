"""solforge.evaluate's RunReport -> the agents' Outcome: the one conversion of what the driver reported
into what the loop, the planner, the model and the store see (per-workload verdicts, the evaluator's own
eval_results rows, the hardware row, how the evaluation spent its time). Scoring is a separate step
(Lab.score, from the roofline the job was built from)."""

from __future__ import annotations

from ..evaluate.screening import SCREENED_OUT
from .outcome import AttemptOutcome, Outcome, WorkloadOutcome


def outcome_of_report(report) -> Outcome:
    wls = []
    for r in report.results:
        st = getattr(r.status, "value", str(r.status))
        wls.append(WorkloadOutcome(
            uuid=r.workload_uuid, status=st, correct=bool(r.correct), max_abs_err=r.max_abs_err,
            max_rel_err=r.max_rel_err, matched_ratio=r.matched_ratio,
            median_ms=r.median_ms if st == "passed" else None, error=r.message or ""))
    statuses = {w.status for w in wls}
    # a screened-out report (evaluate/screening.py): the workloads it did not run say nothing
    ran = [w for w in wls if not (w.status == "skipped" and w.error == SCREENED_OUT)]
    if getattr(report, "mode", "full") == "screen" and ran and len(ran) < len(wls) and \
            all(w.status == "passed" for w in ran):
        status = AttemptOutcome.SCREENED
        msg = (f"screened out: correct on the {len(ran)} workloads it ran but not faster than the "
               f"best known there; the other {len(wls) - len(ran)} not run")
    elif wls and statuses == {"passed"}:
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
        skipped = [w for w in ran if w.status == "skipped"]
        status = AttemptOutcome.INCORRECT
        if bad:
            msg = (f"incorrect on {len(bad)}/{len(wls)} workloads; first: {bad[0].uuid[:8]} "
                   f"max_abs_err={bad[0].max_abs_err} {bad[0].error[:200]}")
        else:  # not correct on every workload, but none wrong: say why they did not run
            msg = (f"not evaluated on {len(skipped)}/{len(wls)} workloads"
                   + (f"; first: {skipped[0].uuid[:8]} {skipped[0].error[:200]}" if skipped else ""))
    from ..evaluate.phase_totals import flat_seconds

    hw = getattr(report, "hardware", None)
    hw_id = hw.hardware_id if hw is not None else None
    return Outcome(status, msg, workloads=wls, eval_launch=getattr(report, "launch", "") or "",
                   eval_mode=getattr(report, "mode", "") or "",
                   eval_phases=flat_seconds(getattr(report, "phases", None)),
                   eval_rows=[r.to_row(hardware_id=hw_id) for r in report.results
                              if hasattr(r, "to_row")],
                   hardware=hw.to_row() if hw is not None else None,
                   gpu_seconds=float(getattr(report, "wall_s", 0.0) or 0.0))
