"""Score attempts again once baselines arrive later than their evaluation.

The loop scores an attempt with the T_b it knows at the time. Baselines are often measured in another
run (scripts/run_baselines.py, a second GPU), so attempts evaluated before them keep per-workload kernel
times but no speedup or SOL score. This fills those from the store: T_b = the faster of the latest
passed eager and torch.compile baselines, T_sol from the score row; then the attempt's problem-level
SOL score (geomean, only when every workload has one).
"""

from __future__ import annotations

from ..roofline.score import problem_sol_score, sol_score, speedup

_TIMED = """
SELECT s.attempt_id, s.workload_uuid, s.t_kernel_ms, s.t_sol_ms, s.t_baseline_ms, s.baseline_variant,
       a.problem
FROM scores s JOIN attempts a ON a.id = s.attempt_id
WHERE s.t_kernel_ms IS NOT NULL
"""
_MISSING = _TIMED + "AND s.sol_score IS NULL\n"

_BASELINES = """
SELECT problem, workload_uuid, min(median_ms) AS t_b, arg_min(variant, median_ms) AS variant FROM (
  SELECT problem, workload_uuid, variant, median_ms FROM baselines
  WHERE median_ms IS NOT NULL AND coalesce(status, 'passed') = 'passed'
  QUALIFY row_number() OVER (PARTITION BY problem, workload_uuid, variant ORDER BY created_at DESC) = 1)
GROUP BY problem, workload_uuid
"""


def rescore(store, refresh: bool = False) -> dict:
    """Fill missing speedups and SOL scores; with refresh, also redo every score whose T_b changed
    (e.g. torch.compile baselines measured after the run made T_b faster). Returns counts."""
    missing = store.query(_TIMED if refresh else _MISSING)
    if not missing:
        return {"workloads": 0, "attempts": 0}
    t_b = {(r["problem"], r["workload_uuid"]): r for r in store.query(_BASELINES)}
    filled, touched = 0, set()
    with store.transaction() as con:
        for r in missing:
            b = t_b.get((r["problem"], r["workload_uuid"]))
            if b is None or (r["t_baseline_ms"] is not None and b["t_b"] == r["t_baseline_ms"]
                             and b["variant"] == r["baseline_variant"]):
                continue  # unchanged (a row the loop once labelled 'eager' for a compile T_b is fixed)
            s = sol_score(r["t_kernel_ms"], b["t_b"], r["t_sol_ms"])
            con.execute("UPDATE scores SET t_baseline_ms = ?, speedup = ?, sol_score = ?, "
                        "baseline_variant = ? WHERE attempt_id = ? AND workload_uuid = ?",
                        [b["t_b"], speedup(b["t_b"], r["t_kernel_ms"]), s, b["variant"],
                         r["attempt_id"], r["workload_uuid"]])
            filled += 1
            touched.add(r["attempt_id"])
        for aid in touched:
            per = [x[0] for x in con.execute("SELECT sol_score FROM scores WHERE attempt_id = ?",
                                             [aid]).fetchall()]
            con.execute("UPDATE attempts SET sol_score = ? WHERE id = ? AND outcome = 'ok'",
                        [problem_sol_score(per), aid])
    return {"workloads": filled, "attempts": len(touched)}
