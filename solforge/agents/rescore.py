"""Score attempts again once baselines arrive later than their evaluation.

The loop scores an attempt with the T_b it knows at the time. Baselines are often measured in another
run (solforge/baselines/scheduler.py, a second GPU), so attempts evaluated before them keep per-workload kernel
times but no speedup or SOL score. This fills those from the store: T_b = the faster of the latest
passed eager and torch.compile baselines, T_sol from the score row; then the attempt's problem-level
SOL score (geomean, only when every workload has one).
"""

from __future__ import annotations

from ..roofline.score import problem_sol_score, sol_score, speedup

def rescore(store, refresh: bool = False) -> dict:
    """Fill missing speedups and SOL scores; with refresh, also redo every score whose T_b changed
    (e.g. torch.compile baselines measured after the run made T_b faster). Returns counts."""
    from ..store import attempt_queries as q

    missing = q.timed_scores(store, unscored_only=not refresh)
    if not missing:
        return {"workloads": 0, "attempts": 0}
    t_b = {(r["problem"], r["workload_uuid"]): r for r in q.fastest_baselines(store)}
    updates = []
    for r in missing:
        b = t_b.get((r["problem"], r["workload_uuid"]))
        if b is None or (r["t_baseline_ms"] is not None and b["t_b"] == r["t_baseline_ms"]
                         and b["variant"] == r["baseline_variant"]):
            continue  # unchanged (a row the loop once labelled 'eager' for a compile T_b is fixed)
        updates.append({"attempt_id": r["attempt_id"], "workload_uuid": r["workload_uuid"],
                        "t_baseline_ms": b["t_b"], "speedup": speedup(b["t_b"], r["t_kernel_ms"]),
                        "sol_score": sol_score(r["t_kernel_ms"], b["t_b"], r["t_sol_ms"]),
                        "baseline_variant": b["variant"]})
    touched = q.update_scores(store, updates, problem_sol_score) if updates else 0
    return {"workloads": len(updates), "attempts": touched}
