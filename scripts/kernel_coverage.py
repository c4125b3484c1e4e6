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
  reasons   (CPU)  why the generic families (pointwise, pointwise_rows) refuse each problem: the trace's
                   reason string, tallied, with each problem's T_b / T_mem (T_b from the baselines
                   CSV, T_mem = declared input + output bytes at 4.27 TB/s: the room a fused kernel has)
                   and the families that serve it today.
  open      (CPU)  after a GPU check of a per-problem gated family (family.json `offered_problems`):
                   list each problem whose every variant (>= 2) was correct on every workload.

    .venv/bin/python scripts/kernel_coverage.py reasons > data/results/kernel_coverage_reasons.txt
    .venv/bin/python scripts/kernel_coverage.py open --family pointwise_rows --rows FILES_AT/k7pw/rows.jsonl
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


def _headroom(problem, tb: dict) -> tuple[float, int]:
    """Geomean over the workloads with a T_b of T_b / T_mem, and how many there were."""
    from solforge.roofline.estimate import declared_bytes

    ratios = []
    for wl in problem.workloads:
        if wl.uuid in tb:
            i, o = declared_bytes(wl)
            ratios.append(tb[wl.uuid] / max((i + o) / 4.27e12 * 1e3, 1e-9))
    return _geo(ratios), len(ratios)


def cmd_reasons(args) -> None:
    import re
    from collections import Counter

    from solforge.kernels import families_for
    from solforge.kernels import pointwise_rows_trace as rt
    from solforge.kernels import pointwise_trace as pt
    from solforge.problem.loader import load_problem_dir

    tb = {}
    with open(args.baselines) as f:
        for r in csv.DictReader(f):
            if r.get("T_b_ms"):
                tb[r["workload_uuid"]] = float(r["T_b_ms"])
    tally: Counter = Counter()
    lines = []
    for pdir in sorted((Path(args.shared) / "sol_execbench").glob("*/*")):
        problem = load_problem_dir(pdir)
        d = problem.definition
        why = "pointwise" if pt.trace_pointwise(d) else "pointwise_rows" if rt.trace_rows(d) else \
            f"{pt.last_reason} | rows: {rt.last_reason}"
        key = re.sub(r"\d+", "N", re.sub(r"(input|output) \w+", r"\1 X", pt.last_reason if why not in
                                          ("pointwise", "pointwise_rows") else "traced: " + why))[:90]
        tally[key] += 1
        head, n = _headroom(problem, tb)
        served = ",".join(f.name for f in families_for(problem)) or "-"
        lines.append((head if head == head else -1, f"{pdir.parent.name}/{pdir.name}"[:62], served, why))
    print("# scripts/kernel_coverage.py reasons: pointwise's trace reason per problem (then pointwise_rows')")
    print("# head = geomean over workloads of T_b / T_mem (T_mem: declared bytes at 4.27 TB/s)")
    for key, cnt in tally.most_common():
        print(f"{cnt:4d}  {key}")
    print()
    for head, name, served, why in sorted(lines, reverse=True):
        print(f"{name:62s} head={head:8.1f} served={served:24s} {why[:160]}")


def cmd_open(args) -> None:
    """Per problem in the rows: every variant (>= 2) correct on every workload -> offered_problems."""
    sys.path.insert(0, str(REPO / "scripts"))
    from import_kernel_check import _problem, evidence

    rows = [json.loads(l) for l in Path(args.rows).read_text().splitlines() if l.strip()]
    rows = [r for r in rows if r.get("family") == args.family]
    fam_json = REPO / "kernels_cuda" / args.family / "family.json"
    data = json.loads(fam_json.read_text())
    listed = data.setdefault("offered_problems", [])
    for name in sorted({r["problem"] for r in rows}):
        why = evidence(rows, _problem(name))
        print(f"{name}: {'NOT opened: ' + why if why else 'every variant correct on every workload -> offered_problems'}")
        if not why and name not in listed:
            listed.append(name)
    if listed and not args.dry_run:
        data["offered"] = True
        fam_json.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{fam_json.relative_to(REPO)}: offered true, offered_problems {listed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("coverage")
    c.add_argument("--shared", default=str(REPO.parent / "shared"))
    m = sub.add_parser("compare")
    m.add_argument("--rows", required=True)
    m.add_argument("--baselines", default=str(REPO / "data" / "results" / "baselines_h200.csv"))
    m.add_argument("--out", default="")
    r = sub.add_parser("reasons")
    r.add_argument("--shared", default=str(REPO.parent / "shared"))
    r.add_argument("--baselines", default=str(REPO / "data" / "results" / "baselines_h200.csv"))
    o = sub.add_parser("open")
    o.add_argument("--family", required=True)
    o.add_argument("--rows", required=True)
    o.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    {"coverage": cmd_coverage, "compare": cmd_compare, "reasons": cmd_reasons, "open": cmd_open}[args.cmd](args)


if __name__ == "__main__":
    main()
