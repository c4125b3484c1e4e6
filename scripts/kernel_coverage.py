#!/usr/bin/env python3
"""Which shared problems a kernel family serves, and how the GPU-checked families did against T_b.

  coverage  (CPU)  for every problem under <shared>/sol_execbench: the families that match it
                   (all, offered or not) and what `families_for` offers the search; --before
                   <git rev> lists what that revision's registry offered (run from a worktree).
  compare   (CPU)  rows.jsonl from `scripts/bench_kernels.py run` against the measured baselines
                   (data/results/baselines_h200.csv: T_b = the faster of eager and torch.compile,
                   CUPTI timing): per problem and variant, correct workloads and the geomean of
                   T_b / T_kernel and of eager-in-the-same-run / T_kernel.

    .venv/bin/python scripts/kernel_coverage.py coverage > data/results/kernel_coverage.txt
    .venv/bin/python scripts/kernel_coverage.py compare --rows data/results/kernels_coverage_h200_rows.jsonl
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def cmd_coverage(args) -> None:
    from solforge.kernels import all_families, families_for
    from solforge.problem.loader import load_problem_dir

    served = 0
    for pdir in sorted((Path(args.shared) / "sol_execbench").glob("*/*")):
        problem = load_problem_dir(pdir)
        matching = [f.name for f in all_families() if f.matches(problem)]
        offered = [f.name for f in families_for(problem)]
        if matching:
            served += bool(offered)
            print(f"{pdir.parent.name}/{pdir.name:70s} offered={','.join(offered) or '-':28s} "
                  f"matching={','.join(matching)}")
    print(f"# {served} shared problems with an offered family")


def _geo(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def cmd_compare(args) -> None:
    base = {}
    with open(args.baselines) as f:
        for r in csv.DictReader(f):
            if r.get("T_b_ms"):
                base[r["workload_uuid"]] = (float(r["T_b_ms"]), r["T_b_variant"])
    rows = [json.loads(l) for l in Path(args.rows).read_text().splitlines() if l.strip()]
    by = defaultdict(list)
    for r in rows:
        by[(r["problem"], r["family"], r["variant"], json.dumps(r["params"], sort_keys=True))].append(r)
    out = [f"# {args.rows} vs {args.baselines}",
           "# T_b: the baseline file's faster of eager and torch.compile (CUPTI); eager_run: the "
           "reference timed in the same run as the kernel (CUDA events, L2 flushed)",
           f"{'problem':52s} {'family':16s} {'params':42s} {'ok':>5s} {'x T_b':>7s} {'min':>6s} "
           f"{'x eager_run':>11s} {'T_b from':>12s}"]
    best: dict = {}
    for (prob, fam, vid, params), rs in sorted(by.items()):
        ok = [r for r in rs if r.get("ok") and r.get("t_kernel_ms")]
        vs_tb = [base[r["uuid"]][0] / r["t_kernel_ms"] for r in ok if r["uuid"] in base]
        vs_eager = [r["t_eager_ms"] / r["t_kernel_ms"] for r in ok]
        kinds = sorted({base[r["uuid"]][1] for r in ok if r["uuid"] in base})
        g = _geo(vs_tb)
        out.append(f"{prob[:52]:52s} {fam:16s} {params[:42]:42s} {len(ok):2d}/{len(rs):<2d} {g:7.2f} "
                   f"{min(vs_tb, default=float('nan')):6.2f} {_geo(vs_eager):11.2f} "
                   f"{'+'.join(kinds) or '-':>12s}")
        if len(ok) == len(rs) and vs_tb and (prob not in best or g > best[prob][0]):
            best[prob] = (g, fam, len(vs_tb))
    out.append("")
    out.append("# best all-correct variant per problem, geomean speedup over T_b (workloads with a T_b)")
    for prob, (g, fam, n) in sorted(best.items()):
        out.append(f"{prob:52s} {fam:16s} {g:7.2f}x over {n} workloads")
    if best:
        out.append(f"# geomean over {len(best)} problems: {_geo([b[0] for b in best.values()]):.2f}x")
    text = "\n".join(out) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("coverage")
    c.add_argument("--shared", default=str(REPO.parent / "shared"))
    m = sub.add_parser("compare")
    m.add_argument("--rows", required=True)
    m.add_argument("--baselines", default=str(REPO / "data" / "results" / "baselines_h200.csv"))
    m.add_argument("--out", default="")
    args = ap.parse_args()
    {"coverage": cmd_coverage, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    main()
