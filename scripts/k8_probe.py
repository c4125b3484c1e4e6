#!/usr/bin/env python3
"""k8 calibration (GPU): what plain DRAM traffic of the large RMSNorm workloads' sizes reaches under the
kernels' own timing (CUPTI span, the 128 MiB L2 flush before every call), so that "85% of the copy
bandwidth" on a 25-35 MB call can be read against what a copy of that size gets.

    python3 scripts/k8_probe.py --plan-dir .carry/k8 --out $OUT/k8/probe.json

For every distinct byte count B of the large quarter of each problem's workloads (the quarter that the
target is about, as in scripts/k6_compare.py), three torch calls on B/2 bytes each way:
  copy   dst.copy_(src)           B bytes moved (read B/2 + write B/2): the kernel's own traffic mix
  read   src.view(float32).sum()  B/2 bytes read (plus a tiny result)
  write  dst.zero_()              B/2 bytes written
and the 2 GiB copy that bench_kernels calls the copy bandwidth. Prints a table and writes probe.json
({"copy_tb_s": ..., "sizes": [{"bytes": B, "copy_ms": ..., "read_ms": ..., "write_ms": ...}]}).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def large_bytes(plan_dir: Path) -> dict:
    """bytes -> [problem:workload index] over the large quarter of every problem in the plan."""
    from k6_compare import workload_bytes
    from solforge.problem.loader import load_problem_dir

    plan = json.loads((plan_dir / "plan.json").read_text())
    out: dict = {}
    for e in plan["problems"]:
        pdir = plan_dir / e["key"] / "problem"
        nb = workload_bytes(pdir)
        uu = [w.uuid for w in load_problem_dir(pdir).workloads]
        ranked = sorted(range(len(uu)), key=lambda i: nb[uu[i]])
        q = max(1, len(ranked) // 4)
        for i in ranked[-q:]:
            out.setdefault(int(nb[uu[i]]), []).append(f"{e['problem'][:3]}:{i}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan-dir", default=".carry/k8")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    import torch

    from bench_kernels import CuptiTimer

    sizes = large_bytes(Path(args.plan_dir))
    timer = CuptiTimer(torch, reps=args.reps)
    big = 2 << 30
    a = torch.empty(big, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t, _ = timer(lambda: b.copy_(a))
    copy_tb_s = 2 * big / (t * 1e-3) / 1e12
    res = {"copy_tb_s": copy_tb_s, "method": getattr(timer, "method", "?"), "sizes": []}
    print(f"# 2 GiB copy {t * 1e3:.1f} us = {copy_tb_s:.3f} TB/s ({res['method']}); per size: time (us) "
          f"and bytes/time as % of that; ovh = time - bytes/copy bandwidth")
    print(f"{'MB':>8s} {'copy us':>8s} {'copy%':>6s} {'ovh us':>7s} {'read us':>8s} {'read%':>6s} "
          f"{'write us':>8s} {'write%':>6s}  workloads")
    for nbytes in sorted(sizes):
        half = (nbytes // 2 + 15) // 16 * 16
        src, dst = a[:half], b[:half]
        tc, _ = timer(lambda: dst.copy_(src))
        tr, _ = timer(lambda: src.view(torch.float32).sum())
        tw, _ = timer(lambda: dst.zero_())
        row = {"bytes": nbytes, "copy_ms": tc, "read_ms": tr, "write_ms": tw, "workloads": sizes[nbytes]}
        res["sizes"].append(row)
        pct = lambda by, ms: 100 * by / (ms * 1e-3) / 1e12 / copy_tb_s
        print(f"{nbytes / 1e6:8.2f} {tc * 1e3:8.2f} {pct(2 * half, tc):6.1f} "
              f"{(tc - 2 * half / (copy_tb_s * 1e12) * 1e3) * 1e3:7.2f} {tr * 1e3:8.2f} {pct(half, tr):6.1f} "
              f"{tw * 1e3:8.2f} {pct(half, tw):6.1f}  {' '.join(sizes[nbytes])}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
