#!/usr/bin/env python3
"""Why the same evaluation takes 3-7% longer when the other GPU evaluates too (issue #8), in ~35 s of
two GPUs: the evaluator's CPU-side loop reproduced in long-lived children, alone and in pairs.

    python3 scripts/scaling_overhead_probe.py [--gpus 0,1] [--seconds 4] [--dry]

What the session-3 DBs show (data/results/two_gpu_*_s3_phases.md, same candidates 1 vs 2 GPUs): the
kernels' own GPU times are unchanged (median ratio 1.000 over 843 workloads), but every CPU-side
phase grows by a similar share (timing_profile +7.6%, inputs +7.5%, checks +6.8%, cuda_init +6.2%), most
for kernels of 0.05-0.5 ms (timing_profile +13%): the calls that get the timer's duty-cycle sleep.
Each child here does what an evaluation's workload does on the CPU, over and over for --seconds:

  inputs    three 64 MiB bf16 randn tensors on the GPU (allocations after empty_cache, as the driver
            leaves the allocator after each workload), synchronized
  session   one torch.profiler (kineto/CUPTI) session around 20 timed calls, as timing.Timer does:
            marker kernel, 128 MiB L2 flush, synchronize, a bf16 GEMM (6144^3, ~0.6 ms), synchronize,
            then the duty-cycle sleep (as long as the call's wall time), and the kineto events read
  per call  wall ms (flush -> second synchronize), sleep overshoot (slept - asked), GEMM GPU us (kineto)

Phases (children start once, import torch + torch._inductor, create their context, then wait):
  spin_alone      GPU A, default scheduling (the driver spins in synchronize: one core busy)
  spin_pair       GPU A and GPU B at once
  spin_pair_pin   the same, each child pinned to its own half of the CPUs (sched_setaffinity)
  block_alone     GPU A, CU_CTX_SCHED_BLOCKING_SYNC (synchronize sleeps on an interrupt)
  block_pair      GPU A and GPU B at once, blocking sync
Reading it: spin_pair vs spin_alone is the slowdown the optimize runs saw; if the _pin or block_
variants remove it, that is the remedy to put into the evaluator child (zygote.py); per-call wall vs
sleep overshoot vs session overhead says where it sits. Prints one JSON summary (and --out FILE).
Stdlib + torch + cuda-python (the GPU box). --dry: CPU tensors, no CUDA (plumbing check only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, os, resource, statistics as st, sys, time
sync_mode, dry = sys.argv[1], sys.argv[2] == "1"
import torch
from torch.profiler import ProfilerActivity, profile
try:
    import torch._inductor  # as the evaluator's fork server preloads it (profiler's lazy import)
except Exception:
    pass
flags = None
if not dry:
    from cuda.bindings import driver as cu
    cu.cuInit(0)
    _, dev = cu.cuDeviceGet(0)
    if sync_mode == "block":
        (err,) = cu.cuDevicePrimaryCtxSetFlags(dev, int(cu.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC))
        if err != cu.CUresult.CUDA_SUCCESS:
            raise SystemExit(f"cuDevicePrimaryCtxSetFlags: {err}")
    device = torch.device("cuda", 0)
    torch.empty(1, device=device)
    _, flags, _active = cu.cuDevicePrimaryCtxGetState(dev)
    flags = int(flags)
else:
    device = torch.device("cpu")
cuda = device.type == "cuda"
def sync():
    if cuda:
        torch.cuda.synchronize(device)
n = 6144 if cuda else 256
a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
c = torch.empty_like(a)
flush = torch.empty((128 << 20) if cuda else (1 << 20), dtype=torch.uint8, device=device)
def call():
    t = time.perf_counter()
    if cuda:
        torch.cuda._sleep(1)
    flush.zero_(); sync(); torch.mm(a, b, out=c); sync()
    return (time.perf_counter() - t) * 1e3
for _ in range(20):
    call()
gap_ms = st.median(call() for _ in range(10))
acts = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
with profile(activities=acts):  # the process's first session (CUPTI init) outside the measurement
    call()
print(json.dumps({"ready": True, "pid": os.getpid(), "ctx_flags": flags, "gap_ms": gap_ms}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("pin"):
        os.sched_setaffinity(0, cmd["pin"])
    else:
        os.sched_setaffinity(0, cmd["all"])
    t_end = time.perf_counter() + cmd["seconds"]
    ru0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    rows, walls, over, gpu_us = [], [], [], []
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        x = [torch.randn(32 << 20, device=device, dtype=torch.bfloat16) for _ in range(3)]
        sync()
        t_inputs = time.perf_counter() - t
        t = time.perf_counter()
        with profile(activities=acts) as prof:
            for _ in range(20):
                w = call()
                walls.append(w)
                g = gap_ms / 1e3 if gap_ms >= 0.5 else 0.0
                if g:
                    s0 = time.perf_counter(); time.sleep(g)
                    over.append((time.perf_counter() - s0 - g) * 1e3)
        evs = prof.profiler.kineto_results.events()
        for e in evs:
            nm = e.name().lower()
            if cuda and "CUDA" in str(e.device_type()) and ("gemm" in nm or "sm90" in nm or "cutlass" in nm):
                d = (e.end_ns() - e.start_ns()) if hasattr(e, "end_ns") else e.duration_ns()
                gpu_us.append(d / 1e3)
        t_session = time.perf_counter() - t
        del x
        if cuda:
            torch.cuda.empty_cache()
        rows.append((t_inputs, t_session))
    ru1, c1 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    k = max(len(rows), 1)
    def med(v):
        return round(st.median(v), 4) if v else None
    def p90(v):
        return round(sorted(v)[int(0.9 * (len(v) - 1))], 4) if v else None
    print(json.dumps({"workloads": len(rows), "inputs_s": med([r[0] for r in rows]),
                      "session_s": med([r[1] for r in rows]), "call_ms": med(walls),
                      "call_p90_ms": p90(walls), "overshoot_ms": med(over), "overshoot_p90_ms": p90(over),
                      "gemm_gpu_us": med(gpu_us), "cpu_s_per_workload": round((c1 - c0) / k, 4),
                      "nvcsw_per_workload": round((ru1.ru_nvcsw - ru0.ru_nvcsw) / k, 1),
                      "nivcsw_per_workload": round((ru1.ru_nivcsw - ru0.ru_nivcsw) / k, 1),
                      "cpu": sorted(os.sched_getaffinity(0))[:1] + sorted(os.sched_getaffinity(0))[-1:]}),
          flush=True)
"""


