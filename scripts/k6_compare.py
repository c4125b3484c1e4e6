"""Compare a bench_kernels run (--cupti) with the H200 baselines and the last optimize run (issue #6).

    .venv/bin/python scripts/k6_compare.py RUN_DIR [--out data/results/kernels_k6_h200.txt]

RUN_DIR holds rows.jsonl + env.json from `scripts/bench_kernels.py run --cupti`. For every problem
and variant (all workloads correct): geomean speedup against T_b = min(eager, torch.compile) from
data/results/baselines_h200.csv (CUPTI spans, the optimize run's baselines), geomean against the
best kernel time per workload in data/results/db/optimize_h200x2.duckdb (the run that this work
tries to beat), and the fraction of the measured copy bandwidth reached on the problem's large
workloads (the quarter with the most bytes). Bytes: every input and output once (the minimum).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _gm(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def baselines(path: Path) -> dict:
    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r.get("T_b_ms"):
                out[(r["problem"], r["workload_uuid"])] = float(r["T_b_ms"])
    return out


def optimize_best(db: Path) -> dict:
    """(problem, uuid) -> best T_k of a correct, scored attempt in the optimize run ({} when the
    database is not there)."""
    import duckdb
    if not db.exists():
        return {}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td) / "opt.duckdb"
        shutil.copy(db, tmp)
        con = duckdb.connect(str(tmp), read_only=True)
        rows = con.execute("SELECT a.problem, s.workload_uuid, min(s.t_kernel_ms) FROM scores s "
                           "JOIN attempts a ON a.id = s.attempt_id GROUP BY ALL").fetchall()
        con.close()
    return {(p, u): t for p, u, t in rows}


def workload_bytes(problem_dir: Path) -> dict:
    from solforge.problem.dtypes import itemsize
    from solforge.problem.loader import load_problem_dir
    p = load_problem_dir(problem_dir)
    d, out = p.definition, {}
    for rw in p.workloads:
        n = 0
        for k, spec in list(d.inputs.items()) + list(d.outputs.items()):
            shp = rw.input_shapes.get(k) if k in d.inputs else rw.output_shapes.get(k)
            if shp is not None:
                n += math.prod(shp) * itemsize(spec.dtype)
        out[rw.uuid] = n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--plan-dir", default=".carry/k6", help="the prepared dir (problem copies)")
    ap.add_argument("--baselines", default=str(REPO / "data/results/baselines_h200.csv"))
    ap.add_argument("--db", default=str(REPO / "data/results/db/optimize_h200x2.duckdb"))
    ap.add_argument("--out", default=str(REPO / "data/results/kernels_k6_h200.txt"))
    args = ap.parse_args()
    run = Path(args.run_dir)
    env = json.loads((run / "env.json").read_text())
    rows = [json.loads(l) for l in (run / "rows.jsonl").read_text().splitlines() if l.strip()]
    tb, old = baselines(Path(args.baselines)), optimize_best(Path(args.db))
    plan = json.loads((Path(args.plan_dir) / "plan.json").read_text())
    nbytes = {}
    for e in plan["problems"]:
        nbytes[e["problem"]] = workload_bytes(Path(args.plan_dir) / e["key"] / "problem")
    copy = env["copy_tb_s"]
    by = defaultdict(list)
    for r in rows:
        by[(r["problem"], r["variant"])].append(r)
    lines = [f"# bench_kernels run --cupti on {env.get('gpu')} (driver {env.get('driver')}), kernels at "
             f"commit {env.get('commit', '')[:12]}; timing: {env.get('timing', '?')}",
             f"# copy bandwidth {copy:.2f} TB/s. vs T_b: geomean of T_b/T_k, T_b = min(eager, compile) "
             "from baselines_h200.csv; vs opt: geomean of (best T_k of the optimize run)/T_k; "
             "copy%: bytes/T_k over the copy bandwidth, min..median over the quarter of workloads "
             "with the most bytes; small: geomean vs T_b over the quarter with the fewest bytes",
             f"{'problem':46s} {'variant':13s} {'params':42s} {'ok':>5s} {'vsT_b':>6s} {'vsOpt':>6s} "
             f"{'small':>6s} {'copy% large':>12s}"]
    best = {}
    for (prob, vid), rs in sorted(by.items()):
        ok = [r for r in rs if r.get("ok")]
        nb = nbytes.get(prob, {})
        sp = [tb[(prob, r["uuid"])] / r["t_kernel_ms"] for r in ok if (prob, r["uuid"]) in tb]
        vo = [old[(prob, r["uuid"])] / r["t_kernel_ms"] for r in ok if (prob, r["uuid"]) in old]
        ranked = sorted(ok, key=lambda r: nb.get(r["uuid"], 0))
        q = max(1, len(ranked) // 4)
        large = [nb[r["uuid"]] / (r["t_kernel_ms"] * 1e-3) / 1e12 / copy for r in ranked[-q:]
                 if r["uuid"] in nb]
        small = [tb[(prob, r["uuid"])] / r["t_kernel_ms"] for r in ranked[:q] if (prob, r["uuid"]) in tb]
        large.sort()
        cp = f"{100 * large[0]:.0f}..{100 * large[len(large) // 2]:.0f}" if large else "-"
        params = json.dumps(rs[0].get("params", {}), separators=(",", ":"))
        lines.append(f"{prob:46s} {vid:13s} {params[:42]:42s} {len(ok):2d}/{len(rs):<2d} {_gm(sp):6.3f} "
                     f"{_gm(vo):6.3f} {_gm(small):6.3f} {cp:>12s}")
        if len(ok) == len(rs) and sp and (prob not in best or _gm(sp) > best[prob][1]):
            best[prob] = (vid, _gm(sp))
    lines.append("")
    lines.append("best variant per problem (all workloads correct, geomean vs T_b): " +
                 ", ".join(f"{p[:3]} {v} {g:.3f}x" for p, (v, g) in sorted(best.items())))
    if best:
        lines.append(f"geomean over {len(best)} problems: {_gm([g for _, g in best.values()]):.3f}x")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
