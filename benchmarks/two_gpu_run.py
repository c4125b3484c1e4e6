#!/usr/bin/env python3
"""Two GPUs, one job: the same candidate set timed with 1 GPU, then with 2, through the slots the
optimize flow uses (solforge.orchestrate.gpus.GpuPool: one evaluation per GPU at a time, each spawned
evaluator pinned with CUDA_VISIBLE_DEVICES). Reports, per pass, candidates per minute and each GPU's
busy fraction while work remains, and the 2-GPU / 1-GPU throughput ratio.

    prepare (CPU, here)   python benchmarks/two_gpu_run.py prepare [--problems GLOB] [--per-problem K]
                          instantiates kernel-family candidates, compiles them to cubins (NVRTC) and
                          stages each one (definition, workloads, candidate, cubins, job) under --dir
                          (default .carry/two_gpu, git-ignored: carry it to the GPU box).
    run     (GPU box)     python3 benchmarks/two_gpu_run.py run [--gpus 0,1] [--out $OUT]
                          stdlib + the bare-box evaluator only (torch, cuda-python, pydantic from the
                          carried wheels); no Prefect, no DuckDB.
    run --dry (no GPU)    the same scheduling and accounting, with a pinned `sleep` process standing
                          in for each evaluator (checks the machinery here; its numbers mean nothing
                          about GPUs).

Definitions (written into the output):
  busy fraction of GPU g = time g held a slot (an evaluator ran pinned to it) within [start, the
      moment the queue became empty] / that span ("while work remains"); also over the whole pass.
  candidates per minute = candidates evaluated / pass wall time * 60.
  nvidia-smi utilization (sampled every 0.5 s, if nvidia-smi exists) is reported alongside: it counts
      kernel time only, so it is lower than slot occupancy (each evaluator also imports torch, builds
      inputs and runs the reference).
Writes OUT/two_gpu_run.json and OUT/two_gpu_run.txt (OUT: --out, else $OUT, else data/results).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir


# ──────────────────────────────────────────── prepare (CPU) ──────────────────────────────────────
def cmd_prepare(args) -> None:
    from solforge.agents.lab import Lab
    from solforge.compile import compile_candidate
    from solforge.evaluate.runner import stage_candidate
    from solforge.kernels import families_for
    from solforge.problem import load_problem_dir

    root = Path(args.shared) / "sol_execbench"
    out = Path(args.dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    lab = Lab(has_gpu=False)
    if args.reps:
        lab.eval_settings["rep_count"] = args.reps
    staged = []
    for pdir in sorted(root.glob("*/*")):
        key = f"{pdir.parent.name}/{pdir.name}"
        if not (pdir / "definition.json").exists() or not fnmatch.fnmatch(key, args.problems):
            continue
        if "safetensors" in (pdir / "workload.jsonl").read_text():
            continue  # inputs from blob files: not carried to the GPU box
        problem = load_problem_dir(pdir, subset=pdir.parent.name)
        for fam in families_for(problem):
            if getattr(fam, "language", "cuda") != "cuda":
                continue
            for params in list(fam.param_space(problem))[:args.per_problem]:
                cand = fam.instantiate(problem, params)
                res = compile_candidate(cand, lab.arch)
                if not res.ok:
                    print(f"skip {key} {params}: compile {res.status}", file=sys.stderr)
                    continue
                name = f"{len(staged):03d}_{pdir.name}_{cand.source_hash()[:8]}"
                stage_candidate(out / name, problem, candidate=cand, compile_result=res,
                                job=lab.eval_job(problem))
                staged.append({"stage": name, "problem": problem.name, "family": fam.name,
                               "params": params, "workloads": len(problem.workloads)})
        if args.limit and len(staged) >= args.limit:
            break
    staged = staged[:args.limit] if args.limit else staged
    (out / "candidates.json").write_text(json.dumps(staged, indent=1))
    print(f"staged {len(staged)} candidate(s) under {out}")


# ──────────────────────────────────────────── run (GPU box) ──────────────────────────────────────
def _evaluate(stage: Path, env: dict, dry_s: float | None, timeout_s: float) -> dict:
    if dry_s is not None:  # stand-in evaluator: a spawned process that only sleeps, pinned the same way
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", "import os,time; time.sleep(float(os.environ['DRY_S']));"
                            "print(os.environ.get('CUDA_VISIBLE_DEVICES'))"],
                           env={**os.environ, **env, "DRY_S": str(dry_s)}, capture_output=True, text=True)
        return {"status": "dry", "saw_gpu": p.stdout.strip(), "wall_s": time.monotonic() - t0}
    from solforge.evaluate.runner import run_stage

    rep = run_stage(stage, timeout_s=timeout_s, env=env)
    statuses = [getattr(r.status, "value", str(r.status)) for r in rep.results]
    return {"status": "ok" if statuses and all(s == "passed" for s in statuses) else
            ",".join(sorted(set(statuses))) or f"exit {rep.exit_code}",
            "gpu_name": getattr(rep.hardware, "gpu_name", None), "wall_s": rep.wall_s,
            "exit_code": rep.exit_code}


class SmiSampler(threading.Thread):
    """nvidia-smi utilization.gpu per GPU every 0.5 s (absent nvidia-smi: no samples)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict]] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=5).stdout
                row = {}
                for ln in out.splitlines():
                    i, u = [x.strip() for x in ln.split(",")]
                    row[i] = float(u)
                self.samples.append((time.monotonic(), row))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                return
            self.stop.wait(0.5)

    def mean(self, gpu: str, t0: float, t1: float):
        vals = [r[gpu] for t, r in self.samples if t0 <= t <= t1 and gpu in r]
        return sum(vals) / len(vals) if vals else None