class Child:
    def __init__(self, gpu: str, sync_mode: str, dry: bool):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1",
               "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        self.gpu, self.sync_mode = gpu, sync_mode
        self.p = subprocess.Popen([sys.executable, "-c", CHILD, sync_mode, "1" if dry else "0"],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.hello: dict = {}

    def read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            err = self.p.stderr.read()[-800:] if self.p.poll() is not None else ""
            raise RuntimeError(f"child gpu {self.gpu} {self.sync_mode} ended: {err}")
        return json.loads(line)

    def send(self, cmd: dict) -> None:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def close(self) -> None:
        try:
            self.p.stdin.close()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


def halves(cpus: list[int]) -> tuple[list[int], list[int]]:
    """Two disjoint halves of the CPUs this process may use (the first half for GPU A)."""
    cpus = sorted(cpus)
    h = max(1, len(cpus) // 2)
    return cpus[:h], cpus[h:] or cpus[:h]


def run_phase(children: list[Child], seconds: float, pins: list) -> list[dict]:
    allowed = sorted(os.sched_getaffinity(0))
    for ch, pin in zip(children, pins):
        ch.send({"seconds": seconds, "pin": pin, "all": allowed})
    return [{"gpu": ch.gpu, "sync": ch.sync_mode, **ch.read()} for ch in children]


def ratio(x, y, key):
    try:
        return round(x[key] / y[key], 4)
    except (TypeError, KeyError, ZeroDivisionError):
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--dry", action="store_true", help="CPU tensors, no CUDA: plumbing check")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    ga, gb = (a.gpus.split(",") + [a.gpus.split(",")[0]])[:2]
    t0 = time.time()
    kids = {("spin", ga): Child(ga, "spin", a.dry), ("spin", gb): Child(gb, "spin", a.dry),
            ("block", ga): Child(ga, "block", a.dry), ("block", gb): Child(gb, "block", a.dry)}
    res: dict = {"command": " ".join(sys.argv), "gpus": [ga, gb], "cpus": len(os.sched_getaffinity(0)),
                 "dry": a.dry, "phases": {}}
    try:
        for k, ch in kids.items():
            ch.hello = ch.read()
        res["children"] = {f"{s}:{g}": ch.hello for (s, g), ch in kids.items()}
        res["start_s"] = round(time.time() - t0, 1)
        ha, hb = halves(list(os.sched_getaffinity(0)))
        plan = [("spin_alone", [kids["spin", ga]], [None]),
                ("spin_pair", [kids["spin", ga], kids["spin", gb]], [None, None]),
                ("spin_pair_pin", [kids["spin", ga], kids["spin", gb]], [ha, hb]),
                ("block_alone", [kids["block", ga]], [None]),
                ("block_pair", [kids["block", ga], kids["block", gb]], [None, None]),
                ("spin_alone_again", [kids["spin", ga]], [None])]  # drift check
        for name, chs, pins in plan:
            res["phases"][name] = run_phase(chs, a.seconds, pins)
    finally:
        for ch in kids.values():
            ch.close()
    ph = res["phases"]
    base = ph["spin_alone"][0]
    res["vs_spin_alone_gpu_a"] = {
        name: {key: ratio(rows[0], base, key) for key in
               ("session_s", "inputs_s", "call_ms", "overshoot_ms", "gemm_gpu_us", "cpu_s_per_workload")}
        for name, rows in ph.items() if name != "spin_alone"}
    res["wall_s"] = round(time.time() - t0, 1)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
