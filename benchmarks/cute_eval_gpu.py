"""A CuTe DSL candidate through the isolated evaluator on a GPU box that has no CuTe DSL.

The DSL (nvidia-cutlass-dsl) is installed only on the CPU machine. Here it compiles the candidate to a
cubin and writes it where the box's compile step finds it (solforge.compile.cute_prebuilt); on the
box, `evaluate_candidate` (what `solforge evaluate` and the optimize loop call) compiles the same
candidate, which the cute worker answers from the precompiled folder, stages it and runs the spawned
driver (`python -m solforge.evaluate.driver STAGE`). The CUDA C++ RMSNorm candidate of the same
problem runs the same way, for comparison.

  # 1. here (CPU, with the DSL): one problem -> a carry folder (~100 KB)
  python benchmarks/cute_eval_gpu.py prepare \
      --problem ../shared/sol_execbench/FlashInfer-Bench/023_rmsnorm_h1536 --out .carry/cute_eval

  # 2. on the H200 (pydantic from .whl; the cccl wheel for the CUDA C++ candidate's NVRTC compile):
  python3 benchmarks/cute_eval_gpu.py check --dir .carry/cute_eval --out $OUT/cute_eval.json

  # for the optimize loop on a DSL-less box: precompile every point of the CuTe families' spaces
  python benchmarks/cute_eval_gpu.py prebuild --out .carry/cute_prebuilt PROBLEM_DIR...
  # and on the box: export SOLFORGE_CUTE_PREBUILT=$PWD/.carry/cute_prebuilt
  # (every CuTe compile here also lands in <cache_dir>/cute_prebuilt: carrying that folder works too)

`check` writes, per candidate: the compile log (for CuTe it names the precompiled cubin), the cubin
hash (equal to the one compiled here), each workload's EvalResult, T_sol (H200 roofline, counted here),
T_b (data/results/baselines/baselines_h200.csv: min(eager, torch.compile) measured on the H200), SOL score and
speedup, and their geomeans over the problem. It also runs the staged folder written here (candidate,
manifest, cubin, problem, job) straight through runner.run_stage, with no compile step at all.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BASELINES = REPO / "data" / "results" / "baselines" / "baselines_h200.csv"


def _best_params(family, problem_name: str) -> dict | None:
    f = family.family_dir / "best" / f"{problem_name}.json"
    if not f.is_file():
        return None
    return json.loads(f.read_text()).get("params")


def candidates_for(problem) -> dict:
    """{"cute": Candidate, "cuda": Candidate} for an RMSNorm problem: each family's measured best
    params (kernels_*/rmsnorm/best/<problem>.json) where there is one, else its first guess."""
    from solforge.kernels import get_family

    out = {}
    for lang, name in (("cute", "cute_rmsnorm"), ("cuda", "rmsnorm")):
        fam = get_family(name)
        if not fam.matches(problem):
            raise SystemExit(f"{problem.name}: family {name} does not serve this problem")
        params = _best_params(fam, problem.name) or fam.default_params(problem)
        out[lang] = fam.instantiate(problem, params)
    return out


def t_sol_h200(problem) -> dict:
    from solforge.agents.roofline_adapter import workload_sols

    return {s.uuid: s.t_sol_ms for s in workload_sols(problem, "h200") if s.t_sol_ms is not None}


def t_b_h200(problem_name: str) -> dict:
    with open(BASELINES) as f:
        return {r["workload_uuid"]: float(r["T_b_ms"]) for r in csv.DictReader(f)
                if r["problem"] == problem_name and r["T_b_ms"]}


def cmd_prepare(args) -> int:
    from solforge import settings
    from solforge.compile.api import compile_candidate
    from solforge.compile.cute_prebuilt import write_prebuilt
    from solforge.evaluate.runner import stage_candidate
    from solforge.problem import load_problem_dir

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    problem = load_problem_dir(args.problem)
    shutil.copytree(args.problem, out / "problem")
    cands = candidates_for(problem)
    index = {"problem": problem.name, "subset": problem.subset, "arch": args.arch,
             "commit": _git_head(), "candidates": {}}
    cfg = settings.get()
    for lang, cand in cands.items():
        t0 = time.perf_counter()
        res = compile_candidate(cand, args.arch, use_cache=False)
        if not res.ok:
            raise SystemExit(f"{lang} candidate does not compile:\n{res.log}")
        (out / f"{lang}.json").write_text(json.dumps(cand.model_dump(), indent=1))
        info = {"params": cand.params, "notes": cand.notes, "compiler": res.compiler_version,
                "cubin_hash": res.cubin_hash, "compile_s": round(time.perf_counter() - t0, 2)}
        if lang == "cute":
            info["prebuilt"] = str(write_prebuilt(out / "prebuilt", cand, res).relative_to(out))
            job = {"problem": problem.name, "workloads": [w.uuid for w in problem.workloads],
                   "t_sol_ms": {}, "settings": {"correctness_rounds": cfg.correctness_rounds,
                                                "rep_count": cfg.rep_count,
                                                "warmup_ms": cfg.warmup_ms,
                                                "sol_floor_fraction": cfg.sol_floor_fraction,
                                                "timing": True}}
            stage_candidate(out / "stage_cute", problem, candidate=cand, compile_result=res, job=job)
        index["candidates"][lang] = info
        print(f"{lang}: {cand.params} compiled in {info['compile_s']} s ({res.compiler_version}), "
              f"cubin {res.cubin_hash[:12]}")
    t_sol = t_sol_h200(problem)
    (out / "t_sol.json").write_text(json.dumps(t_sol, indent=1))
    (out / "t_b.json").write_text(json.dumps(t_b_h200(problem.name), indent=1))
    # the stage written above gets the SOL floor guard's T_sol too
    job_path = out / "stage_cute" / "job.json"
    job = json.loads(job_path.read_text())
    job["t_sol_ms"] = t_sol
    job_path.write_text(json.dumps(job, indent=1))
    (out / "index.json").write_text(json.dumps(index, indent=1))
    print(f"-> {out} ({sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) // 1024} KB)")
    return 0


def cmd_prebuild(args) -> int:
    """Every point of every CuTe family's space for these problems, compiled and precompiled."""
    from solforge.compile.api import compile_candidate
    from solforge.compile.cute_prebuilt import write_prebuilt
    from solforge.kernels import families_for
    from solforge.problem import load_problem_dir

    n = bad = 0
    for d in args.problems:
        problem = load_problem_dir(d)
        for fam in families_for(problem):
            if fam.language != "cute":
                continue
            for params in list(fam.param_space(problem))[: args.max_space]:
                cand = fam.instantiate(problem, params)
                res = compile_candidate(cand, args.arch)
                if res.ok:
                    write_prebuilt(args.out, cand, res)
                    n += 1
                else:
                    bad += 1
                print(f"{problem.name} {fam.name} {params}: {res.status.value}", flush=True)
    print(f"{n} precompiled into {args.out}, {bad} failed")
    return 0 if not bad else 1


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def _scores(results: list, t_sol: dict, t_b: dict) -> tuple[list, dict]:
    from solforge.roofline.score import geomean, problem_sol_score, problem_speedup, sol_score, speedup

    rows, sols, sps = [], [], []
    for r in results:
        ts, tb, tk = t_sol.get(r.workload_uuid), t_b.get(r.workload_uuid), r.median_ms
        s = sol_score(tk, tb, ts) if r.passed else None
        sp = speedup(tb, tk) if r.passed else None
        sols.append(s)
        sps.append(sp)
        rows.append({"workload": r.workload_uuid, "status": r.status.value, "median_ms": tk,
                     "spread": r.spread, "n_reps": r.n_reps, "max_abs_err": r.max_abs_err,
                     "t_sol_ms": ts, "t_b_ms": tb, "sol_score": s, "speedup": sp,
                     "message": r.message[:300]})
    return rows, {"passed": sum(r.passed for r in results), "workloads": len(results),
                  "sol_score_geomean": problem_sol_score(sols), "speedup_geomean": problem_speedup(sps),
                  "median_ms_geomean": geomean([r.median_ms for r in results])}