def one_pass(stages: list[Path], gpus: list[str], dry_s, timeout_s: float) -> dict:
    from solforge.orchestrate.gpus import GpuPool

    pool = GpuPool(gpus)
    todo: queue.Queue = queue.Queue()
    for s in stages:
        todo.put(s)
    results: list[dict] = []
    t_empty = [None]
    lock = threading.Lock()
    smi = SmiSampler()
    smi.start()

    def worker():
        while True:
            # take a GPU first, then a candidate: a GPU never waits while a candidate is queued
            slot = pool.acquire()
            try:
                stage = todo.get_nowait()
            except queue.Empty:
                pool.release(slot, "idle")
                pool.use[slot.gpu].intervals.pop()  # an empty grab is not busy time
                return
            with lock:
                if todo.empty() and t_empty[0] is None:
                    t_empty[0] = time.monotonic()
            t0 = time.monotonic()
            try:
                r = _evaluate(stage, slot.env, dry_s, timeout_s)
            except Exception as e:  # noqa: BLE001 - one candidate's failure is its own result
                r = {"status": f"error: {type(e).__name__}: {e}"}
            finally:
                pool.release(slot, stage.name)
            with lock:
                results.append({"stage": stage.name, "gpu": slot.gpu, "start": t0 - start,
                                "end": time.monotonic() - start, **r})

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = time.monotonic()
    smi.stop.set()
    t_empty = t_empty[0] or end
    # "while work remains": until the last candidate was handed out, but at least until the first
    # GPU finished its last candidate (a single-GPU pass has work remaining until its end)
    per_gpu_last = {g: max((e for s, e, _ in pool.use[g].intervals), default=start) for g in gpus}
    t_work = max(t_empty, min(per_gpu_last.values()))
    return {
        "gpus": gpus, "candidates": len(results), "wall_s": end - start,
        "candidates_per_min": 60.0 * len(results) / (end - start),
        "busy_while_work_remains": pool.busy_fractions(start, t_work),
        "busy_whole_pass": pool.busy_fractions(start, end),
        "work_remains_s": t_work - start,
        "smi_util_mean": {g: smi.mean(g, start, t_work) for g in gpus},
        "per_gpu_candidates": {g: sum(r["gpu"] == g for r in results) for g in gpus},
        "results": sorted(results, key=lambda r: r["start"]),
    }


