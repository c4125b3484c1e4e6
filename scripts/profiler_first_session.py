#!/usr/bin/env python3
"""The first torch.profiler session of a process, with and without the zygote's preloads.

    python scripts/profiler_first_session.py [--repeat 3] [--out FILE]

Each row is a fresh interpreter that imports what the evaluator's fork server preloads
(solforge.evaluate.zygote.PRELOAD), either without torch._inductor (the preload list before
2026-11-30 19:00) or with it (now), then times the first `profile().__enter__()` (CPU activity; with
CUDA activity too when a GPU is present: then CUDA is initialized first, as in the evaluator) and counts
the modules that session imported. Why: torch.profiler's prepare_trace asks `hasattr(torch,
"_inductor")`, which imports torch._inductor -> torch._dynamo -> sympy. Runs on a CPU machine too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import importlib, json, sys, time
pre = json.loads(sys.argv[1])
t = time.perf_counter()
for m in pre:
    importlib.import_module(m)
preload_s = time.perf_counter() - t
import torch
from torch.profiler import ProfilerActivity, profile
acts = [ProfilerActivity.CPU]
if torch.cuda.is_available():
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    acts.append(ProfilerActivity.CUDA)
m0 = set(sys.modules)
t = time.perf_counter(); p = profile(activities=acts); p.__enter__()
enter1 = time.perf_counter() - t
p.__exit__(None, None, None)
new = len(set(sys.modules) - m0)
t = time.perf_counter(); p = profile(activities=acts); p.__enter__(); enter2 = time.perf_counter() - t
p.__exit__(None, None, None)
print(json.dumps({"preload_s": round(preload_s, 3), "session1_enter_s": round(enter1, 4),
                  "session2_enter_s": round(enter2, 4), "modules_imported_by_session1": new,
                  "cuda": torch.cuda.is_available(), "torch": torch.__version__}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from solforge.evaluate.zygote import PRELOAD, PRELOAD_OPTIONAL

    before = list(PRELOAD)
    rows = []
    for _ in range(a.repeat):
        for label, pre in (("without torch._inductor", before),
                           ("with torch._inductor", before + list(PRELOAD_OPTIONAL))):
            p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(pre)], capture_output=True,
                               text=True, cwd=REPO, timeout=600)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                r = {"error": p.stderr[-500:]}
            rows.append({"preload": label, **r})
            print(json.dumps(rows[-1]), flush=True)
    lines = [f"# first torch.profiler session in a fresh process after the zygote's preloads",
             f"# command: python scripts/profiler_first_session.py --repeat {a.repeat}  "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {rows[0].get('torch')}, "
             f"cuda={rows[0].get('cuda')})",
             "preload                    preload_s  session1_enter_s  session2_enter_s  modules_by_session1"]
    for r in rows:
        lines.append(f"{r['preload']:<26} {r.get('preload_s', '-'):>9}  {r.get('session1_enter_s', '-'):>16}  "
                     f"{r.get('session2_enter_s', '-'):>16}  {r.get('modules_imported_by_session1', '-'):>19}")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
