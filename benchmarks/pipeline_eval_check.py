#!/usr/bin/env python3
"""Does the optimize pipeline's own evaluation pass a kernel family's first guess? (not the bench)

The optimize loop stages a candidate with Lab.eval_job (correctness rounds,
reps, SOL-floor guard with the roofline's T_sol, blob roots) and runs evaluate.runner.run_stage
(driver: custom inputs, FP4 shim, poisoned outputs, CUPTI timing, caching probe). This stages
exactly that for each named problem, on the CPU, and runs it on the GPU box:

    prepare (CPU)  .venv/bin/python benchmarks/pipeline_eval_check.py prepare --dir .carry/pipe --problems Quant/032_nvfp4_moe_expert_linear_with_gating
                   (--variants N: the family's first N param points per problem, default 1: the first guess)
    run     (GPU)  python3 benchmarks/pipeline_eval_check.py run --dir .carry/pipe --out $OUT/pipe

`run` prints one line per workload (status, median ms, T_sol, message) and writes OUT/pipeline_eval.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir


def cmd_prepare(a) -> None:
    from solforge.agents.lab import Lab, static_check
    from solforge.compile import compile_candidate
    from solforge.evaluate.runner import stage_candidate
    from solforge.kernels import families_for, get_family
    from solforge.problem import load_problem_dir

    out = Path(a.dir)
    shutil.rmtree(out, ignore_errors=True)
    lab, staged = Lab(has_gpu=False), []
    for key in a.problems.split(","):
        pdir = Path(a.shared) / "sol_execbench" / key
        problem = load_problem_dir(pdir, subset=pdir.parent.name)
        # --family: a family not (or no longer) offered, for the check that would open it
        fams = [get_family(a.family)] if a.family else families_for(problem)
        if not fams or not fams[0].matches(problem):
            raise SystemExit(f"{key}: no kernel family is offered for it (or --family does not serve it)")
        fam = fams[0]
        # the offline worker's first guess, then (--variants) the next points of the space
        for params in fam.param_space(problem)[:a.variants]:
            cand = fam.instantiate(problem, params)
            why = static_check(problem, cand)
            if why:
                raise SystemExit(f"{key}: the loop's static check rejects it: {why}")
            res = compile_candidate(cand, lab.arch)
            if not res.ok:
                raise SystemExit(f"{key}: compile {res.status.value}: {res.log[-1500:]}")
            job = lab.eval_job(problem)
            job.pop("blob_roots", None)   # the box has no shared data; absent blobs are synthesized
            name = f"{len(staged):02d}_{pdir.name}"
            stage_candidate(out / name, problem, candidate=cand, compile_result=res, job=job)
            staged.append({"stage": name, "problem": problem.name, "family": fam.name, "params": params,
                           "t_sol_ms": job["t_sol_ms"]})
    (out / "staged.json").write_text(json.dumps(staged, indent=1))
    print(f"staged {len(staged)} candidate(s) under {out}")


def cmd_run(a) -> None:
    from solforge.evaluate import runner

    d = Path(a.dir)
    dest = Path(a.out or os.environ.get("OUT") or ".")
    dest.mkdir(parents=True, exist_ok=True)
    records = []
    staged = json.loads((d / "staged.json").read_text())
    if a.stages:   # this order, these only (stage-name prefixes such as 00,02,01)
        staged = [next(m for m in staged if m["stage"].startswith(k)) for k in a.stages.split(",")]
    for m in staged:
        t0 = time.time()
        rep = runner.run_stage(d / m["stage"], timeout_s=a.timeout)
        rows = [{"uuid": r.workload_uuid, "status": r.status.value, "median_ms": r.median_ms,
                 "t_sol_ms": m["t_sol_ms"].get(r.workload_uuid), "timing": r.timing_method,
                 "guard": r.guard, "reference": r.reference_label,
                 "message": (r.message or "")[:300]} for r in rep.results]
        records.append({**m, "wall_s": round(time.time() - t0, 2), "launch": rep.launch,
                        "exit_code": rep.exit_code, "workloads": rows})
        (dest / "pipeline_eval.json").write_text(json.dumps(records, indent=1, default=str))
        ok = sum(w["status"] == "passed" for w in rows)
        print(f"{m['problem']} {m['family']} {m['params']}: {rep.launch} exit {rep.exit_code} "
              f"{records[-1]['wall_s']} s, passed {ok} of {len(rows)}", flush=True)
        for w in rows:
            print(f"  {w['uuid'][:8]} {w['status']:<10} {w['median_ms'] or 0:9.4f} ms  T_sol "
                  f"{w['t_sol_ms'] or 0:8.4f}  {w['timing'] or ''} {w['message'][:120]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dir", default=str(REPO / ".carry" / "pipe"))
    p.add_argument("--problems", required=True, help="comma-separated SUBSET/NAME")
    p.add_argument("--shared", default=str(_shared_dir()))
    p.add_argument("--family", default="", help="use this family even if the search is not offered it")
    p.add_argument("--variants", type=int, default=1, help="stage the first N param points per problem")
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "pipe"))
    r.add_argument("--out", default="")
    r.add_argument("--timeout", type=float, default=120.0)
    r.add_argument("--stages", default="", help="comma-separated stage-name prefixes: run these, in this order")
    a = ap.parse_args()
    {"prepare": cmd_prepare, "run": cmd_run}[a.cmd](a)


if __name__ == "__main__":
    main()
