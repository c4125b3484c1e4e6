#!/usr/bin/env python3
"""Two questions the two-GPU scaling work needs a GPU for (~40 s of GPU, two GPUs visible):

    python3 scripts/scaling_probe.py [--out DIR] [--gpus 0,1] [--seconds 12]

pair     Does a child's CUDA start-up (context + first kineto/CUPTI session, with torch._inductor
         imported beforehand as the fork server now does) get slower when another process does the same on the OTHER GPU at the same
         moment? One child alone on GPU A, then two started together on GPU A and GPU B, twice.
         Answers why evaluations took ~10% longer with both GPUs busy
         (data/results/two_gpu_optimize_h200x2_phases.md).
perturb  Does that start-up disturb kernel timings of ANOTHER process on the SAME GPU? Process T times
         a ~0.2 ms bf16 GEMM back to back with CUDA events for --seconds; process S starts on the same
         GPU a few seconds in and does context creation + one empty profiler session. T's times inside
         S's window vs outside it (median, p99, share of slow samples). If they match, the next
         evaluation's start-up could run while the current one is timed (the GPU slot taken only
         after start-up), hiding the start-up of each evaluation.

Writes DIR/scaling_probe.json (one file) and prints a summary. Stdlib + torch only (the GPU box).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTUP = r"""
import json, sys, time
t0 = time.time()
go = float(sys.argv[1])
import torch
from torch.profiler import ProfilerActivity, profile
import torch._inductor  # as the evaluator's fork server preloads it: session1 is then CUPTI alone
r = {"import_s": time.time() - t0}
while time.time() < go:
    time.sleep(0.001)
r["t_start"] = t = time.time()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
r["cuda_init_s"] = time.time() - t
def libs():
    try:
        return {ln.split()[-1] for ln in open("/proc/self/maps") if ".so" in ln}
    except OSError:
        return set()

def status():
    d = {}
    for ln in open("/proc/self/status"):
        k, _, v = ln.partition(":")
        if k in ("Threads", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches", "VmRSS"):
            d[k] = v.strip()
    return d

before, c0, st0 = libs(), time.process_time(), status()
t = time.time(); p = profile(activities=[ProfilerActivity.CUDA]); p.__enter__()
r["session1_enter_s"] = time.time() - t
# CPU seconds of all threads during the enter: ~= the wall -> CPU-bound (library init, parsing);
# much less -> waiting (driver calls, sleeps). Libraries mapped by it: what a zygote could preload.
r["session1_cpu_s"] = time.process_time() - c0
r["session1_new_libs"] = sorted(libs() - before)
r["status_before"], r["status_after"] = st0, status()
p.__exit__(None, None, None)
r["t_end"] = time.time()
print(json.dumps(r))
"""

TIMER = r"""
import json, sys, time
import torch
seconds, out = float(sys.argv[1]), sys.argv[2]
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for _ in range(200):
    torch.mm(a, b, out=c)
torch.cuda.synchronize()
print(json.dumps({"ready": time.time()}), flush=True)
rows = []
t_end = time.time() + seconds
while time.time() < t_end:
    s.record(); torch.mm(a, b, out=c); e.record(); e.synchronize()
    rows.append((time.time(), s.elapsed_time(e)))
json.dump(rows, open(out, "w"))
print(json.dumps({"done": time.time(), "n": len(rows)}), flush=True)
"""


def _child(code: str, args: list[str], gpu: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _result(p: subprocess.Popen, timeout: float = 90) -> dict:
    out, err = p.communicate(timeout=timeout)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"rc {p.returncode}: {err[-600:]}"}


def startups(gpus: list[str], lead_s: float = 8.0) -> list[dict]:
    """Children on `gpus` that start CUDA at the same moment (after importing torch first)."""
    go = time.time() + lead_s
    procs = [(g, _child(STARTUP, [repr(go)], g)) for g in gpus]
    return [{"gpu": g, **_result(p)} for g, p in procs]


def window_stats(samples: list[tuple[float, float]], t0: float, t1: float) -> dict:
    """T's GEMM times inside [t0, t1] (S's start-up) vs outside it."""
    inside = [ms for t, ms in samples if t0 <= t <= t1]
    outside = [ms for t, ms in samples if not (t0 - 0.5 <= t <= t1 + 0.5)]

    def stats(xs):
        if not xs:
            return {"n": 0}
        xs = sorted(xs)
        return {"n": len(xs), "median_ms": xs[len(xs) // 2], "p99_ms": xs[min(len(xs) - 1, int(len(xs) * 0.99))],
                "max_ms": xs[-1], "mean_ms": st.mean(xs)}

    a, b = stats(inside), stats(outside)
    out = {"inside": a, "outside": b}
    if a["n"] and b["n"]:
        slow = b["median_ms"] * 1.05
        out["median_change_pct"] = round((a["median_ms"] / b["median_ms"] - 1) * 100, 3)
        out["mean_change_pct"] = round((a["mean_ms"] / b["mean_ms"] - 1) * 100, 3)
        out["slow_share_inside"] = sum(x > slow for x in inside) / len(inside)
        out["slow_share_outside"] = sum(x > slow for x in outside) / len(outside)
    return out


def perturb(gpu: str, seconds: float, tmp: Path) -> dict:
    rows_path = tmp / "timer_rows.json"
    timer = _child(TIMER, [repr(seconds), str(rows_path)], gpu)
    ready = json.loads(timer.stdout.readline())["ready"]
    # S starts its CUDA start-up ~3 s into T's timing (its torch import happens before that)
    s = _child(STARTUP, [repr(ready + 3.0)], gpu)
    srow = _result(s)
    _result(timer)
    samples = json.loads(rows_path.read_text()) if rows_path.exists() else []
    if "t_start" not in srow or not samples:
        return {"error": srow.get("error", "no samples"), "startup": srow}
    return {"gpu": gpu, "startup": srow, "samples": len(samples),
            "whole_startup": window_stats(samples, srow["t_start"], srow["t_end"]),
            "cuda_init_only": window_stats(samples, srow["t_start"], srow["t_start"] + srow["cuda_init_s"]),
            "profiler_session_only": window_stats(samples, srow["t_start"] + srow["cuda_init_s"], srow["t_end"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: pair,perturb")
    a = ap.parse_args(argv)
    gpus = [g for g in a.gpus.split(",") if g]
    skip = set(a.skip.split(","))
    res: dict = {"command": " ".join(sys.argv), "gpus": gpus}
    path = a.out / "scaling_probe.json"
    a.out.mkdir(parents=True, exist_ok=True)

    def save():
        path.write_text(json.dumps(res, indent=1) + "\n")

    t = time.time()
    if "pair" not in skip:
        res["alone"] = startups(gpus[:1])
        save()
        res["together"] = startups(gpus[:2]) + startups(gpus[:2]) if len(gpus) > 1 else []
        save()
    if "perturb" not in skip:
        with tempfile.TemporaryDirectory() as tmp:
            res["perturb"] = perturb(gpus[0], a.seconds, Path(tmp))
        save()
    res["wall_s"] = round(time.time() - t, 1)
    save()
    brief = {"alone": [(r.get("cuda_init_s"), r.get("session1_enter_s")) for r in res.get("alone", [])],
             "together": [(r.get("gpu"), r.get("cuda_init_s"), r.get("session1_enter_s"))
                          for r in res.get("together", [])],
             "perturb": {k: v for k, v in res.get("perturb", {}).items() if k != "startup"}}
    print(json.dumps(brief, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