def cmd_run(args) -> None:
    from solforge.orchestrate.gpus import visible_gpus

    d = Path(args.dir)
    meta = json.loads((d / "candidates.json").read_text())
    meta = meta[:args.limit] if args.limit else meta
    stages = [d / m["stage"] for m in meta] * args.repeat
    gpus = [g for g in (args.gpus.split(",") if args.gpus else visible_gpus()) if g]
    if args.dry and not gpus:
        gpus = ["0", "1"]
    if len(gpus) < 2:
        sys.exit(f"two_gpu_run: needs 2 GPUs, sees {gpus or 'none'} (use --dry to check the machinery)")
    gpus = gpus[:2]
    dry_s = args.dry_seconds if args.dry else None
    if not args.dry:  # warm the page cache and the CUDA driver once, outside the measurement
        _evaluate(stages[0], {"CUDA_VISIBLE_DEVICES": gpus[0]}, None, args.timeout)
    dest = Path(args.out or os.environ.get("OUT") or REPO / "data" / "results" / "two_gpu_scaling")
    dest.mkdir(parents=True, exist_ok=True)
    stem = "two_gpu_run_dry" if args.dry else "two_gpu_run"
    one = one_pass(stages, gpus[:1], dry_s, args.timeout)
    (dest / f"{stem}_one_gpu_pass.json").write_text(json.dumps(one, indent=1, default=str))
    print(f"1 GPU: {one['candidates_per_min']:.2f} candidates/min, {one['wall_s']:.1f} s", flush=True)
    two = one_pass(stages, gpus, dry_s, args.timeout)
    ratio = two["candidates_per_min"] / one["candidates_per_min"]
    busy2 = two["busy_while_work_remains"]
    same = {r["stage"]: r["status"] for r in one["results"]} == {r["stage"]: r["status"] for r in two["results"]}
    verdict = {"throughput_ratio": ratio, "ratio_ok_1_8x": ratio >= 1.8,
               "busy_ok_80pct": all(v >= 0.8 for v in busy2.values()),
               "same_statuses_1_vs_2_gpus": same}
    out = {"dry": bool(args.dry), "dry_seconds": dry_s, "candidates": len(stages),
           "host": os.uname().nodename, "one_gpu": one, "two_gpus": two, "verdict": verdict,
           "command": " ".join(sys.argv)}
    (dest / f"{stem}.json").write_text(json.dumps(out, indent=1, default=str))
    text = table(out)
    (dest / f"{stem}.txt").write_text(text)
    print(text)


def table(o: dict) -> str:
    def pct(v):
        return "-" if v is None else f"{100 * v:5.1f}%"

    lines = [f"two_gpu_run{' (DRY: sleep stand-ins, no GPU)' if o['dry'] else ''}: "
             f"{o['candidates']} candidates on {o['host']}", "",
             f"{'pass':<8} {'GPUs':<6} {'wall s':>8} {'cand/min':>9}  busy while work remains (per GPU)"
             f"   busy whole pass   nvidia-smi util"]
    for name in ("one_gpu", "two_gpus"):
        p = o[name]
        busy = "  ".join(f"{g}:{pct(v)}" for g, v in p["busy_while_work_remains"].items())
        whole = "  ".join(f"{g}:{pct(v)}" for g, v in p["busy_whole_pass"].items())
        smi = "  ".join(f"{g}:{'-' if v is None else f'{v:.0f}%'}" for g, v in p["smi_util_mean"].items())
        lines.append(f"{name:<8} {len(p['gpus']):<6} {p['wall_s']:8.1f} {p['candidates_per_min']:9.2f}  "
                     f"{busy:<34} {whole:<17} {smi}")
    v = o["verdict"]
    lines += ["", f"throughput 2 GPUs / 1 GPU: {v['throughput_ratio']:.2f}x (target >= 1.8x: "
                  f"{'met' if v['ratio_ok_1_8x'] else 'NOT met'}); busy >= 80% on both GPUs while work "
                  f"remains: {'met' if v['busy_ok_80pct'] else 'NOT met'}; same per-candidate statuses "
                  f"on 1 and 2 GPUs: {v['same_statuses_1_vs_2_gpus']}"]
    statuses: dict = {}
    for r in o["two_gpus"]["results"]:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    lines.append(f"statuses (2-GPU pass): {statuses}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--problems", default="*rmsnorm*", help="glob over SUBSET/NAME")
    p.add_argument("--per-problem", type=int, default=2, help="param sets per family and problem")
    p.add_argument("--limit", type=int, default=16, help="candidates in all")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per workload")
    p.add_argument("--shared", default=str(_shared_dir()))
    p.add_argument("--dir", default=str(REPO / ".carry" / "two_gpu"))
    p.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "two_gpu"))
    r.add_argument("--gpus", help="two CUDA_VISIBLE_DEVICES entries, e.g. 0,1 (default: visible)")
    r.add_argument("--repeat", type=int, default=1, help="run the candidate set this many times per pass")
    r.add_argument("--limit", type=int, help="only the first N staged candidates")
    r.add_argument("--timeout", type=float, default=300.0, help="per-candidate evaluator limit, s")
    r.add_argument("--dry", action="store_true", help="no GPU: pinned sleep processes stand in")
    r.add_argument("--dry-seconds", type=float, default=1.0)
    r.add_argument("--out")
    r.set_defaults(func=cmd_run)
    a = ap.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    main()
