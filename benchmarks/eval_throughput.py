#!/usr/bin/env python3
"""Seconds per optimize attempt on the GPU (issues #7/#8): the same staged candidates evaluated by

  before   the previous driver (git's solforge/evaluate/driver.py before the zygote), spawned: a new
           interpreter per candidate that imports torch, initializes CUDA, evaluates, tears down
  spawn    the current driver, spawned (its phase timings show where a fresh interpreter's time goes)
  zygote   the current driver in a child forked by the zygote (torch preloaded, CUDA not initialized)
  screen   zygote, on screen_workloads(k) only (what a screened-out candidate costs)

Per-attempt seconds = RunReport.wall_s (what the optimize flow records as attempts.gpu_seconds: the
GPU slot is held for exactly that long). Every run records its phases (solforge/evaluate/phases.py).

    prepare (CPU, here)  python benchmarks/eval_throughput.py prepare [--dir .carry/throughput]
                         compiles and stages one kernel-family candidate per problem (NVRTC), writes the
                         previous driver (git show REV:solforge/evaluate/driver.py) and the adversarial
                         cubins (for tests/adversarial on a box without NVRTC) under --dir.
    run     (GPU box)    python3 benchmarks/eval_throughput.py run [--dir ...] [--out $OUT]
                         writes OUT/eval_throughput.json after every evaluation (a cut run keeps what it did)
    cupti   (GPU box)    python3 benchmarks/eval_throughput.py cupti [--out $OUT]
                         where a fresh process's first torch.profiler (kineto/CUPTI) session spends its
                         ~5 s (enter / body / exit / records), in fresh processes: default, CUDA_MODULE_LOADING
                         =EAGER, a session without GPU work first, a session begun before CUDA init.
                         Writes OUT/cupti_init.json (~1 minute).

Output: {"records": [{config, stage, problem, workloads, wall_s, launch, phases, statuses}], "summary":
{config: {n, median_wall_s, mean_wall_s, median_phase_s}}, "zygote": hello, "command"}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir

DEFAULT_PROBLEMS = ("FlashInfer-Bench/001_fused_add_rmsnorm_h2048", "FlashInfer-Bench/021_rmsnorm_h128",
                    "FlashInfer-Bench/026_rmsnorm_h7168", "L1/025_video_latent_gelu_activation")
BEFORE_REV = "7c4eae2"  # the last commit with the old driver (before d13cfd0: zygote + phases)


# ──────────────────────────────────────────── prepare (CPU) ──────────────────────────────────────
def cmd_prepare(args) -> None:
    from solforge.agents.lab import Lab
    from solforge.compile import compile_candidate
    from solforge.evaluate.runner import stage_candidate
    from solforge.kernels import families_for
    from solforge.orchestrate.evaluation import eval_job
    from solforge.problem import load_problem_dir

    out = Path(args.dir)
    if out.exists():
        shutil.rmtree(out)
    (out / "stages").mkdir(parents=True)
    lab = Lab(has_gpu=False)
    lab.eval_settings["rep_count"] = args.reps
    staged = []
    for key in args.problems.split(","):
        pdir = Path(args.shared) / "sol_execbench" / key
        problem = load_problem_dir(pdir, subset=pdir.parent.name)
        done = False
        for fam in families_for(problem):
            if getattr(fam, "language", "cuda") != "cuda" or done:
                continue
            for params in list(fam.param_space(problem))[:1]:
                cand = fam.instantiate(problem, params)
                res = compile_candidate(cand, lab.arch)
                if not res.ok:
                    print(f"skip {key} {params}: compile {res.status}", file=sys.stderr)
                    continue
                name = f"{len(staged):02d}_{pdir.name}"
                job = eval_job(lab, problem)
                job.pop("blob_roots", None)  # no blobs: these problems have random inputs only
                stage_candidate(out / "stages" / name, problem, candidate=cand, compile_result=res,
                                job=job)
                staged.append({"stage": name, "problem": problem.name, "family": fam.name,
                               "params": params, "workloads": len(problem.workloads)})
                done = True
    (out / "candidates.json").write_text(json.dumps(staged, indent=1))
    old = subprocess.run(["git", "-C", str(REPO), "show", f"{args.before_rev}:solforge/evaluate/driver.py"],
                         capture_output=True, text=True, check=True).stdout
    (out / "driver_before.py").write_text(old)
    sys.path.insert(0, str(REPO / "tests" / "adversarial"))
    import harness

    harness.precompile(out / "adv_cubins")
    print(f"staged {len(staged)} candidate(s), the driver of {args.before_rev} and the adversarial "
          f"cubins under {out}")


# ──────────────────────────────────────────── run (GPU box) ──────────────────────────────────────
def _record(config: str, stage: Path, rep, meta: dict) -> dict:
    return {"config": config, "stage": stage.name, "problem": meta.get("problem"),
            "workloads": len(rep.results), "wall_s": round(rep.wall_s, 4), "launch": rep.launch,
            "phases": rep.phases, "exit_code": rep.exit_code,
            "statuses": [r.status.value for r in rep.results],
            "workload_phases": [r.extra.get("phases") for r in rep.results],
            "median_ms": [r.median_ms for r in rep.results]}


def summarize(records: list[dict]) -> dict:
    out = {}
    for cfg in dict.fromkeys(r["config"] for r in records):
        rs = [r for r in records if r["config"] == cfg]
        walls = [r["wall_s"] for r in rs]
        phase_names = sorted({k for r in rs for k in (r["phases"].get("seconds") or {})})
        out[cfg] = {"n": len(rs), "median_wall_s": round(statistics.median(walls), 3),
                    "mean_wall_s": round(statistics.mean(walls), 3),
                    "min_wall_s": round(min(walls), 3), "max_wall_s": round(max(walls), 3),
                    "workloads": [r["workloads"] for r in rs],
                    "median_phase_s": {k: round(statistics.median(
                        (r["phases"].get("seconds") or {}).get(k, 0.0) for r in rs), 4)
                        for k in phase_names},
                    "all_passed": all(set(r["statuses"]) == {"passed"} for r in rs)}
    return out


def cmd_run(args) -> None:
    from solforge.evaluate import runner
    from solforge.evaluate.screening import screen_workloads
    from solforge.problem.loader import load_definition, load_workloads

    d = Path(args.dir)
    meta = {m["stage"]: m for m in json.loads((d / "candidates.json").read_text())}
    stages = [d / "stages" / s for s in meta][: args.limit or None]
    dest = Path(args.out or os.environ.get("OUT") or REPO / "data" / "results" / "eval_throughput")
    dest.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join(sys.argv), "host": os.uname().nodename, "records": [],
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def save():
        result["summary"] = summarize(result["records"])
        (dest / "eval_throughput.json").write_text(json.dumps(result, indent=1, default=str))

    def one(config: str, stage: Path, **kw):
        rep = runner.run_stage(stage, timeout_s=args.timeout, **kw)
        rec = _record(config, stage, rep, meta[stage.name])
        result["records"].append(rec)
        save()
        print(f"{config:<7} {stage.name:<40} {rec['wall_s']:7.2f} s  {rep.launch:<6} "
              f"{sorted(set(rec['statuses']))} {json.dumps(rec['phases'].get('seconds', {}))}",
              flush=True)
        return rep

    # the zygote starts first (in the background) so its torch import overlaps the spawned runs
    runner.prestart()
    before = REPO / "solforge" / "evaluate" / "driver_before.py"
    if args.before and (d / "driver_before.py").exists():
        shutil.copy(d / "driver_before.py", before)
        runner._Spawned.module = "solforge.evaluate.driver_before"
        try:
            for s in stages[: args.before]:
                for w in (None,):
                    one("before", s, launch="spawn", workloads=w)
        finally:
            runner._Spawned.module = "solforge.evaluate.driver"
            before.unlink()
    for s in stages[: args.spawn]:
        one("spawn", s, launch="spawn", workloads=None)
    result["zygote"] = runner.prestart(wait=True)
    save()
    for _ in range(args.repeat):
        for s in stages:
            one("zygote", s, launch="zygote", workloads=None)
    for s in stages:
        defn = load_definition(s / "definition.json")
        picks = screen_workloads(load_workloads(s / "workload.jsonl", defn), args.screen_k)
        one("screen", s, launch="zygote", workloads=picks)
        # leave the stage as it was (all workloads) for anyone running it again
        job = json.loads((s / "job.json").read_text())
        job.pop("workloads", None)
        (s / "job.json").write_text(json.dumps(job, indent=1))
    save()
    print(json.dumps(result["summary"], indent=1))


_CUPTI_PROBE = r"""
import json, os, sys, time
T = {}
t = time.perf_counter(); import torch; from torch.profiler import ProfilerActivity, profile
T["import_s"] = time.perf_counter() - t
variant = sys.argv[1]

