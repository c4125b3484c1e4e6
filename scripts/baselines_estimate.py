#!/usr/bin/env python3
"""How long the baselines still missing from the CSV will take on the H200: per problem, the eager
kernel span of one call per missing workload, extrapolated from NVIDIA's B200 baseline latency times
the H200/B200 ratio that problem's measured rows show (the median over all problems, or over the
.item()-loop references, where a problem has none), and the count of missing torch.compile rows.

    .venv/bin/python scripts/baselines_estimate.py [--csv data/results/baselines_h200.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "sol_execbench")
    ap.add_argument("--csv", type=Path, default=REPO / "data/results/baselines_h200.csv")
    a = ap.parse_args(argv)
    rows = {(r["problem"], r["workload_uuid"]): r for r in csv.DictReader(open(a.csv))}
    ratios, miss_e, miss_c = defaultdict(list), defaultdict(list), defaultdict(int)
    loops = {}
    for d in sorted(a.dataset.glob("*/*")):
        b = json.loads((d / "b200_reference.json").read_text()).get("per_workload", [])
        uu = [json.loads(x)["uuid"] for x in (d / "workload.jsonl").read_text().splitlines() if x.strip()]
        ref = (d / "reference.py").read_text()
        loops[d.name] = ".item()" in ref and "for " in ref
        for i, u in enumerate(uu):
            lat = (b[i].get("baseline_latency_ms") if i < len(b) else None) or 0.0
            r = rows.get((d.name, u), {})
            if r.get("eager_ms") and lat:
                ratios[d.name].append(float(r["eager_ms"]) / lat)
            if not r.get("eager_ms"):
                miss_e[(d.parent.name, d.name)].append(lat)
            if not r.get("compile_ms"):
                miss_c[(d.parent.name, d.name)] += 1
    all_r = [x for v in ratios.values() for x in v]
    loop_r = [x for n, v in ratios.items() if loops[n] for x in v]
    med, med_loop = statistics.median(all_r), statistics.median(loop_r)
    print(f"H200 eager / B200 baseline latency: median {med:.1f} (all rows), {med_loop:.1f} "
          f"(.item() loops), {len(all_r)} rows")
    total = 0.0
    print("missing eager, per problem (one call per workload, H200 kernel span):")
    for (s, n), lats in sorted(miss_e.items(), key=lambda kv: -sum(kv[1])):
        r = statistics.median(ratios[n]) if ratios.get(n) else (med_loop if loops[n] else med)
        est = sum(lats) * r / 1e3
        total += est
        print(f"  {s}/{n[:60]:60s} {len(lats):3d} workloads, ratio {r:6.1f}"
              f"{'' if ratios.get(n) else ' (guess)'}: {est:6.1f} s")
    print(f"missing eager: {sum(len(v) for v in miss_e.values())} workloads in {len(miss_e)} problems, "
          f"~{total:.0f} s of kernel span per single-call sweep (wall ~2x for loop references)")
    print(f"missing torch.compile: {sum(miss_c.values())} workloads in {len(miss_c)} problems")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
