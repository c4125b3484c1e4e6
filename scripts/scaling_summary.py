#!/usr/bin/env python3
"""Two GPUs vs one, from the DuckDB files of scripts/scaling_run_h200x2.sh (committed under
data/results/db/): evaluations per minute of each optimize run and their ratio, plus the per-GPU busy
share the two-GPU run reported (report.gpu_use: slot occupancy while work remained).

    .venv/bin/python scripts/scaling_summary.py [--one DB] [--two DB] [--report JSON] [--out JSON]

Evaluations per minute = attempts that reached the GPU (gpu_seconds recorded) / (last one's end -
first one's start) * 60, computed the same way for both runs from the attempts table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
RES = REPO / "data" / "results"


# an evaluation of an optimize run: an attempt that reached the GPU, not a replay of one
EVALUATED = "gpu_seconds IS NOT NULL AND coalesce(agent, '') <> 'replay'"


def connect(db: Path):
    """Read-only DuckDB connection; a committed `.duckdb.gz` is unpacked to a temporary file first."""
    import duckdb

    if db.suffix == ".gz":
        import gzip
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp()) / db.stem
        with gzip.open(db, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        db = tmp
    return duckdb.connect(str(db), read_only=True)


def rate(db: Path) -> dict:
    con = connect(db)
    n, t0, t1, med = con.execute(
        "SELECT count(*), min(created_at), max(updated_at), median(gpu_seconds) FROM attempts "
        f"WHERE {EVALUATED}").fetchone()
    span = (t1 - t0).total_seconds()
    return {"db": str(db.relative_to(REPO)) if db.is_relative_to(REPO) else str(db), "evaluations": n,
            "span_s": round(span, 1), "evaluations_per_minute": round(n / span * 60, 3),
            "median_gpu_seconds_per_evaluation": round(med, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=Path, default=RES / "db" / "optimize_h200_1gpu.duckdb")
    ap.add_argument("--two", type=Path, default=RES / "db" / "optimize_h200x2.duckdb")
    ap.add_argument("--report", type=Path, default=RES / "optimize_h200x2_report.json",
                    help="the 2-GPU run's JSON report (solforge optimize --json)")
    ap.add_argument("--report-one", type=Path, default=None, help="the 1-GPU run's JSON report")
    ap.add_argument("--notes", default=None, help="how the runs were made (default: the 16:00 run's notes)")
    ap.add_argument("--out", type=Path, default=RES / "two_gpu_optimize_h200x2.json")
    a = ap.parse_args(argv)
    one, two = rate(a.one), rate(a.two)
    rep, rep1 = _report(a.report), _report(a.report_one)
    out = {"command": "bash scripts/scaling_run_h200x2.sh (device kind nvidia-h200-x2; prepared by "
                      "scripts/prepare_scaling_run.py)",
           "one_gpu": one, "two_gpus": two,
           "ratio_evaluations_per_minute": round(two["evaluations_per_minute"] /
                                                 one["evaluations_per_minute"], 3),
           "two_gpu_busy_while_work_remained": rep.get("gpu_use", {}).get("busy_while_work"),
           "two_gpu_pool_report": rep.get("gpu_use"),
           "one_gpu_pool_report": rep1.get("gpu_use"),
           "stop_reasons": {"one": rep1.get("stop_reason"), "two": rep.get("stop_reason")},
           "notes": a.notes if a.notes is not None else
           "Same 28 problems, offline worker, fresh DuckDB and job for each run. During the "
           "1-GPU run the other GPU ran baselines with 12 torch.compile workers on the shared "
           "CPUs. The 1-GPU run hit its timeout before writing its JSON report, so both rates "
           "come from the attempts tables."}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


def _report(path) -> dict:
    """A run's JSON report, or {} when it is missing or empty (a run killed by its timeout)."""
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    raise SystemExit(main())