def session(work=True):
    r = {}
    t = time.perf_counter(); p = profile(activities=[ProfilerActivity.CUDA]); p.__enter__()
    r["enter_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if work:
        torch.cuda._sleep(1); x = torch.ones(1 << 20, device="cuda"); x.mul_(2); torch.cuda.synchronize()
    r["body_s"] = time.perf_counter() - t
    t = time.perf_counter(); p.__exit__(None, None, None); r["exit_s"] = time.perf_counter() - t
    t = time.perf_counter(); n = len(list(p.profiler.kineto_results.events())); r["events_s"] = time.perf_counter() - t
    r["events"] = n
    return r

if variant == "before_cuda_init":
    T["session0_no_cuda"] = session(work=False)
t = time.perf_counter(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
T["cuda_init_s"] = time.perf_counter() - t
if variant == "empty_first":
    T["session0_empty"] = session(work=False)
T["session1"] = session()
T["session2"] = session()
print(json.dumps(T))
"""


def cmd_cupti(args) -> None:
    dest = Path(args.out or os.environ.get("OUT") or REPO / "data" / "results" / "eval_throughput")
    dest.mkdir(parents=True, exist_ok=True)
    rows = []
    for variant, extra in (("default", {}), ("default", {}), ("eager", {"CUDA_MODULE_LOADING": "EAGER"}),
                           ("empty_first", {}), ("before_cuda_init", {})):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _CUPTI_PROBE, variant], capture_output=True, text=True,
                           env={**os.environ, **extra}, timeout=120)
        row = {"variant": variant, "env": extra, "process_s": round(time.perf_counter() - t0, 3),
               "rc": p.returncode, "stderr_tail": p.stderr[-600:]}
        try:
            row.update(json.loads(p.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            pass
        rows.append(row)
        print(json.dumps(row), flush=True)
        (dest / "cupti_init.json").write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows},
                                                         indent=1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS), help="SUBSET/NAME,...")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per workload (as two_gpu_run)")
    p.add_argument("--shared", default=str(_shared_dir()))
    p.add_argument("--dir", default=str(REPO / ".carry" / "throughput"))
    p.add_argument("--before-rev", default=BEFORE_REV)
    p.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "throughput"))
    r.add_argument("--before", type=int, default=2, help="stages timed with the previous driver")
    r.add_argument("--spawn", type=int, default=1, help="stages timed with the current driver, spawned")
    r.add_argument("--repeat", type=int, default=2, help="zygote passes over all stages")
    r.add_argument("--screen-k", type=int, default=3)
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--out")
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("cupti")
    c.add_argument("--out")
    c.set_defaults(func=cmd_cupti)
    a = ap.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    main()
