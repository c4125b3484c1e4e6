"""Before/after pairs of a bench_kernels --cupti run (issue #6, check k7ws): same params but one flag.

    .venv/bin/python scripts/k7_pairs.py RUN_DIR [--out data/results/kernels_k7ws_h200_pairs.txt]

RUN_DIR holds rows.jsonl from `scripts/bench_kernels.py run --cupti`. Two variants of a problem form
a pair when their params differ only in one flag: FIN (pointwise sums: 0 = memset + two kernels in a
graph, absent/1 = one kernel that keeps its workspace zeroed), FUSE (rmsnorm Q/K pairs, rope's two
outputs: 0 = two chained kernels, absent/1 = one launch) or WPRE (rmsnorm: 0 weight after the
reduction, 1 with x, 2 per call). For each pair: the per-workload ratio T_before / T_after (geomean,
min, max) and the smallest workload's times; for every variant its geomean vs T_b (min of eager and
torch.compile in data/results/baselines_h200.csv) over all workloads and over the quarter of
workloads with the smallest T_b.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAGS = {"FIN": 1, "FUSE": 1, "WPRE": None}  # flag -> its value when absent (None: always given)


def _gm(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _flag_diff(a: dict, b: dict):
    """The one flag in which params a and b differ (absent = its default), else None."""
    keys = set(a) | set(b)
    diff = [k for k in keys if a.get(k, FLAGS.get(k)) != b.get(k, FLAGS.get(k))]
    return diff[0] if len(diff) == 1 and diff[0] in FLAGS else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--baselines", default=str(REPO / "data/results/baselines_h200.csv"))
    ap.add_argument("--out", default=str(REPO / "data/results/kernels_k7ws_h200_pairs.txt"))
    args = ap.parse_args()
    rows = [json.loads(l) for l in (Path(args.run_dir) / "rows.jsonl").read_text().splitlines() if l.strip()]
    tb = {}
    with open(args.baselines) as f:
        for r in csv.DictReader(f):
            if r.get("T_b_ms"):
                tb[(r["problem"], r["workload_uuid"])] = float(r["T_b_ms"])
    by = defaultdict(lambda: defaultdict(dict))   # problem -> variant -> uuid -> row
    params = {}
    for r in rows:
        by[r["problem"]][r["variant"]][r["uuid"]] = r
        params[(r["problem"], r["variant"])] = r.get("params", {})
    lines = ["# T in us (CUPTI span per call); vsT_b = geomean T_b/T_k; small = the same over the "
             "quarter of workloads with the smallest T_b; pair ratio = T_before/T_after per workload"]
    for prob, variants in sorted(by.items()):
        lines.append(f"\n{prob}")
        uu = sorted({u for v in variants.values() for u in v}, key=lambda u: tb.get((prob, u), 0))
        small = set(uu[:max(1, len(uu) // 4)])
        for vid, rs in sorted(variants.items()):
            ok = [r for r in rs.values() if r.get("ok")]
            sp = [tb[(prob, r["uuid"])] / r["t_kernel_ms"] for r in ok if (prob, r["uuid"]) in tb]
            sm = [tb[(prob, r["uuid"])] / r["t_kernel_ms"] for r in ok
                  if (prob, r["uuid"]) in tb and r["uuid"] in small]
            bad = [r.get("reason", "")[:80] for r in rs.values() if not r.get("ok")]
            lines.append(f"  {vid:14s} {json.dumps(params[(prob, vid)], separators=(',', ':')):58s} "
                         f"ok {len(ok):2d}/{len(rs):<2d} vsT_b {_gm(sp):6.3f} small {_gm(sm):6.3f}"
                         + (f"  FAIL: {bad[0]}" if bad else ""))
        vids = sorted(variants)
        for i, a in enumerate(vids):
            for b in vids[i + 1:]:
                pa, pb = params[(prob, a)], params[(prob, b)]
                flag = _flag_diff(pa, pb)
                if flag is None:
                    continue
                if flag != "WPRE" and pa.get(flag, FLAGS[flag]) != 0:
                    a, b, pa, pb = b, a, pb, pa          # before = the flag at 0
                common = [u for u in uu if variants[a].get(u, {}).get("ok") and variants[b].get(u, {}).get("ok")]
                if not common:
                    continue
                ratio = [variants[a][u]["t_kernel_ms"] / variants[b][u]["t_kernel_ms"] for u in common]
                u0 = common[0]
                ta, tb_ = variants[a][u0]["t_kernel_ms"] * 1e3, variants[b][u0]["t_kernel_ms"] * 1e3
                lines.append(f"  pair {flag} {pa.get(flag, FLAGS[flag])} -> {pb.get(flag, FLAGS[flag])} "
                             f"({a} -> {b}): T ratio geomean {_gm(ratio):.3f} (min {min(ratio):.3f}, "
                             f"max {max(ratio):.3f}) over {len(common)} workloads; smallest workload "
                             f"{ta:.2f} -> {tb_:.2f} us (T_b {tb.get((prob, u0), float('nan')) * 1e3:.2f})")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
