#!/usr/bin/env python3
"""Is the evaluator's timer repeatable? Times a few kernels twice (two separate measurements, other
work in between) and reports both medians and their difference; the bar is 3% (median).

    python scripts/timing_spread.py --out data/results/timing_spread_h200.txt

Kernels: a bf16 GEMM (compute-bound), a 512 MiB copy (memory-bound), a 1M-element elementwise op
(small, launch-scale), a softmax, and the adversarial control kernel good.cu through the candidate
launcher (the path candidates take), precompiled cubins taken from $SOLFORGE_ADV_CUBINS if set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "adversarial"))


def kernels(torch):
    dev = "cuda"
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    src = torch.randn(128 << 20, device=dev)  # 512 MiB
    dst = torch.empty_like(src)
    x = torch.randn(1 << 20, device=dev)
    s = torch.randn(4096, 8192, dtype=torch.bfloat16, device=dev)
    out = {
        "gemm_bf16_8192": lambda i: torch.mm(a, b),
        "copy_512MiB": lambda i: dst.copy_(src),
        "elementwise_1M": lambda i: torch.sigmoid(x),
        "softmax_4096x8192_bf16": lambda i: torch.softmax(s, dim=-1),
    }
    try:
        import harness

        from solforge.compile.launcher import CandidateRuntime

        cand = harness.cuda_candidate(harness.HERE / "good.cu")
        cr = harness.compiled(cand, "good")
        rt = CandidateRuntime(cand, cr.cubins, cr.launch_manifest())
        n = 1 << 20
        tens = {"x": torch.randn(n, device=dev), "y": torch.randn(n, device=dev),
                "out": torch.empty(n, device=dev)}
        plan = rt.prepare(tens, {"n": n}, {})
        out["candidate_sin_chain_1M (launcher)"] = lambda i: plan.run()
    except Exception as e:  # noqa: BLE001
        print(f"launcher kernel unavailable: {e}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "data/results/timing_spread_h200.txt")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup-ms", type=float, default=300.0,
                    help="long enough for clocks and power to settle (the GEMM drifts otherwise)")
    ap.add_argument("--cooldown-s", type=float, default=0.0,
                    help="idle seconds before every measurement, so each starts from the same state")
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    args = ap.parse_args()
    import time

    import torch

    from solforge.evaluate import hardware
    from solforge.evaluate.timing import Timer

    timer = Timer(torch.device("cuda"))
    ks = kernels(torch)
    if args.only:
        ks = {k: v for k, v in ks.items() if k in args.only.split(",")}

    def measure(fn):
        if args.cooldown_s:
            torch.cuda.synchronize()
            time.sleep(args.cooldown_s)
        return timer.measure(fn, args.reps, args.warmup_ms)

    first = {name: measure(fn) for name, fn in ks.items()}
    second = {name: measure(fn) for name, fn in ks.items()}
    hw = hardware.capture(timing_method=next(iter(first.values())).method)
    lines = [f"# timing repeatability: same kernel measured twice ({args.reps} reps each, L2 flushed,",
             f"# warm-up {args.warmup_ms:.0f} ms, idle {args.cooldown_s:g} s before each); GPU {hw.gpu_name}, driver {hw.driver}, torch {hw.torch_version},",
             f"# clocks after run {hw.clocks}",
             f"# method: {next(iter(first.values())).method} {timer.cupti_error}",
             f"{'kernel':40s} {'median1_ms':>11s} {'median2_ms':>11s} {'diff_%':>7s} "
             f"{'p10-p90/med_1':>13s} {'within_3%':>9s}"]
    worst = 0.0
    for name in ks:
        m1, m2 = first[name].median_ms, second[name].median_ms
        d = abs(m1 - m2) / min(m1, m2) * 100
        worst = max(worst, d)
        lines.append(f"{name:40s} {m1:11.5f} {m2:11.5f} {d:7.2f} {first[name].spread:13.3f} "
                     f"{'yes' if d <= 3 else 'NO':>9s}")
    lines.append(f"# worst difference {worst:.2f}%")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