def cmd_check(args) -> int:
    import importlib.util

    d = Path(args.dir).resolve()
    # The box's compile step: the cute worker finds the precompiled cubin here (no DSL on the box).
    os.environ["SOLFORGE_CUTE_PREBUILT"] = str(d / "prebuilt")
    os.environ.setdefault("SOLFORGE_CACHE_DIR", tempfile.mkdtemp(prefix="sf-cache-"))
    from solforge.candidate import Candidate
    from solforge.evaluate.api import evaluate_candidate
    from solforge.evaluate.runner import run_stage
    from solforge.problem import load_problem_dir

    index = json.loads((d / "index.json").read_text())
    problem = load_problem_dir(d / "problem")
    t_sol = json.loads((d / "t_sol.json").read_text())
    t_b = json.loads((d / "t_b.json").read_text())
    report_all = {"problem": problem.name, "cute_dsl_importable_here":
                  importlib.util.find_spec("cutlass") is not None, "prepared": index, "runs": {}}
    ok = True
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def save():  # after every run: a run cut short by a time limit keeps what finished
        Path(args.out).write_text(json.dumps(report_all, indent=1, default=str))

    for lang in ("cute", "cuda"):
        cand = Candidate.model_validate_json((d / f"{lang}.json").read_text())
        t0 = time.perf_counter()
        report, cr = evaluate_candidate(problem, cand, t_sol_ms=t_sol, timeout_s=args.timeout_s)
        rows, summary = _scores(report.results, t_sol, t_b)
        run = {"path": "solforge.evaluate.api.evaluate_candidate (= `solforge evaluate`): compile, "
                       "stage, spawned driver",
               "compile": {"status": cr.status.value, "log": cr.log[:600], "options": cr.options,
                           "cubin_hash": cr.cubin_hash,
                           "cubin_hash_equals_cpu_compile":
                               cr.cubin_hash == index["candidates"][lang]["cubin_hash"]},
               "wall_s": round(time.perf_counter() - t0, 1), "exit_code": report.exit_code,
               "summary": summary, "workloads": rows,
               "hardware": report.hardware.__dict__ if report.hardware else None,
               "stderr_tail": report.stderr_tail[-800:] if not report.all_passed else ""}
        report_all["runs"][lang] = run
        save()
        ok &= report.all_passed
        print(f"{lang}: compile {cr.status.value} ({cr.log[:160]!r}); {summary}", flush=True)
        for r in rows:
            print(f"  {r['workload'][:8]} {r['status']:8} {r['median_ms']} ms  T_b {r['t_b_ms']}  "
                  f"T_sol {r['t_sol_ms']}  S {r['sol_score']}", flush=True)
    # The staged folder written on the CPU machine, run as is: no compile step on the box at all.
    stage = Path(tempfile.mkdtemp(prefix="sf-stage-")) / "stage_cute"
    shutil.copytree(d / "stage_cute", stage)
    t0 = time.perf_counter()
    rep = run_stage(stage, timeout_s=args.timeout_s)
    rows, summary = _scores(rep.results, t_sol, t_b)
    report_all["runs"]["cute_prestaged"] = {
        "path": "runner.run_stage on the folder staged on the CPU machine (candidate.json, "
                "manifest.json, cubin, definition, workloads, job.json)",
        "wall_s": round(time.perf_counter() - t0, 1), "exit_code": rep.exit_code, "summary": summary,
        "workloads": rows, "stderr_tail": rep.stderr_tail[-800:] if not rep.all_passed else ""}
    ok &= rep.all_passed
    print(f"cute (pre-staged): {summary}", flush=True)
    save()
    print("ALL PASSED" if ok else "SOME FAILED")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--problem", required=True, help="a SOL-ExecBench RMSNorm problem folder")
    p.add_argument("--out", required=True)
    p.add_argument("--arch", default="sm_90a")
    b = sub.add_parser("prebuild")
    b.add_argument("--out", required=True)
    b.add_argument("--arch", default="sm_90a")
    b.add_argument("--max-space", type=int, default=24, help="points per family (the offline "
                   "worker tries at most its MAX_SPACE)")
    b.add_argument("problems", nargs="+")
    c = sub.add_parser("check")
    c.add_argument("--dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--timeout-s", type=float, default=120)
    args = ap.parse_args()
    return {"prepare": cmd_prepare, "prebuild": cmd_prebuild, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
