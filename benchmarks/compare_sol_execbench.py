"""NVIDIA's own SOL-ExecBench evaluator side by side with solforge's, on solforge's exported
solution.json files (issues #3 and #10).

Three steps, because the GPU box has no DuckDB, no dataset and no pydantic:

  # 1. here (CPU): export the best kernels (kernels_cuda/<family>/best/<problem>.json) as official
  #    solution.json files, plus one deliberately wrong solution; copy the problems; validate every
  #    solution.json with NVIDIA's own pydantic models and CLI loaders (their source, never ours)
  git -C /work/.mirror/NVIDIA+SOL-ExecBench/repo archive HEAD src pyproject.toml LICENSE \
      | tar -x -C .carry/sxb/repo
  pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .carry/sxb/whl \
      cupti-python==13.0.1 nvidia-cuda-cccl==13.0.85    # cccl: solforge's NVRTC headers
  .venv/bin/python benchmarks/compare_sol_execbench.py prepare --out .carry/sxb/cases

  # 2. on the H200 (device run; carry .whl and .carry/sxb):
  python3 benchmarks/compare_sol_execbench.py run --cases .carry/sxb/cases --sxb .carry/sxb/repo \
      --wheels .whl .carry/sxb/whl --out $OUT

  #    (--only nvidia / --only solforge run one side; then, here:
  #     benchmarks/compare_sol_execbench.py merge --nvidia A.json --solforge B.json --out DIR --notes N.md)
  # 3. here: render the markdown again from the JSON (run writes both)
  .venv/bin/python benchmarks/compare_sol_execbench.py render data/results/sol_execbench_compare/sol_execbench_compare_h200.json

`run` installs the wheels into /tmp/site, starts NVIDIA's CLI (`sol-execbench PROBLEM_DIR --solution
solution.json -o traces.jsonl`, i.e. sol_execbench.cli:cli, unmodified) for every case at once, so
that their nvcc builds overlap, and runs solforge's evaluator (solforge.evaluate.api.evaluate_candidate)
on the same candidates and workloads meanwhile. The GPU phases never overlap: their CLI runs its
evaluation as `python eval_driver.py` through PATH, and a `python` shim put first on PATH takes an
exclusive file lock for that process; solforge's evaluations take the same lock. Their build step
(`python build_ext.py`) runs without the lock. No clock locking (no --lock-clocks).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir

# (case, subset, problem, kernels_cuda family folder, how to break it or None)
CASES = [
    ("069_rms_norm", "L1", "069_rms_norm", "rmsnorm", None),
    ("085_geglu_activation", "L1", "085_geglu_activation", "elementwise", None),
    ("004_gemm_n128_k2048", "FlashInfer-Bench", "004_gemm_n128_k2048", "gemm", None),
    ("025_rmsnorm_h4096", "FlashInfer-Bench", "025_rmsnorm_h4096", "rmsnorm", None),
    ("WRONG_069_rms_norm_eps", "L1", "069_rms_norm", "rmsnorm", "eps=0.5"),
]
MAX_WORKLOADS = 6          # per problem, spread from smallest to largest, to fit the device minutes
MAX_WORKLOADS_WRONG = 3
GPU_LOCK = "/tmp/sxb_gpu.lock"

SHIM = """#!{python}
# `python` for NVIDIA's CLI: their evaluation step (eval_driver.py) holds an exclusive lock on the GPU
import fcntl, os, sys
args = sys.argv[1:]
if args and os.path.basename(args[0]) == "eval_driver.py":
    fd = os.open({lock!r}, os.O_CREAT | os.O_RDWR, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.set_inheritable(fd, True)  # the lock lives as long as the exec'd process keeps the fd
os.execv({python!r}, [{python!r}, *args])
"""


# ----------------------------------------------------------------------------------------- prepare
def _spread(items: list, n: int) -> list:
    if len(items) <= n:
        return list(items)
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def _break(cand, how: str):
    """A deliberately wrong candidate: the rmsnorm kernel given eps=0.5 instead of the problem's eps."""
    assert how == "eps=0.5"
    launches = []
    for l in cand.launches:
        args = ["float32:0.5" if a == "float32:eps" else a for a in l.args]
        assert args != l.args, "no eps argument to break"
        launches.append(l.model_copy(update={"args": args}))
    return cand.model_copy(update={"launches": launches,
                                   "notes": "DELIBERATELY WRONG: eps=0.5 instead of the input eps"})


def _baselines(path: Path) -> dict:
    out = {}
    if path.exists():
        with path.open() as f:
            for r in csv.DictReader(f):
                out[(r["problem"], r["workload_uuid"])] = r
    return out


def nvidia_check(sxb_src: Path, case_dir: Path) -> dict:
    """Their pydantic models and CLI loaders (imported from their source) on one case."""
    sys.path.insert(0, str(sxb_src))
    from sol_execbench.cli import main as cli_main  # noqa: E402  (their code)
    from sol_execbench.driver import ProblemPackager
    from sol_execbench.core import BenchmarkConfig

    sol_path = case_dir / "solution" / "solution.json"
    sol = cli_main._load_solution(sol_path)
    defn = cli_main._load_definition(case_dir / "problem" / "definition.json")
    wls = cli_main._load_workloads(case_dir / "problem" / "workload.jsonl")
    stage = case_dir / "_stage_check"
    pk = ProblemPackager(definition=defn, workloads=wls, solution=sol, config=BenchmarkConfig(),
                         output_dir=stage, keep_output_dir=False)
    cmd, _ = pk.compile()
    staged = json.loads((stage / "solution.json").read_text())
    top_cu = sorted(p.name for p in stage.iterdir() if p.suffix == ".cu")
    res = {"solution": sol.name, "definition_matches": sol.definition == defn.name,
           "entry": sol.spec.entry_point, "is_cpp": pk._is_cpp, "compile_cmd": cmd,
           "staged_cuda_cflags": staged["spec"]["compile_options"]["cuda_cflags"],
           "staged_top_level_cu": top_cu, "workloads": len(wls)}
    del pk
    shutil.rmtree(stage, ignore_errors=True)
    return res


def cmd_prepare(args) -> int:
    from solforge.export import ExportAttempt
    from solforge.export.solution import write_solution
    from solforge.kernels import get_family
    from solforge.problem import load_problem_dir

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    base = _baselines(REPO / "data" / "results" / "baselines" / "baselines_h200.csv")
    index = []
    for case, subset, prob, famdir, how in CASES:
        src = Path(args.problems_root) / subset / prob
        p = load_problem_dir(src, subset)
        best = json.loads((REPO / "kernels_cuda" / famdir / "best" / f"{prob}.json").read_text())
        cand = get_family(best["family"]).instantiate(p, best["params"])
        if how:
            cand = _break(cand, how)
        d = out / case
        (d / "problem").mkdir(parents=True)
        for f in ("reference.py", "b200_reference.json"):
            if (src / f).exists():
                shutil.copy(src / f, d / "problem" / f)
        # The shared copy's FlashInfer-Bench definitions carry "hf_id": "", which NVIDIA's own
        # Definition model rejects (Optional[NonEmptyString]): their CLI would refuse the problem.
        # Dropping the empty key is the only change made to a problem file.
        defn_json = json.loads((src / "definition.json").read_text())
        patched = []
        if defn_json.get("hf_id") == "":
            del defn_json["hf_id"]
            patched.append('hf_id "" removed')
        (d / "problem" / "definition.json").write_text(json.dumps(defn_json, indent=4) + "\n")
        lines = [ln for ln in (src / "workload.jsonl").read_text().splitlines() if ln.strip()]
        # spread over sizes: order by total input+output elements, keep the file's own lines
        by_uuid = {json.loads(ln)["uuid"]: ln for ln in lines}
        sized = sorted(p.workloads, key=lambda w: sum(math.prod(s) for s in
                                                      {**w.input_shapes, **w.output_shapes}.values()
                                                      if s is not None))
        keep = _spread([w.uuid for w in sized], MAX_WORKLOADS_WRONG if how else MAX_WORKLOADS)
        (d / "problem" / "workload.jsonl").write_text("\n".join(by_uuid[u] for u in keep) + "\n")
        att = ExportAttempt(attempt_id=f"kernels_cuda-{best['variant'].replace(':', '-')}-"
                                       f"{cand.source_hash()[:12]}",
                            problem_name=p.name, definition=p.definition, candidate=cand)
        sol = write_solution(att, d / "solution", name=f"solforge_{case.lower()}")
        (d / "candidate.json").write_text(cand.model_dump_json(indent=1))
        check = nvidia_check(Path(args.sxb) / "src", d)
        b200 = {}
        if (src / "b200_reference.json").exists():
            b200 = json.loads((src / "b200_reference.json").read_text())
        wl_meta = []
        for u in keep:
            w = next(w for w in p.workloads if w.uuid == u)
            row = base.get((p.name, u), {})
            wl_meta.append({"uuid": u, "axes": dict(w.axes),
                            "our_eager_ms": _f(row.get("eager_ms")),
                            "our_compile_ms": _f(row.get("compile_ms")),
                            "our_T_b_ms": _f(row.get("T_b_ms"))})
        index.append({"case": case, "subset": subset, "problem": p.name, "wrong": how,
                      "family": best["family"], "variant": best["variant"], "params": best["params"],
                      "solution": str(sol.relative_to(out)), "nvidia_schema_check": check,
                      "definition_patched": patched,
                      "workloads": wl_meta, "b200_reference_keys": sorted(b200)[:10]})
        print(f"{case}: {len(keep)} workloads, solution {sol} accepted by NVIDIA's models "
              f"({check['entry']}, staged .cu {check['staged_top_level_cu']})", flush=True)
    # solforge's evaluator runs on the box from this commit's solforge/, not from the working tree
    # (other work in progress there must not change what is compared)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    snap = out / "solforge_head"
    snap.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", head, "solforge"], check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(snap)], input=arch, check=True)
    (out / "index.json").write_text(json.dumps(index, indent=1))
    (out / "meta.json").write_text(json.dumps({"solforge_commit": head}))
    return 0


def _f(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------- run
def _install(wheel_dirs: list[str], site: Path) -> None:
    wheels = sorted(str(w) for d in wheel_dirs for w in Path(d).glob("*.whl"))
    if not wheels:
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site), *wheels],
                   check=True)


