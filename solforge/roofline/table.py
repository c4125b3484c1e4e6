"""From counts to roofline rows: pricing on a profile, store rows, CSV, and problems from the store."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Optional

from ..problem.loader import Problem
from .batch import ProblemCount
from .estimate import Roofline, roofline
from .hardware import HardwareProfile
from .score import geomean

CSV_COLUMNS = ["problem", "subset", "workload_index", "workload_uuid", "gpu", "status", "method",
               "t_sol_ms", "t_compute_ms", "t_memory_ms", "latency_ms", "limiter", "total_flops",
               "dram_bytes", "flops_by_unit", "nvidia_sol_ms", "ratio_to_nvidia", "reason"]


def price(pc: ProblemCount, profile: HardwareProfile, measured: bool = False) -> list[Roofline]:
    return [roofline(pc.name, c, profile, measured) for c in pc.counts]


def rows_for_csv(pc: ProblemCount, rls: list[Roofline]) -> list[dict]:
    out = []
    for c, r in zip(pc.counts, rls):
        pub = pc.published[c.index] if c.index < len(pc.published) else {}
        nv = pub.get("sol_ms") if r.gpu == "b200" else None
        out.append({
            "problem": pc.name, "subset": pc.subset or "", "workload_index": c.index,
            "workload_uuid": c.uuid, "gpu": r.gpu, "status": r.status, "method": c.method,
            "t_sol_ms": r.t_sol_ms, "t_compute_ms": r.t_compute_ms, "t_memory_ms": r.t_memory_ms,
            "latency_ms": r.latency_ms, "limiter": r.limiter, "total_flops": r.total_flops,
            "dram_bytes": r.dram_bytes,
            "flops_by_unit": ";".join(f"{u}={f:.4g}" for u, f in sorted(c.flops.items())),
            "nvidia_sol_ms": nv,
            "ratio_to_nvidia": (r.t_sol_ms / nv) if (nv and r.t_sol_ms) else None,
            "reason": r.reason or (c.reason if c.method == "analytic" else ""),
        })
    return out


def write_csv(path: Path, rows: Iterable[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_COLUMNS})


def store_rows(pc: ProblemCount, rls: list[Roofline]) -> list[dict]:
    """Rows for the store's `roofline` table (solforge/store/SCHEMA.md), keyed
    (problem, workload_uuid, gpu_profile)."""
    rows = []
    for c, r in zip(pc.counts, rls):
        rows.append({
            "problem": pc.name, "workload_uuid": c.uuid, "gpu_profile": r.gpu,
            "flops": r.total_flops, "bytes": r.dram_bytes, "t_sol_ms": r.t_sol_ms,
            "limiter": r.limiter or None,
            "details": {"status": r.status, "method": c.method, "reason": r.reason or c.reason,
                        "flops_by_unit": c.flops, "t_compute_ms": r.t_compute_ms,
                        "t_memory_ms": r.t_memory_ms, "latency_ms": r.latency_ms,
                        "input_bytes": c.input_bytes, "output_bytes": c.output_bytes,
                        "input_bytes_declared": c.input_bytes_declared,
                        "content_hash": pc.content_hash, "workload_index": c.index},
        })
    return rows


def problem_t_sol(rls: list[Roofline]) -> Optional[float]:
    vals = [r.t_sol_ms for r in rls]
    if not vals or any(v is None for v in vals):
        return None
    return geomean(vals)


def problems_from_store(store, names: Optional[list[str]] = None) -> list[Problem]:
    """Problems as ingested (definition and workloads from the store, published numbers included),
    by name."""
    from ..store.problems import load_problems, problem_index

    return load_problems(store, sorted(names) if names else sorted(n for n, _ in problem_index(store)))
