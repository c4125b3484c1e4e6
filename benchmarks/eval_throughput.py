#!/usr/bin/env python3
"""Evaluations per GPU-minute on the H200: the same staged candidates evaluated the old way and the
new way, each a fresh process per candidate with every guard and the post-timing re-check (isolation
unchanged), with the phase seconds of each evaluation (the shape attempts.eval_phases / v_eval_phases
keep).

Configurations (job settings and the slot environment; the same driver, runner and zygote):
  before        as it was: warm-up by wall time (warmup_ms, 25 ms), a synchronize between each
                call's L2 flush and the call, torch.profiler (kineto) for CUPTI, a child forked per
                request that creates its CUDA context itself (SOLFORGE_EVAL_SPARE=0)
  after_kineto  SOL-ExecBench's measurement (10 counted warm-up calls, the call queued behind its
                flush) still read through kineto, a child forked per request
                (SOLFORGE_EVAL_SPARE=0; the zygote's spare child is on by default since 2026-12-04)
  after_spare   after_kineto with the zygote's spare child (SOLFORGE_EVAL_SPARE=1: its CUDA context
                made while the previous candidate ran, its descriptors kept through the driver's sweep)
  at_done       after_spare with the runner returning at the driver's "done" line instead of
                waiting for its exit (its CUDA context's teardown), for drivers that held at most
                8 GiB of GPU memory (settings.eval_return_at_done_bytes, off by default until this
                configuration has measured it)
  at_done_probe12  at_done with the caching probe's calls per side capped at 12 instead of 24
                (settings.caching_probe_max_calls): a small kernel's probe is ~half its timed calls
  spare_no_premade  after_spare with the caching probe's fresh input sets made one by one in its
                setup, with the GPU held alone (caching_probe_premade_bytes 0), as before commit
                d964b0e; every other configuration makes them ahead, while the GPU is shared
  after         the same, CUPTI read through cupti-python (kineto where it does not import)
  after_cupti_gpu  the same through cupti-python with the GPU record kinds alone, left on for the
                process (timing.py's `cupti-gpu`)
  after_one_session  after_kineto with each workload's timed calls, re-check and caching probe in
                one kineto session instead of two (timing.Timer.batched; settings.timing_one_session)
  profile       after_spare with the driver's workload loop under cProfile (job setting
                "cprofile"): the report lists the Python functions of most own time per
                evaluation, to see what the phases are made of (cProfile slows Python-heavy parts,
                so this configuration's throughput is not comparable)

  lanesN_CFG    (--lanes N) the last of --configs (or --lanes-config) again with N evaluations at a
                time on the one GPU, as `solforge optimize --lanes N` runs them: each evaluation
                holds the GPU shared for its correctness work and alone for its timing (gpu_share),
                so one candidate's inputs, reference and checks overlap another's process start;
                its GPU-seconds are the batch's wall time (the GPU is held throughout), not the sum of the evaluations'

GPU-seconds of an evaluation = RunReport.wall_s (what the optimize flow records as
attempts.gpu_seconds: the GPU slot is held exactly that long). Evaluations per GPU-minute =
60 x evaluations / sum of their GPU-seconds. Configurations alternate per candidate, so clock or
thermal drift over the run lands on all of them alike.

    prepare (CPU, here)  python benchmarks/eval_throughput.py prepare [--dir .carry/throughput]
        compiles (NVRTC) and stages each problem's best/ kernel (the candidate as measured) with the
        optimize flow's job settings; at most --max-workloads workloads each (spread over sizes);
        also the adversarial cubins (tests/adversarial on a box without NVRTC).
    run (GPU box)        python3 benchmarks/eval_throughput.py run [--dir ...] [--out $OUT]
        writes OUT/eval_throughput.json and OUT/eval_throughput.md after every evaluation.
    report (anywhere)    python benchmarks/eval_throughput.py report OUT/eval_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# RMSNorm / pointwise problems and one GEMM: small kernels (<= 100 us), <= 16 workloads each
DEFAULT_PROBLEMS = ("FlashInfer-Bench/025_rmsnorm_h4096", "FlashInfer-Bench/021_rmsnorm_h128",
                    "L1/069_rms_norm", "L1/056_mamba_ssm_dt_projection_softplus_clamp_backward",
                    "L1/085_geglu_activation", "FlashInfer-Bench/004_gemm_n128_k2048")
# each configuration pins the probe's calls per side and the runner's return, so it measures what it
# measured when it was added, whatever the defaults are now (since 2026-12-04: 12 calls, return at
# "done"; before: 24, wait for the exit)
_P24 = {"caching_probe_max_calls": 24}
_P12 = {"caching_probe_max_calls": 12}
CONFIGS = {
    "before": {"warmup_calls": 0, "timing_queued": False, "timing_backend": "kineto", **_P24},
    "after_kineto": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto", **_P24},
    "after": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "auto", **_P24},
    "after_cupti_gpu": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "cupti-gpu", **_P24},
    "after_one_session": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto",
                          "one_session": True, **_P24},
    "after_spare": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto", **_P24},
    "at_done": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto", **_P24},
    "at_done_probe12": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto", **_P12},
    "spare_no_premade": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto",
                         "caching_probe_premade_bytes": 0, **_P24},
    "profile": {"warmup_calls": 10, "timing_queued": True, "timing_backend": "kineto",
                "cprofile": 40, **_P24},
}
# every configuration but after_spare runs without the spare child (the spare is on by default
# since 2026-12-04), so each still measures what it measured before
_NO_SPARE = {"SOLFORGE_EVAL_SPARE": "0"}
_SPARE = {"SOLFORGE_EVAL_SPARE": "1"}
ENVS = {"before": _NO_SPARE, "after_kineto": _NO_SPARE, "after": _NO_SPARE, "after_cupti_gpu": _NO_SPARE,
        "after_one_session": _NO_SPARE, "after_spare": _SPARE, "spare_no_premade": _SPARE,
        "at_done": _SPARE, "at_done_probe12": _SPARE, "profile": _SPARE}
# the runner's own settings per configuration (run_stage's keywords): wait for the driver's exit
# but where a configuration returns at its "done"
RUNNER = {c: {"return_at_done_bytes": 8 << 30 if c.startswith("at_done") else 0} for c in CONFIGS}
TARGET_PER_MIN = 60.0


def _default_shared() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir


# ──────────────────────────────────────────── prepare (CPU) ──────────────────────────────────────
def cmd_prepare(args) -> None:
    from solforge.agents.lab import Lab
    from solforge.candidate import Candidate
    from solforge.compile import compile_candidate
    from solforge.evaluate.runner import stage_candidate
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
        best = sorted((REPO / "kernels_cuda").glob(f"*/best/{problem.name}.json"))
        if not best:
            print(f"skip {key}: no kernels_cuda/*/best/{problem.name}.json", file=sys.stderr)
            continue
        b = json.loads(best[0].read_text())
        if "candidate" in b:
            cand = Candidate.model_validate(b["candidate"])
        else:
            from solforge.kernels import get_family

            cand = get_family(b["family"]).instantiate(problem, b["params"])
        res = compile_candidate(cand, lab.arch)
        if not res.ok:
            print(f"skip {key}: compile {res.status}", file=sys.stderr)
            continue
        sized = sorted(problem.workloads, key=lambda w: sum(
            _numel(s) for s in {**w.input_shapes, **w.output_shapes}.values() if s is not None))
        keep = _spread([w.uuid for w in sized], args.max_workloads)
        name = f"{len(staged):02d}_{pdir.name}"
        job = lab.eval_job(problem)
        job["workloads"] = keep
        stage_candidate(out / "stages" / name, problem, candidate=cand, compile_result=res, job=job)
        staged.append({"stage": name, "problem": problem.name, "family": b["family"],
                       "variant": b.get("variant"), "workloads": len(keep),
                       "best_file": str(best[0].relative_to(REPO))})
        print(f"staged {name}: {b['family']} {b.get('variant')}, {len(keep)} workloads", flush=True)
    (out / "candidates.json").write_text(json.dumps(staged, indent=1))
    sys.path.insert(0, str(REPO / "tests" / "adversarial"))
    try:
        import harness

        harness.precompile(out / "adv_cubins")
    except Exception as e:  # noqa: BLE001 - the benchmark does not need them
        print(f"adversarial cubins not built: {type(e).__name__}: {e}", file=sys.stderr)
    print(f"staged {len(staged)} candidate(s) under {out}")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _spread(items: list, n: int) -> list:
    if n <= 0 or len(items) <= n:
        return list(items)
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


# ──────────────────────────────────────────── run (GPU box) ──────────────────────────────────────
def _set_config(stage: Path, config: str) -> None:
    job = json.loads((stage / "job.json").read_text())
    base = job.setdefault("_base_settings", dict(job.get("settings", {})))
    job["settings"] = {**base, **CONFIGS[config]}
    (stage / "job.json").write_text(json.dumps(job, indent=1))


def driver_broken(rep) -> str:
    """Why the driver process could not evaluate anything (it exited non-zero without a single
    workload result of its own, e.g. a missing wheel), with its last stderr line; '' when it ran."""
    if rep.exit_code in (0, None) or not rep.results or any(
            not (r.status.value == "skipped" and "the process ended" in (r.message or ""))
            for r in rep.results):
        return ""
    tail = [ln for ln in (rep.stderr_tail or "").strip().splitlines() if ln.strip()]
    return f"exit code {rep.exit_code}: {tail[-1] if tail else 'no stderr'}"


def _record(config: str, stage: Path, rep, meta: dict) -> dict:
    from solforge.evaluate.phase_totals import flat_seconds

    return {"config": config, "stage": stage.name, "problem": meta.get("problem"),
            "workloads": len(rep.results), "wall_s": round(rep.wall_s, 4), "launch": rep.launch,
            "phases": flat_seconds(rep.phases), "mode": (rep.phases or {}).get("mode"),
            "exit_code": rep.exit_code,
            "statuses": [r.status.value for r in rep.results],
            "backends": sorted({str(r.extra.get("timing_backend")) for r in rep.results}),
            # "one per workload" where Timer.batched held the workload's measurements
            "sessions": sorted({str(r.extra.get("timing_session", "one per measurement"))
                                for r in rep.results if r.median_ms is not None}),
            "median_ms": {r.workload_uuid: r.median_ms for r in rep.results},
            "profile": (rep.phases or {}).get("profile") or []}


def summarize(records: list[dict], batches: Optional[dict] = None) -> dict:
    """Per configuration: evaluations, GPU-seconds, evaluations per GPU-minute, mean seconds per
    phase per evaluation, whether every workload passed; and the per-workload time ratio of each
    configuration to `before` (the same candidate must time the same)."""
    out = {}
    for cfg in dict.fromkeys(r["config"] for r in records):
        rs = [r for r in records if r["config"] == cfg]
        # lanes: the GPU is held for the batch's wall time, whatever the evaluations overlap
        gpu_s = (batches or {}).get(cfg) or sum(r["wall_s"] for r in rs)
        names = sorted({k for r in rs for k in r["phases"]})
        out[cfg] = {"evaluations": len(rs), "gpu_seconds": round(gpu_s, 3),
                    "evals_per_gpu_minute": round(60.0 * len(rs) / gpu_s, 2) if gpu_s else None,
                    "median_wall_s": round(statistics.median(r["wall_s"] for r in rs), 3),
                    "mean_workloads": round(statistics.mean(r["workloads"] for r in rs), 1),
                    "phase_s_per_eval": {k: round(sum(r["phases"].get(k, 0.0) for r in rs) / len(rs), 4)
                                         for k in names},
                    "all_passed": all(set(r["statuses"]) == {"passed"} for r in rs),
                    "backends": sorted({b for r in rs for b in r.get("backends", [])}),
                    "sessions": sorted({x for r in rs for x in r.get("sessions", [])})}
    before = {}
    for r in records:
        if r["config"] == "before":
            for u, ms in r["median_ms"].items():
                if ms:
                    before.setdefault((r["stage"], u), []).append(ms)
    for cfg, s in out.items():
        ratios = []
        for r in records:
            if r["config"] != cfg:
                continue
            for u, ms in r["median_ms"].items():
                b = before.get((r["stage"], u))
                if ms and b:
                    ratios.append(ms / statistics.median(b))
        s["median_time_ratio_vs_before"] = round(statistics.median(ratios), 4) if ratios else None
    return out


PHASE_ORDER = ("launch", "cuda_init", "hardware", "load", "inputs", "reference", "gpu_wait", "checks",
               "timing_warmup", "timing_profile", "teardown", "imports")


def render(doc: dict) -> str:
    sm = doc.get("summary", {})
    names = [p for p in PHASE_ORDER if any(p in s["phase_s_per_eval"] for s in sm.values())]
    out = ["# Evaluations per GPU-minute on the H200", "",
           f"Command: `{doc.get('command', '?')}` on {doc.get('gpu', '?')} (torch "
           f"{doc.get('torch', '?')}), {doc.get('started', '?')}. Candidates: the best/ kernel of "
           f"{', '.join(m['problem'] for m in doc.get('candidates', []))}; each evaluation a fresh "
           "process (zygote fork) with every guard, the caching probe and the post-timing re-check.",
           "", "GPU-seconds = RunReport.wall_s (attempts.gpu_seconds), summed; for a lanesN "
           "configuration the batch's wall time (N evaluations at a time hold the GPU throughout). Target: "
           f">= {TARGET_PER_MIN:.0f} evaluations per GPU-minute.", "",
           "| config | evaluations | workloads (mean) | GPU-s | evals / GPU-minute | median s | "
           "all passed | time vs before (median ratio) | CUPTI backend | profiler sessions |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for cfg, s in sm.items():
        out.append(f"| {cfg} | {s['evaluations']} | {s['mean_workloads']} | {s['gpu_seconds']} | "
                   f"**{s['evals_per_gpu_minute']}** | {s['median_wall_s']} | {s['all_passed']} | "
                   f"{s.get('median_time_ratio_vs_before')} | {', '.join(s.get('backends', []))} | "
                   f"{', '.join(s.get('sessions', [])) or '-'} |")
    out += ["", "Seconds per evaluation by phase (exclusive: nested phases are not counted twice; "
            "`total` is the runner's wall time):", "",
            "| config | " + " | ".join(names) + " | total |",
            "|---|" + "---|" * (len(names) + 1)]
    for cfg, s in sm.items():
        ph = s["phase_s_per_eval"]
        out.append(f"| {cfg} | " + " | ".join(f"{ph.get(n, 0.0):.3f}" for n in names)
                   + f" | {ph.get('total', 0.0):.3f} |")
    out += _render_profile(doc.get("records", []))
    return "\n".join(out) + "\n"


def profile_table(records: list[dict], top: int = 25) -> list[dict]:
    """The cProfile rows of the evaluations that carry them, summed per function and divided by
    those evaluations: own and cumulative seconds and calls per evaluation, most own time first."""
    rs = [r for r in records if r.get("profile")]
    acc: dict[str, list[float]] = {}
    for r in rs:
        for row in r["profile"]:
            a = acc.setdefault(row["func"], [0.0, 0.0, 0.0])
            a[0] += row["own_s"]
            a[1] += row["cum_s"]
            a[2] += row["calls"]
    n = max(len(rs), 1)
    rows = [{"func": f, "own_s": o / n, "cum_s": c / n, "calls": k / n} for f, (o, c, k) in acc.items()]
    return sorted(rows, key=lambda x: -x["own_s"])[:top]


def _render_profile(records: list[dict]) -> list[str]:
    rows = profile_table(records)
    if not rows:
        return []
    n = sum(1 for r in records if r.get("profile"))
    out = ["", f"Python functions of most own time per evaluation (cProfile in the driver's workload loop, "
           f"{n} evaluations of the `profile` configuration; a function outside an evaluation's top 40 "
           "counts 0 there):", "", "| function | own s | cumulative s | calls |", "|---|---|---|---|"]
    out += [f"| `{r['func']}` | {r['own_s']:.4f} | {r['cum_s']:.4f} | {r['calls']:.0f} |" for r in rows]
    return out


def cmd_run(args) -> None:
    from solforge.evaluate import runner

    d = Path(args.dir)
    meta = {m["stage"]: m for m in json.loads((d / "candidates.json").read_text())}
    stages = [d / "stages" / s for s in meta][: args.limit or None]
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs + ([args.lanes_config] if args.lanes_config else []) if c not in CONFIGS]
    if bad:
        raise SystemExit(f"unknown config(s) {bad}; known: {sorted(CONFIGS)}")
    dest = Path(args.out or os.environ.get("OUT") or REPO / "data" / "results" / "eval_throughput")
    dest.mkdir(parents=True, exist_ok=True)
    doc = {"command": " ".join(["python3", "benchmarks/eval_throughput.py", *sys.argv[1:]]),
           "host": os.uname().nodename, "records": [], "candidates": list(meta.values()),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "configs": CONFIGS}
    try:
        import torch

        doc["torch"] = torch.__version__
        doc["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    except Exception:  # noqa: BLE001
        pass
    try:
        from cupti import cupti  # noqa: F401

        doc["cupti_python"] = "imports"
    except Exception as e:  # noqa: BLE001
        doc["cupti_python"] = f"missing ({type(e).__name__}): the after config reads CUPTI by kineto"

    def save():
        doc["summary"] = summarize(doc["records"], doc.get("batches"))
        (dest / "eval_throughput.json").write_text(json.dumps(doc, indent=1, default=str))
        (dest / "eval_throughput.md").write_text(render(doc))

    doc["zygote"] = runner.prestart(wait=True)
    # one untimed evaluation first: the first child after the zygote starts pays page-ins that
    # would land on whichever configuration ran first
    if stages:
        _set_config(stages[0], configs[-1])
        first = runner.run_stage(stages[0], timeout_s=args.timeout, env=ENVS[configs[-1]])
        broken = driver_broken(first)
        if broken:  # every evaluation would stop the same way: say so instead of timing failures
            raise SystemExit(f"the evaluator's driver does not run here: {broken}")
    t0 = time.time()
    for rnd in range(args.repeat):
        for i, s in enumerate(stages):
            order = configs if (rnd + i) % 2 == 0 else configs[::-1]
            for cfg in order:
                if time.time() - t0 > args.deadline_s:
                    break
                _set_config(s, cfg)
                rep = runner.run_stage(s, timeout_s=args.timeout, env=ENVS[cfg], **RUNNER[cfg])
                rec = _record(cfg, s, rep, meta[s.name])
                doc["records"].append(rec)
                save()
                print(f"{cfg:<13} {s.name:<58} {rec['wall_s']:6.2f} s  {rep.launch:<6} "
                      f"{sorted(set(rec['statuses']))} {rec['backends']}", flush=True)
    if args.lanes > 1:  # past the deadline too: it is what the run is for
        _run_lanes(args, stages, meta, doc, save, args.lanes_config or configs[-1])
    save()
    print(render(doc))


def _run_lanes(args, stages: list, meta: dict, doc: dict, save, base: str) -> None:
    """`args.repeat` passes over the stages, `args.lanes` evaluations at a time, each on a copy of
    its stage (a run writes into its stage), sharing the GPU through gpu_share as optimize's lanes
    do. Records the batch's wall time as the configuration's GPU-seconds."""
    import concurrent.futures as cf

    from solforge.evaluate import gpu_share, runner

    cfg = f"lanes{args.lanes}_{base}"
    lock = str((Path(args.dir) / "gpu_share.lock").resolve())  # the child runs elsewhere
    env = {**ENVS[base], gpu_share.ENV: lock}
    jobs = []
    for rnd in range(args.repeat):
        for s in stages:
            copy = Path(args.dir) / "lane_stages" / f"{s.name}.{rnd}"
            if copy.exists():
                shutil.rmtree(copy)
            shutil.copytree(s, copy)
            _set_config(copy, base)
            jobs.append((s, copy))

    def one(job):
        s, copy = job
        rep = runner.run_stage(copy, timeout_s=args.timeout, wall_cap_s=args.timeout * args.lanes,
                               env=env)
        return _record(cfg, s, rep, meta[s.name])

    t_start = time.monotonic()
    with cf.ThreadPoolExecutor(args.lanes) as ex:
        for rec in ex.map(one, jobs):
            doc["records"].append(rec)
            print(f"{cfg:<13} {rec['stage']:<58} {rec['wall_s']:6.2f} s  {rec['launch']:<6} "
                  f"{sorted(set(rec['statuses']))} {rec['backends']}", flush=True)
    doc.setdefault("batches", {})[cfg] = round(time.monotonic() - t_start, 3)
    save()


def cmd_report(args) -> None:
    doc = json.loads(Path(args.json).read_text())
    doc["summary"] = summarize(doc["records"], doc.get("batches"))
    print(render(doc))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS), help="SUBSET/NAME,...")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per workload (optimize's)")
    p.add_argument("--max-workloads", type=int, default=16)
    p.add_argument("--shared", default=str(_default_shared()))
    p.add_argument("--dir", default=str(REPO / ".carry" / "throughput"))
    p.set_defaults(func=cmd_prepare)
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "throughput"))
    r.add_argument("--configs", default="before,after_kineto,after")
    r.add_argument("--repeat", type=int, default=3, help="passes over all stages")
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--deadline-s", type=float, default=480.0,
                   help="start no evaluation after this many seconds (one device call is 600 s)")
    r.add_argument("--lanes", type=int, default=0,
                   help="then the last of --configs again, this many evaluations at a time")
    r.add_argument("--lanes-config", default="",
                   help="the configuration the lanes pass runs (default: the last of --configs)")
    r.add_argument("--out")
    r.set_defaults(func=cmd_run)
    g = sub.add_parser("report")
    g.add_argument("json")
    g.set_defaults(func=cmd_report)
    a = ap.parse_args(argv)
    a.func(a)


if __name__ == "__main__":
    main()