def _env(site: Path, sxb_src: Path, shim_dir: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{shim_dir}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(sxb_src),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    stubs = Path("/usr/local/cuda/lib64/stubs")
    if stubs.is_dir():  # -lcuda at link time, should a solution ask for it
        env["LIBRARY_PATH"] = f"{stubs}:{env.get('LIBRARY_PATH', '')}"
    return env


def _solforge_eval(case_dir: Path, entry: dict) -> dict:
    import fcntl

    from solforge.candidate import Candidate
    from solforge.evaluate.api import evaluate_candidate
    from solforge.problem import load_problem_dir

    p = load_problem_dir(case_dir / "problem", entry["subset"])
    cand = Candidate.model_validate_json((case_dir / "candidate.json").read_text())
    fd = os.open(GPU_LOCK, os.O_CREAT | os.O_RDWR, 0o666)
    t0 = time.time()
    fcntl.flock(fd, fcntl.LOCK_EX)
    waited = time.time() - t0
    try:
        report, cr = evaluate_candidate(p, cand, workloads=[w["uuid"] for w in entry["workloads"]],
                                        timing=True)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    rows = {}
    for r in report.results:
        rows[r.workload_uuid] = {"status": r.status.value, "median_ms": r.median_ms,
                                 "max_abs_err": r.max_abs_err, "max_rel_err": r.max_rel_err,
                                 "matched_ratio": r.matched_ratio, "timing_method": r.timing_method,
                                 "n_reps": r.n_reps, "message": (r.message or "")[:300]}
    hw = report.hardware.__dict__ if report.hardware is not None else None
    return {"workloads": rows, "compile_ok": cr.ok, "wall_s": round(time.time() - t0 - waited, 1),
            "lock_wait_s": round(waited, 1), "hardware": hw,
            "log_tail": "\n".join(report.log)[-1500:], "stderr_tail": (report.stderr_tail or "")[-1500:]}


def _precompile(cases: Path, index: list) -> None:
    """NVRTC builds of every case at once, before the timed evaluations (evaluate_candidate then
    finds them in solforge's compile cache)."""
    from concurrent.futures import ThreadPoolExecutor

    from solforge.candidate import Candidate
    from solforge.compile import compile_candidate

    cands = [Candidate.model_validate_json((cases / e["case"] / "candidate.json").read_text())
             for e in index]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=len(cands)) as ex:
        oks = [r.ok for r in ex.map(compile_candidate, cands)]
    print(f"solforge NVRTC builds: {oks} in {time.time() - t0:.1f} s", flush=True)


