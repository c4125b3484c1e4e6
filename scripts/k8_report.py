#!/usr/bin/env python3
"""k8 (issue #6 RMSNorm target): per problem and variant, the % of the measured copy bandwidth on every
large workload, side by side, and whether the family reaches >= 85% on all of them.

    python3 scripts/k8_report.py RUN_DIR [--plan-dir .carry/k8] [--out RUN_DIR/report.txt]

RUN_DIR: rows.jsonl + env.json from `bench_kernels.py run --cupti` (and probe.json from k8_probe.py,
optional). Bytes per workload: every input and output once, as solforge.roofline counts them for these
problems (no indexed gathers): scripts/k6_compare.workload_bytes. Large workloads: the quarter with the
most bytes (at least one), as in k6_compare. T_b: min(eager, torch.compile) from
data/results/baselines_h200.csv where it has the workload, else the run's own eager time.
Variant labels: c = rmsnorm_kernel (one block per ROWS rows), p = rmsnorm_persist (PERSIST=1); the
params follow. The stdout table is the short form; --out also gets every workload of every variant.
Runs on the GPU box (no duckdb, no pandas) and on the CPU afterwards.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

TARGET = 0.85
SHORT = {"VEC": "V", "TPR": "T", "ROWS": "R", "WPRE": "W", "PERSIST": "", "PF": "PF", "BPS": "B",
         "LPOL": "L", "SPOL": "S", "LDH": "H", "FUSE": "F"}


def _gm(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def label(params: dict) -> str:
    kind = "p" if params.get("PERSIST") else "c"
    parts = [f"{SHORT.get(k, k)}{v}" for k, v in params.items() if k != "PERSIST" and k in SHORT]
    return kind + " " + ",".join(parts)


def baselines(path: Path) -> dict:
    out = {}
    if path.exists():
        with open(path) as f:
            for r in csv.DictReader(f):
                if r.get("T_b_ms"):
                    out[(r["problem"], r["workload_uuid"])] = float(r["T_b_ms"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--plan-dir", default=".carry/k8")
    ap.add_argument("--baselines", default=str(REPO / "data/results/baselines_h200.csv"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", default="", help="comma-separated problem prefixes whose variant table "
                    "goes to stdout (default: all); the verdict lines always cover every problem")
    args = ap.parse_args()
    tables = [t for t in args.tables.split(",") if t]
    from k6_compare import workload_bytes

    run = Path(args.run_dir)
    env = json.loads((run / "env.json").read_text())
    copy = env["copy_tb_s"]
    rows = [json.loads(l) for l in (run / "rows.jsonl").read_text().splitlines() if l.strip()]
    probe = json.loads((run / "probe.json").read_text()) if (run / "probe.json").exists() else None
    copy_ms = {s["bytes"]: s["copy_ms"] for s in probe["sizes"]} if probe else {}
    tb_csv = baselines(Path(args.baselines))
    plan = json.loads((Path(args.plan_dir) / "plan.json").read_text())
    nbytes = {e["problem"]: workload_bytes(Path(args.plan_dir) / e["key"] / "problem") for e in plan["problems"]}

    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["problem"]][r["variant"]].append(r)
    short, full, verdict = [], [], []
    head = (f"# k8 on {env.get('gpu')} ({env.get('timing', '?')}), kernels at {env.get('commit', '')[:12]}; "
            f"copy bandwidth {copy:.2f} TB/s; cells: bytes/T_k as % of it on the large workloads (target "
            f">= {100 * TARGET:.0f}% on all); gmTb: geomean T_b/T_k over all workloads; small: the same over the "
            f"smallest quarter" + ("; xcopy: T_copy(same bytes)/T_k, min over the large ones" if copy_ms else ""))
    short.append(head)
    full.append(head)
    for prob in sorted(by):
        nb = nbytes.get(prob, {})
        variants = by[prob]
        any_rows = next(iter(variants.values()))
        uuids = sorted({r["uuid"] for r in any_rows}, key=lambda u: nb.get(u, 0))
        wl_of = {r["uuid"]: r["workload"] for r in any_rows}
        q = max(1, len(uuids) // 4)
        large, small = uuids[-q:], uuids[:q]
        cols = " ".join(f"wl{wl_of[u]}:{nb[u] / 1e6:.1f}MB" for u in large)
        short.append(f"\n## {prob}  large: {cols}")
        short.append(f"{'variant':8s} {'params':34s} {'ok':>5s} {'gmTb':>6s} {'small':>6s}  "
                     + " ".join(f"{'wl' + str(wl_of[u]):>6s}" for u in large) + "   min" + ("  xcopy" if copy_ms else ""))
        full.append(f"\n## {prob}: every workload, % of copy bandwidth (T_k us)")
        best = None
        for vid, rs in sorted(variants.items(), key=lambda kv: int(kv[0].split(":v")[-1])):
            rmap = {r["uuid"]: r for r in rs}
            ok = all(r.get("ok") and r.get("t_kernel_ms") for r in rs)
            n_ok = sum(bool(r.get("ok")) for r in rs)

            def tb(r):
                return tb_csv.get((prob, r["uuid"])) or min(t for t in (r.get("t_eager_ms"), r.get("t_compile_ms")) if t)

            def pct(u):
                r = rmap.get(u)
                if not r or not r.get("t_kernel_ms"):
                    return None
                return nb[u] / (r["t_kernel_ms"] * 1e-3) / 1e12 / copy

            good = [r for r in rs if r.get("ok") and r.get("t_kernel_ms")]
            gm = _gm([tb(r) / r["t_kernel_ms"] for r in good])
            gs = _gm([tb(rmap[u]) / rmap[u]["t_kernel_ms"] for u in small if u in rmap and rmap[u].get("t_kernel_ms")])
            lp = [pct(u) for u in large]
            mn = min((p for p in lp if p is not None), default=float("nan"))
            xc = [copy_ms[int(nb[u])] / rmap[u]["t_kernel_ms"] for u in large
                  if copy_ms.get(int(nb[u])) and rmap.get(u, {}).get("t_kernel_ms")]
            lab = label(rs[0].get("params", {}))
            cells = " ".join(f"{100 * p:6.1f}" if p is not None else f"{'-':>6s}" for p in lp)
            short.append(f"{vid.split(':')[-1]:8s} {lab[:34]:34s} {n_ok:2d}/{len(rs):<2d} {gm:6.3f} {gs:6.3f}  {cells} "
                         f"{100 * mn:5.1f}" + (f"  {min(xc):5.2f}" if xc else ""))
            full.append(f"{vid.split(':')[-1]:5s} {lab}: " + " ".join(
                f"wl{wl_of[u]}={100 * pct(u):.0f}%({rmap[u]['t_kernel_ms'] * 1e3:.2f})" if pct(u) else f"wl{wl_of[u]}=FAIL"
                for u in uuids))
            if ok and (best is None or mn > best[1]):
                best = (vid, mn, gm, lab)
        if best:
            hit = "MET" if best[1] >= TARGET else "missed"
            verdict.append(f"{prob[:3]} {hit:6s} best min-large {100 * best[1]:.1f}% by {best[0]} ({best[3]}), "
                           f"its gmTb {best[2]:.3f}")
        else:
            verdict.append(f"{prob[:3]} no variant correct on every workload")
    short.append("\n# target (>= 85% of copy on every large workload, best all-correct variant per problem):")
    short += verdict
    met = sum(v.split()[1] == "MET" for v in verdict)
    short.append(f"# {met}/{len(verdict)} problems meet the target")
    text = "\n".join(short)
    if tables:  # stdout: the tables of the named problems, the verdict of all
        keep, on = [], True
        for line in short:
            if line.startswith("\n## "):
                on = any(line[4:].startswith(t) for t in tables)
            elif line.startswith("\n# target"):
                on = True
            if on or line is short[0]:
                keep.append(line)
        print("\n".join(keep))
    else:
        print(text)
    out = Path(args.out) if args.out else run / "report.txt"
    out.write_text(text + "\n\n" + "\n".join(full) + "\n")


if __name__ == "__main__":
    main()