def _nvidia_traces(path: Path) -> dict:
    rows = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        t = json.loads(line)
        ev = t.get("evaluation") or {}
        perf = ev.get("performance") or {}
        corr = ev.get("correctness") or {}
        rows[t["workload"]["uuid"]] = {
            "status": (ev.get("status") or "").lower(),
            "latency_ms": perf.get("latency_ms"), "reference_latency_ms": perf.get("reference_latency_ms"),
            "speedup_factor": perf.get("speedup_factor"),
            "max_abs_err": corr.get("max_absolute_error"), "max_rel_err": corr.get("max_relative_error"),
            "log": (ev.get("log") or "")[:400], "environment": ev.get("environment")}
    return rows


def cmd_run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = Path(args.cases).resolve()
    sxb_src = (Path(args.sxb) / "src").resolve()
    site = Path(args.site)
    t_start = time.time()
    _install(args.wheels, site)
    snap = cases / "solforge_head"
    for pth in (str(snap), str(site)):  # solforge from the committed snapshot, then the wheels
        sys.path.insert(0, pth)
    shim_dir = Path("/tmp/sxb_bin")
    shim_dir.mkdir(exist_ok=True)
    (shim_dir / "python").write_text(SHIM.format(python=sys.executable, lock=GPU_LOCK))
    (shim_dir / "python").chmod(0o755)
    env = _env(site, sxb_src, shim_dir)
    os.environ.update({k: env[k] for k in ("PYTHONPATH", "PATH")})
    index = json.loads((cases / "index.json").read_text())
    logs = Path("/tmp/sxb_logs")  # their tails go into the JSON; $OUT takes at most 8 files
    logs.mkdir(exist_ok=True)

    # their CLI, one process per case, all at once (their nvcc builds overlap; evaluations are locked)
    procs = {}
    for e in (index if args.only in ("both", "nvidia") else []):
        d = cases / e["case"]
        cmd = [sys.executable, "-c", "from sol_execbench.cli import cli; cli()", str(d / "problem"),
               "--solution", str(d / "solution" / "solution.json"), "-o", str(d / "traces.jsonl"),
               "--compile-timeout", str(args.compile_timeout_s), "--timeout", str(args.timeout_s)]
        f = open(logs / f"{e['case']}.nvidia.log", "w")
        procs[e["case"]] = (subprocess.Popen(cmd, cwd=d, env=env, stdout=f, stderr=subprocess.STDOUT),
                            f, time.time(), cmd)
    print(f"started NVIDIA's CLI for {len(procs)} cases ({time.time() - t_start:.1f} s in)", flush=True)

    results = {e["case"]: {} for e in index}
    if args.only in ("both", "solforge"):
        try:
            _precompile(cases, index)
        except Exception as ex:  # noqa: BLE001 - evaluate_candidate compiles again anyway
            print(f"solforge NVRTC pre-build failed: {type(ex).__name__}: {ex}", flush=True)
    for e in (index if args.only in ("both", "solforge") else []):  # meanwhile, same GPU lock
        try:
            results[e["case"]] = {"solforge": _solforge_eval(cases / e["case"], e)}
        except Exception as ex:  # noqa: BLE001 - one broken case must not hide the others
            results[e["case"]] = {"solforge": {"error": f"{type(ex).__name__}: {ex}"[:1500]}}
        (out / "partial_results.json").write_text(json.dumps(results, default=str))  # if cut short
        print(f"solforge {e['case']}: {json.dumps(results[e['case']]['solforge'])[:300]} "
              f"({time.time() - t_start:.1f} s in)", flush=True)

    for e in (index if procs else []):
        p, f, t0, cmd = procs[e["case"]]
        try:
            rc = p.wait(timeout=max(1.0, args.deadline_s - (time.time() - t_start)))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "killed at deadline"
        f.close()
        log = (logs / f"{e['case']}.nvidia.log").read_text(errors="replace")
        results[e["case"]]["nvidia"] = {"rc": rc, "wall_s": round(time.time() - t0, 1),
                                        "cmd": " ".join(cmd[3:]),
                                        "workloads": _nvidia_traces(cases / e["case"] / "traces.jsonl"),
                                        "log_tail": log[-2500:]}
        print(f"nvidia {e['case']}: rc={rc} traces={len(results[e['case']]['nvidia']['workloads'])} "
              f"({time.time() - t_start:.1f} s in)", flush=True)

    doc = compare(index, results)
    doc["index"] = index
    import solforge

    meta = json.loads((cases / "meta.json").read_text())
    doc["meta"] = {"command": " ".join(["python3", "benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
                   "solforge_commit": meta.get("solforge_commit"), "solforge_from": solforge.__file__,
                   "wall_s": round(time.time() - t_start, 1), "python": sys.version.split()[0],
                   "sol_execbench": _sxb_version(sxb_src), "gpu_lock": "eval phases serialized"}
    try:
        import torch

        doc["meta"]["torch"] = torch.__version__
        doc["meta"]["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    (out / "sol_execbench_compare_h200.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "sol_execbench_compare_h200.md").write_text(render(doc))
    print(render(doc))
    return 0


def _sxb_version(src: Path) -> str:
    pp = src.parent / "pyproject.toml"
    for line in pp.read_text().splitlines() if pp.exists() else []:
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    return "?"


# ----------------------------------------------------------------------------------------- compare
PASS = {"passed"}


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def compare(index: list, results: dict) -> dict:
    cases = []
    for e in index:
        r = results.get(e["case"], {})
        sf = (r.get("solforge") or {}).get("workloads", {})
        nv = (r.get("nvidia") or {}).get("workloads", {})
        nv_log = (r.get("nvidia") or {}).get("log_tail", "")
        # no trace for a workload: their CLI stopped before evaluating (it prints why)
        nv_missing = ("compile_failed" if "Compilation failed" in nv_log else
                      "eval_failed" if "Evaluation failed" in nv_log else
                      "not_run" if r.get("nvidia") else None)
        rows = []
        for w in e["workloads"]:
            u = w["uuid"]
            s, n = sf.get(u, {}), nv.get(u, {})
            sv, nvv = s.get("status"), n.get("status") or nv_missing
            row = {"uuid": u, "axes": w["axes"], "solforge_status": sv, "nvidia_status": nvv,
                   "verdict_agrees": (sv in PASS) == (nvv in PASS) if sv and nvv else None,
                   "solforge_ms": s.get("median_ms"), "nvidia_ms": n.get("latency_ms"),
                   "nvidia_reference_ms": n.get("reference_latency_ms"),
                   "our_eager_ms": w.get("our_eager_ms"), "our_T_b_ms": w.get("our_T_b_ms"),
                   "solforge_max_abs_err": s.get("max_abs_err"), "nvidia_max_abs_err": n.get("max_abs_err"),
                   "nvidia_log": n.get("log", "")[:200], "solforge_message": s.get("message", "")[:200]}
            if row["solforge_ms"] and row["nvidia_ms"]:
                row["ratio_kernel_sf_over_nv"] = row["solforge_ms"] / row["nvidia_ms"]
            if row["our_eager_ms"] and row["nvidia_reference_ms"]:
                row["ratio_ref_ours_over_nv"] = row["our_eager_ms"] / row["nvidia_reference_ms"]
            rows.append(row)
        agree = [x["verdict_agrees"] for x in rows if x["verdict_agrees"] is not None]
        cases.append({
            "case": e["case"], "problem": e["problem"], "subset": e["subset"], "wrong": e["wrong"],
            "variant": e["variant"], "n_workloads": len(rows),
            "solforge_passed": sum(x["solforge_status"] in PASS for x in rows),
            "nvidia_passed": sum(x["nvidia_status"] in PASS for x in rows),
            "verdicts_agree": f"{sum(agree)}/{len(rows)}",
            "geomean_kernel_ratio_sf_over_nv": _geomean([x.get("ratio_kernel_sf_over_nv") for x in rows]),
            "geomean_ref_ratio_ours_over_nv": _geomean([x.get("ratio_ref_ours_over_nv") for x in rows]),
            "nvidia_rc": (r.get("nvidia") or {}).get("rc"), "solforge_error": (r.get("solforge") or {}).get("error"),
            "nvidia_schema_check": e.get("nvidia_schema_check"),
            "rows": rows, "raw": r})
    return {"cases": cases}


def _fmt(x, nd=4):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)


def render(doc: dict) -> str:
    m = doc.get("meta", {})
    out = ["# NVIDIA sol-execbench vs solforge evaluator on the H200", "",
           f"GPU: {m.get('gpu', '?')}; torch {m.get('torch', '?')}; sol-execbench {m.get('sol_execbench', '?')} "
           f"(their CLI, unmodified, default config: 10 correctness rounds, warmup 10, 50 CUPTI-timed "
           "iterations, cold L2, no clock locking); solforge: solforge.evaluate.api.evaluate_candidate "
           "(CUPTI via kineto, L2 flushed, median of 50).", "",
           "Commands: here `.venv/bin/python benchmarks/compare_sol_execbench.py prepare` (exports + "
           "NVIDIA schema checks); on the device "
           + (f"`{m.get('command', '?')}` (NVIDIA's CLI, wall {m.get('wall_s', '?')} s) and "
              f"`{m['command_solforge']}` (solforge, wall {m.get('wall_s_solforge', '?')} s); here "
              "`benchmarks/compare_sol_execbench.py merge --nvidia A.json --solforge B.json --out DIR`"
              if m.get("command_solforge") else
              f"`{m.get('command', '?')}` (wall {m.get('wall_s', '?')} s)")
           + f". solforge commit {m.get('solforge_commit', '?')}.", "",
           "## Per problem", "",
           "| case | variant | workloads | solforge passed | NVIDIA passed | verdicts agree | "
           "kernel ms ratio solforge/NVIDIA (geomean) | reference ms ratio ours/NVIDIA (geomean) | NVIDIA rc |",
           "|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        out.append(f"| {c['case']} | {c['variant']} | {c['n_workloads']} | {c['solforge_passed']} | "
                   f"{c['nvidia_passed']} | {c['verdicts_agree']} | "
                   f"{_fmt(c['geomean_kernel_ratio_sf_over_nv'], 3)} | "
                   f"{_fmt(c['geomean_ref_ratio_ours_over_nv'], 3)} | {c['nvidia_rc']} |")
    out += ["", "## Per workload", "",
            "| case | axes | solforge | NVIDIA | solforge ms | NVIDIA ms | ratio | NVIDIA ref ms | "
            "our eager ms (baselines_h200.csv) | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        for r in c["rows"]:
            ax = " ".join(f"{k}={v}" for k, v in r["axes"].items())
            out.append(f"| {c['case']} | {ax} | {r['solforge_status']} | {r['nvidia_status']} | "
                       f"{_fmt(r['solforge_ms'])} | {_fmt(r['nvidia_ms'])} | "
                       f"{_fmt(r.get('ratio_kernel_sf_over_nv'), 3)} | {_fmt(r['nvidia_reference_ms'])} | "
                       f"{_fmt(r['our_eager_ms'])} | {_fmt(r.get('ratio_ref_ours_over_nv'), 3)} |")
    if m.get("notes_md"):
        out += ["", m["notes_md"].rstrip()]
    errs = [(c["case"], c["solforge_error"]) for c in doc["cases"] if c.get("solforge_error")]
    if errs:
        out += ["", "## Errors", ""] + [f"- {k}: solforge: {v}" for k, v in errs]
    return "\n".join(out) + "\n"


def cmd_merge(args) -> int:
    a, b = json.loads(Path(args.nvidia).read_text()), json.loads(Path(args.solforge).read_text())
    sf = {c["case"]: c["raw"].get("solforge") for c in b["cases"]}
    results = {c["case"]: {"nvidia": c["raw"].get("nvidia"), "solforge": sf.get(c["case"])}
               for c in a["cases"]}
    doc = compare(a["index"], results)
    doc["index"] = a["index"]
    doc["meta"] = {**a.get("meta", {}), "command": a["meta"]["command"],
                   "command_solforge": b["meta"]["command"], "wall_s_solforge": b["meta"]["wall_s"],
                   "solforge_commit": b["meta"].get("solforge_commit"),
                   "note": "NVIDIA's CLI and solforge's evaluator ran in two device calls on the "
                           "same kind of machine (nvidia-h200), from the same prepared cases"}
    if args.notes:
        doc["meta"]["notes_md"] = Path(args.notes).read_text()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sol_execbench_compare_h200.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "sol_execbench_compare_h200.md").write_text(render(doc))
    print(render(doc))
    return 0


def cmd_render(args) -> int:
    doc = json.loads(Path(args.json).read_text())
    if "index" in doc:  # recompute the comparison from the raw results
        doc.update(compare(doc["index"], {c["case"]: c["raw"] for c in doc["cases"]}))
    md = render(doc)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(doc, indent=1, default=str))
    if args.out:
        Path(args.out).write_text(md)
    else:
        print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=str(REPO / ".carry" / "sxb" / "cases"))
    p.add_argument("--sxb", default=str(REPO / ".carry" / "sxb" / "repo"),
                   help="a checkout of NVIDIA/SOL-ExecBench (its src/ is imported)")
    p.add_argument("--problems-root", default=str(_shared_dir() / "sol_execbench"))
    r = sub.add_parser("run")
    r.add_argument("--cases", required=True)
    r.add_argument("--sxb", required=True)
    r.add_argument("--wheels", nargs="+", default=[])
    r.add_argument("--site", default="/tmp/site")
    r.add_argument("--out", required=True)
    r.add_argument("--only", choices=("both", "solforge", "nvidia"), default="both",
                   help="run one evaluator only (merge two such runs with `merge`)")
    r.add_argument("--compile-timeout-s", type=int, default=400)
    r.add_argument("--timeout-s", type=int, default=400)
    r.add_argument("--deadline-s", type=float, default=420.0,
                   help="stop waiting for their CLI this many seconds after the start")
    mg = sub.add_parser("merge", help="NVIDIA's results from one run's JSON, solforge's from another's")
    mg.add_argument("--nvidia", required=True)
    mg.add_argument("--solforge", required=True)
    mg.add_argument("--out", required=True, help="folder for sol_execbench_compare_h200.{json,md}")
    mg.add_argument("--notes", help="a markdown file appended to the table (findings)")
    g = sub.add_parser("render")
    g.add_argument("json")
    g.add_argument("--out")
    g.add_argument("--json-out", help="write the recomputed JSON here")
    args = ap.parse_args()
    return {"prepare": cmd_prepare, "run": cmd_run, "merge": cmd_merge,
            "render": cmd_render}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
