"""NVIDIA's own SOL-ExecBench evaluator side by side with solforge's, on any list of problems:
verdict agreement, kernel-time ratio and eager reference-time ratio, per problem and per workload.

Problems: any mix of globs under the dataset root ("L1/05*", "FlashInfer-Bench/0[0-2]*"),
SUBSET/NAME, a problem directory, or @FILE (one of those per line, # comments). For each problem,
the kernel is its best/ file in kernels_cuda/<family>/best/<problem>.json (the candidate exactly as
measured), exported as an official solution.json; a problem without one becomes a reference-only case
(a Python solution that calls the reference: their CLI then still reports reference_latency_ms, which
is compared with solforge's eager T_b timing). Workloads whose safetensors blobs are not in the dataset
copy (FlashInfer-Bench) cannot run in NVIDIA's CLI: they are listed as such in the report, never
skipped silently (solforge synthesizes valid values for them, which NVIDIA cannot compare).

  # 1. here (CPU): NVIDIA's source and the wheels their CLI needs, into an ignored carried folder
  .venv/bin/python benchmarks/compare_sol_execbench.py carry              # -> .carry/sxb/{repo,whl}
  #    exports + their schema checks (their pydantic models and loaders, from their source)
  .venv/bin/python benchmarks/compare_sol_execbench.py prepare --problems 'L1/*' 'FlashInfer-Bench/*'

  # 2. on the H200 (device run; carry .whl and .carry/sxb):
  python3 benchmarks/compare_sol_execbench.py run --cases .carry/sxb/cases --sxb .carry/sxb/repo \
      --wheels .whl .carry/sxb/whl --out $OUT
  #    (--only nvidia / --only solforge: one side per device call; `merge` joins two such runs;
  #    --serial: per case their CLI, then solforge's side, nothing else on the host meanwhile;
  #    --cpus 4,5: both sides' processes on the same cores)

  #    each side twice (the floor any agreement can reach): two calls of `run` (both sides), then
  .venv/bin/python benchmarks/compare_sol_execbench.py repeat RUN1.json RUN2.json --out DIR

  # 3. here: the markdown again from the JSON
  .venv/bin/python benchmarks/compare_sol_execbench.py render data/results/sol_execbench_compare/sol_execbench_compare_h200.json

`run` installs the wheels into /tmp/site, starts NVIDIA's CLI (`sol-execbench PROBLEM_DIR --solution
solution.json -o traces.jsonl`, i.e. sol_execbench.cli:cli, unmodified; --jobs at a time so that their
nvcc builds overlap) and meanwhile runs solforge's evaluator (solforge.evaluate.api.evaluate_candidate)
on the same candidates and workloads, and times the eager reference as solforge's T_b does
(solforge.evaluate.baseline.time_problem, eager). The GPU phases never overlap: their CLI runs its
evaluation as `python eval_driver.py` through PATH, and a `python` shim put first on PATH takes an
exclusive file lock for that process; solforge's evaluations take the same lock. Their build step
runs without it. No clock locking (no --lock-clocks).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MAX_WORKLOADS = 6          # per problem, spread from smallest to largest, to fit the device minutes
GPU_LOCK = "/tmp/sxb_gpu.lock"
SXB_MIRROR = Path("/work/.mirror/NVIDIA+SOL-ExecBench/repo")
# what their CLI needs beyond the box's image (click, rich, safetensors are there); .whl (repo root)
# holds the pydantic stack solforge needs too
CARRY_WHEELS = ("cupti-python==13.0.1", "nvidia-cuda-cccl==13.0.85")

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

REFERENCE_SOLUTION = """import importlib.util, pathlib, sys
# The problem's reference as a solution: NVIDIA's CLI then times it as the solution and as the
# reference (reference_latency_ms); solforge compares the latter with its eager T_b timing.
_src = {reference!r}
_spec = importlib.util.spec_from_loader("solforge_reference_copy", loader=None)
_mod = importlib.util.module_from_spec(_spec)
exec(compile(_src, "reference_copy.py", "exec"), _mod.__dict__)
run = _mod.run
"""


# ------------------------------------------------------------------------------------ selection
def select_problems(specs: list[str], root: Path) -> list[Path]:
    """Problem directories for specs (globs under root, SUBSET/NAME, directories, @FILE), in the
    order given, each once. A spec that matches nothing raises ValueError naming it."""
    out: list[Path] = []
    for spec in specs:
        spec = spec.strip()
        if not spec or spec.startswith("#"):
            continue
        if spec.startswith("@"):
            lines = Path(spec[1:]).read_text().splitlines()
            out += select_problems([ln.split("#", 1)[0] for ln in lines], root)
            continue
        d = Path(spec)
        if d.is_dir() and (d / "definition.json").exists():
            hits = [d]
        else:
            hits = sorted(Path(h) for h in glob.glob(str(root / spec))
                          if (Path(h) / "definition.json").exists())
        if not hits:
            raise ValueError(f"no problem matches {spec!r} under {root}")
        out += hits
    return list(dict.fromkeys(p.resolve() for p in out))


def default_problems_root() -> Path:
    """The dataset: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared) / sol_execbench."""
    from solforge.settings import get

    return get().shared_dir / "sol_execbench"


def best_file(problem: str, kernels_root: Path = REPO / "kernels_cuda") -> Path | None:
    """The committed best kernel for this problem (any CUDA family), or None."""
    hits = sorted(kernels_root.glob(f"*/best/{problem}.json"))
    return hits[0] if hits else None


def blob_inputs(workload: dict) -> dict[str, str]:
    """{input name: blob path} for a workload line's safetensors inputs."""
    return {k: v.get("path", "") for k, v in (workload.get("inputs") or {}).items()
            if isinstance(v, dict) and v.get("type") == "safetensors"}


def missing_blobs(workload: dict, roots: list[Path]) -> list[str]:
    """Blob paths of this workload that resolve under none of the roots (solforge's resolve_blob:
    the path under each root, dropping leading parts)."""
    from solforge.evaluate.inputs import resolve_blob

    return sorted({p for p in blob_inputs(workload).values() if resolve_blob(p, roots) is None})


def spread(items: list, n: int) -> list:
    """n items spread evenly from first to last (all of them when n <= 0 or there are fewer)."""
    if n <= 0 or len(items) <= n:
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


# ----------------------------------------------------------------------------------------- prepare
def _baselines(path: Path) -> dict:
    out = {}
    if path.exists():
        with path.open() as f:
            for r in csv.DictReader(f):
                out[(r["problem"], r["workload_uuid"])] = r
    return out


def nvidia_check(sxb_src: Path, case_dir: Path) -> dict:
    """Their pydantic models and CLI loaders (imported from their source) on one case."""
    if str(sxb_src) not in sys.path:
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
    res = {"solution": sol.name, "definition_matches": sol.definition == defn.name,
           "entry": sol.spec.entry_point, "is_cpp": pk._is_cpp, "workloads": len(wls)}
    if pk._is_cpp:
        cmd, _ = pk.compile()
        staged = json.loads((stage / "solution.json").read_text())
        res.update({"compile_cmd": cmd,
                    "staged_cuda_cflags": staged["spec"]["compile_options"]["cuda_cflags"],
                    "staged_top_level_cu": sorted(p.name for p in stage.iterdir()
                                                  if p.suffix == ".cu")})
    del pk
    shutil.rmtree(stage, ignore_errors=True)
    return res


def _reference_solution(defn_json: dict, folder: Path, name: str) -> Path:
    """solution.json of a Python solution that is the problem's reference (reference-only case)."""
    folder.mkdir(parents=True, exist_ok=True)
    sol = {"name": name, "definition": defn_json["name"], "author": "solforge",
           "description": "the problem's reference as a solution (solforge has no kernel for it): "
                          "compares reference timing only",
           "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"],
                    "entry_point": "kernel.py::run", "dependencies": ["torch"],
                    "destination_passing_style": False},
           "sources": [{"path": "kernel.py",
                        "content": REFERENCE_SOLUTION.format(reference=defn_json["reference"])}]}
    path = folder / "solution.json"
    path.write_text(json.dumps(sol, indent=1))
    return path


def prepare_case(src: Path, out: Path, sxb_src: Path, max_workloads: int, base: dict,
                 kernels_root: Path = REPO / "kernels_cuda", check=nvidia_check,
                 reference_only: bool = False) -> dict:
    """One case folder: problem files (the selected workloads), solution.json, candidate.json (kernel
    cases), and the index entry (what can run where, and why not). reference_only: the reference as
    the solution even where a kernel is saved (reference times only, no nvcc build in their CLI)."""
    from solforge.candidate import Candidate
    from solforge.problem import load_problem_dir

    subset = src.parent.name
    p = load_problem_dir(src, subset)
    d = out / p.name
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
    raw = {json.loads(ln)["uuid"]: (ln, json.loads(ln)) for ln in lines}
    # workloads NVIDIA's CLI cannot run: safetensors blobs missing from the dataset copy
    no_blob = {u: missing_blobs(w, [src]) for u, (_, w) in raw.items()}
    no_blob = {u: m for u, m in no_blob.items() if m}
    runnable = [w for w in p.workloads if w.uuid not in no_blob]
    # spread over sizes: order by total input+output elements, keep the file's own lines
    sized = sorted(runnable, key=lambda w: sum(math.prod(s) for s in
                                               {**w.input_shapes, **w.output_shapes}.values()
                                               if s is not None))
    keep = spread([w.uuid for w in sized], max_workloads)
    entry = {"case": p.name, "subset": subset, "problem": p.name, "source": str(src),
             "definition_patched": patched, "workloads": [],
             "blob_missing": [{"uuid": u, "axes": raw[u][1].get("axes", {}), "paths": m[:3]}
                              for u, m in no_blob.items()]}
    if not keep:
        entry.update(kind="cannot_run", reason=f"all {len(p.workloads)} workloads need safetensors "
                     "blobs that the dataset copy lacks: NVIDIA's CLI cannot run them")
        return entry
    (d / "problem" / "workload.jsonl").write_text("\n".join(raw[u][0] for u in keep) + "\n")
    best = None if reference_only else best_file(p.name, kernels_root)
    if best is not None:
        from solforge.export import ExportAttempt
        from solforge.export.solution import write_solution

        b = json.loads(best.read_text())
        if "candidate" in b:  # the candidate exactly as measured
            cand = Candidate.model_validate(b["candidate"])
        else:
            from solforge.kernels import get_family

            cand = get_family(b["family"]).instantiate(p, b["params"])
        att = ExportAttempt(attempt_id=f"kernels_cuda-{b['variant'].replace(':', '-')}-"
                                       f"{cand.source_hash()[:12]}",
                            problem_name=p.name, definition=p.definition, candidate=cand)
        sol = write_solution(att, d / "solution", name=f"solforge_{p.name.lower()}")
        (d / "candidate.json").write_text(cand.model_dump_json(indent=1))
        entry.update(kind="kernel", family=b["family"], variant=b["variant"],
                     params=b.get("params"), best_file=str(best.relative_to(REPO)))
    else:
        sol = _reference_solution(defn_json, d / "solution", f"reference_{p.name.lower()}")
        entry.update(kind="reference", variant="reference")
    entry["solution"] = str(sol.relative_to(out))
    entry["nvidia_schema_check"] = check(sxb_src, d) if check else None
    for u in keep:
        w = next(w for w in p.workloads if w.uuid == u)
        row = base.get((p.name, u), {})
        entry["workloads"].append({"uuid": u, "axes": dict(w.axes),
                                   "csv_eager_ms": _f(row.get("eager_ms")),
                                   "csv_T_b_ms": _f(row.get("T_b_ms"))})
    return entry


def cmd_carry(args) -> int:
    """NVIDIA's source (git archive of the fetched mirror: src, pyproject.toml, LICENSE) and the
    wheels their CLI needs on the box, into an ignored folder that device calls carry."""
    dest = Path(args.dest)
    repo = dest / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    arch = subprocess.run(["git", f"--git-dir={args.mirror}", "archive", "HEAD", "src",
                           "pyproject.toml", "LICENSE"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=arch, check=True)
    whl = dest / "whl"
    whl.mkdir(exist_ok=True)
    plats = [x for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                         "manylinux2014_x86_64", "manylinux1_x86_64") for x in ("--platform", p)]
    for spec in args.wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--python-version", args.python_version,
                        "--implementation", "cp", *plats, "-d", str(whl), spec], check=True)
    print(f"NVIDIA's source under {repo} (carried, never committed: .carry/ is git-ignored), "
          f"wheels: {sorted(p.name for p in whl.glob('*.whl'))}")
    return 0


def cmd_prepare(args) -> int:
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    try:
        dirs = select_problems(args.problems, Path(args.problems_root or default_problems_root()))
    except ValueError as e:
        print(f"prepare: {e}", file=sys.stderr)
        return 2
    base = _baselines(REPO / "data" / "results" / "baselines" / "baselines_h200.csv")
    sxb_src = Path(args.sxb) / "src"
    index = []
    for src in dirs:
        try:
            e = prepare_case(src, out, sxb_src, args.max_workloads, base,
                             check=None if args.no_schema_check else nvidia_check,
                             reference_only=args.reference_only)
        except Exception as ex:  # noqa: BLE001 - one problem's trouble is one line, the rest go on
            e = {"case": src.name, "subset": src.parent.name, "problem": src.name,
                 "kind": "cannot_run", "reason": f"prepare failed: {type(ex).__name__}: {ex}"[:400],
                 "workloads": [], "blob_missing": []}
            shutil.rmtree(out / src.name, ignore_errors=True)
        index.append(e)
        extra = (f"; {len(e['blob_missing'])} workload(s) left out: safetensors blob missing"
                 if e.get("blob_missing") else "")
        print(f"{e['case']}: {e['kind']}"
              + (f" ({e.get('reason')})" if e["kind"] == "cannot_run" else
                 f", {len(e['workloads'])} workloads, solution {e.get('solution')}") + extra,
              flush=True)
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
    (out / "meta.json").write_text(json.dumps({"solforge_commit": head, "problems": args.problems,
                                               "reference_only": args.reference_only}))
    n = {k: sum(e["kind"] == k for e in index) for k in ("kernel", "reference", "cannot_run")}
    print(f"{len(index)} problems: {n['kernel']} with a solforge kernel, {n['reference']} "
          f"reference-only, {n['cannot_run']} cannot run")
    return 0


def _f(x):
    try:
        v = float(x)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def parse_cpus(text: "str | None") -> "set | None":
    """`4,5` -> {4, 5}; None for none given. ValueError naming what is wrong otherwise (a core
    this process may not use included: both sides would run where the list does not say)."""
    if not text:
        return None
    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise ValueError(f"--cpus {text!r}: a comma list of core numbers, e.g. 4,5") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise ValueError(f"--cpus {text!r}: cores {sorted(cpus - allowed) or '(none)'} are not "
                         f"among this process's {len(allowed)}")
    return cpus


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


class _GpuLock:
    """The exclusive GPU lock both evaluators' timed phases take (their CLI through the shim)."""

    def __enter__(self):
        import fcntl

        self.fd = os.open(GPU_LOCK, os.O_CREAT | os.O_RDWR, 0o666)
        t0 = time.time()
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.waited = time.time() - t0
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _eager_times(p, uuids: list[str], roots: list) -> dict:
    """solforge's eager T_b timing (solforge.evaluate.baseline, the way NVIDIA times the reference)
    of these workloads, in this (trusted) process."""
    import tempfile

    from solforge.evaluate.baseline import time_problem

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in time_problem(p, "eager", Path(tmp), reps=50, only=uuids, blob_roots=roots,
                                workload_budget_s=3.0, problem_budget_s=120.0):
            out[row.workload_uuid] = {"status": row.status, "median_ms": row.median_ms,
                                      "n_reps": row.n_reps, "timing_method": row.timing_method,
                                      "busy_ms": row.busy_ms, "message": (row.message or "")[:300]}
    return out


def _solforge_eval(case_dir: Path, entry: dict) -> dict:
    from solforge.candidate import Candidate
    from solforge.evaluate.api import evaluate_candidate
    from solforge.problem import load_problem_dir

    p = load_problem_dir(case_dir / "problem", entry["subset"])
    uuids = [w["uuid"] for w in entry["workloads"]]
    res: dict = {"workloads": {}}
    t0 = time.time()
    waited = 0.0
    if entry.get("kind") == "kernel":
        cand = Candidate.model_validate_json((case_dir / "candidate.json").read_text())
        with _GpuLock() as lk:
            waited += lk.waited
            report, cr = evaluate_candidate(p, cand, workloads=uuids, timing=True)
        for r in report.results:
            res["workloads"][r.workload_uuid] = {
                "status": r.status.value, "median_ms": r.median_ms, "max_abs_err": r.max_abs_err,
                "max_rel_err": r.max_rel_err, "matched_ratio": r.matched_ratio,
                "timing_method": r.timing_method, "timing_backend": r.extra.get("timing_backend"),
                "n_reps": r.n_reps, "message": (r.message or "")[:300]}
        res.update(compile_ok=cr.ok,
                   hardware=report.hardware.__dict__ if report.hardware is not None else None,
                   log_tail="\n".join(report.log)[-1500:],
                   stderr_tail=(report.stderr_tail or "")[-1500:])
    try:
        with _GpuLock() as lk:
            waited += lk.waited
            eager = _eager_times(p, uuids, [case_dir / "problem", Path(entry.get("source", "."))])
    except Exception as ex:  # noqa: BLE001 - the kernel comparison still stands
        eager, res["eager_error"] = {}, f"{type(ex).__name__}: {ex}"[:500]
    for u, e in eager.items():
        res["workloads"].setdefault(u, {})["eager"] = e
    res.update(wall_s=round(time.time() - t0 - waited, 1), lock_wait_s=round(waited, 1))
    return res


def _precompile(cases: Path, index: list) -> None:
    """NVRTC builds of every case at once, before the timed evaluations (evaluate_candidate then
    finds them in solforge's compile cache)."""
    from concurrent.futures import ThreadPoolExecutor

    from solforge.candidate import Candidate
    from solforge.compile import compile_candidate

    cands = [Candidate.model_validate_json((cases / e["case"] / "candidate.json").read_text())
             for e in index if e.get("kind") == "kernel"]
    if not cands:
        return
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=min(8, len(cands))) as ex:
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
    if args.cpus:
        # every process of the run on these cores (their CLI and its eval_driver inherit it): a
        # launch-bound eager reference's time is host time, and two processes on two cores of a
        # shared host read it differently for a whole run (eager_timing_windows.py, 2026-12-05)
        try:
            os.sched_setaffinity(0, parse_cpus(args.cpus))
        except ValueError as e:
            print(f"compare_sol_execbench: {e}", file=sys.stderr)
            return 2
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

    # their CLI, --jobs processes at a time (their nvcc builds overlap; evaluations are locked)
    from concurrent.futures import ThreadPoolExecutor

    runnable = [e for e in index if e.get("kind") != "cannot_run"]

    def nvidia_case(e):
        d = cases / e["case"]
        cmd = [sys.executable, "-c", "from sol_execbench.cli import cli; cli()", str(d / "problem"),
               "--solution", str(d / "solution" / "solution.json"), "-o", str(d / "traces.jsonl"),
               "--compile-timeout", str(args.compile_timeout_s), "--timeout", str(args.timeout_s)]
        t0 = time.time()
        left = args.deadline_s - (t0 - t_start)
        if left <= 5:
            return {"rc": "not started: deadline", "wall_s": 0.0, "cmd": " ".join(cmd[3:]),
                    "workloads": {}, "log_tail": ""}
        with open(logs / f"{e['case']}.nvidia.log", "w") as f:
            proc = subprocess.Popen(cmd, cwd=d, env=env, stdout=f, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = "killed at deadline"
        log = (logs / f"{e['case']}.nvidia.log").read_text(errors="replace")
        r = {"rc": rc, "wall_s": round(time.time() - t0, 1), "cmd": " ".join(cmd[3:]),
             "workloads": _nvidia_traces(d / "traces.jsonl"), "log_tail": log[-2500:]}
        print(f"nvidia {e['case']}: rc={rc} traces={len(r['workloads'])} "
              f"({time.time() - t_start:.1f} s in)", flush=True)
        return r

    sides = {"both": ("nvidia", "solforge")}.get(args.only, (args.only,))
    futs, pool = {}, None
    if not args.serial:   # their builds start now, beside solforge's NVRTC pre-build
        pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
        futs = {e["case"]: pool.submit(nvidia_case, e) for e in (runnable if "nvidia" in sides else [])}
        print(f"NVIDIA's CLI: {len(futs)} cases, {args.jobs} at a time ({time.time() - t_start:.1f} s in)",
              flush=True)
    results = {e["case"]: {} for e in index}
    if "solforge" in sides:
        try:
            _precompile(cases, runnable)
        except Exception as ex:  # noqa: BLE001 - evaluate_candidate compiles again anyway
            print(f"solforge NVRTC pre-build failed: {type(ex).__name__}: {ex}", flush=True)

    def solforge_case(e):
        if time.time() - t_start > args.deadline_s:
            results[e["case"]]["solforge"] = {"error": "not run: deadline"}
            return
        try:
            results[e["case"]]["solforge"] = _solforge_eval(cases / e["case"], e)
        except Exception as ex:  # noqa: BLE001 - one broken case must not hide the others
            results[e["case"]]["solforge"] = {"error": f"{type(ex).__name__}: {ex}"[:1500]}
        (out / "partial_results.json").write_text(json.dumps(results, default=str))  # if cut short
        print(f"solforge {e['case']}: {json.dumps(results[e['case']]['solforge'])[:300]} "
              f"({time.time() - t_start:.1f} s in)", flush=True)

    if args.serial:
        # one process on the host at a time, per case NVIDIA's CLI (its build, then its evaluation)
        # then solforge's: a launch-bound eager reference is host time, and their builds running
        # beside either side's timing load the host that time is taken on
        for e in runnable:
            if "nvidia" in sides:
                results[e["case"]]["nvidia"] = nvidia_case(e)
            if "solforge" in sides:
                solforge_case(e)
            _run_report(out, cases, index, results, t_start, sxb_src, args.cpus, complete=False)
    else:
        for e in (runnable if "solforge" in sides else []):  # meanwhile, same GPU lock
            solforge_case(e)
        for case, fut in futs.items():
            results[case]["nvidia"] = fut.result()
        pool.shutdown()

    return _run_report(out, cases, index, results, t_start, sxb_src, args.cpus, complete=True)


def _run_report(out: Path, cases: Path, index: list, results: dict, t_start: float, sxb_src: Path,
                cpus: "str | None", complete: bool) -> int:
    """The run's report from the results so far. A serial run writes it after every case too
    (complete=False): a call cut short by the device's time limit leaves the report of the cases it
    finished, since what the command left under $OUT still comes back."""
    doc = compare(index, results)
    doc["index"] = index
    import solforge

    meta = json.loads((cases / "meta.json").read_text())
    doc["meta"] = {"command": " ".join(["python3", "benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
                   "solforge_commit": meta.get("solforge_commit"), "solforge_from": solforge.__file__,
                   "wall_s": round(time.time() - t_start, 1), "complete": complete,
                   "cpus": cpus or "any",
                   "python": sys.version.split()[0],
                   "sol_execbench": _sxb_version(sxb_src), "gpu_lock": "eval phases serialized",
                   "problems": meta.get("problems")}
    try:
        import torch

        doc["meta"]["torch"] = torch.__version__
        doc["meta"]["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        pass
    return _write_report(out, "sol_execbench_compare_h200", doc, render(doc), echo=complete)


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


def _nvidia_missing(nv: dict | None) -> str | None:
    """Why a workload has no trace from their CLI (it prints why), or None when it was not run."""
    if not nv:
        return None
    log = nv.get("log_tail", "")
    return ("compile_failed" if "Compilation failed" in log else
            "eval_failed" if "Evaluation failed" in log else "not_run")


def _ratio(a, b):
    return a / b if a and b and a > 0 and b > 0 else None


def compare(index: list, results: dict, tol: float = 0.05) -> dict:
    """Per case and per workload: verdicts, kernel-time ratio solforge/NVIDIA, eager reference-time
    ratio solforge/NVIDIA (reference_latency_ms); `tol`: the agreement band of the geomeans."""
    cases = []
    for e in index:
        r = results.get(e["case"], {})
        sf_all = r.get("solforge") or {}
        sf = sf_all.get("workloads", {})
        nv = (r.get("nvidia") or {}).get("workloads", {})
        nv_missing = _nvidia_missing(r.get("nvidia"))
        kernel = e.get("kind", "kernel") == "kernel"
        rows = []
        for w in e.get("workloads", []):
            u = w["uuid"]
            s_, n = sf.get(u, {}), nv.get(u, {})
            sv = s_.get("status") if kernel else None
            nvv = (n.get("status") or nv_missing) if kernel else None
            eager = s_.get("eager") or {}
            row = {"uuid": u, "axes": w["axes"], "solforge_status": sv, "nvidia_status": nvv,
                   "verdict_agrees": (sv in PASS) == (nvv in PASS) if sv and nvv else None,
                   "solforge_ms": s_.get("median_ms"), "nvidia_ms": n.get("latency_ms"),
                   "nvidia_reference_ms": n.get("reference_latency_ms"),
                   "our_eager_ms": eager.get("median_ms"), "our_eager_status": eager.get("status"),
                   "our_eager_busy_ms": eager.get("busy_ms"),
                   "csv_eager_ms": w.get("csv_eager_ms", w.get("our_eager_ms")),
                   "solforge_max_abs_err": s_.get("max_abs_err"),
                   "nvidia_max_abs_err": n.get("max_abs_err"),
                   "nvidia_log": (n.get("log") or "")[:200],
                   "solforge_message": (s_.get("message") or "")[:200]}
            row["ratio_kernel_sf_over_nv"] = _ratio(row["solforge_ms"], row["nvidia_ms"]) \
                if kernel else None
            row["eager_source"] = "live" if row["our_eager_ms"] else None
            if not row["our_eager_ms"] and row["csv_eager_ms"]:
                # a run that did not time the eager reference itself (recorded before it did)
                row["our_eager_ms"], row["eager_source"] = row["csv_eager_ms"], "baselines_h200.csv"
            row["ratio_ref_ours_over_nv"] = _ratio(row["our_eager_ms"], row["nvidia_reference_ms"])
            rows.append(row)
        agree = [x["verdict_agrees"] for x in rows if x["verdict_agrees"] is not None]
        gk = _geomean([x["ratio_kernel_sf_over_nv"] for x in rows])
        gr = _geomean([x["ratio_ref_ours_over_nv"] for x in rows])
        # the same split by workload as `repeat` (_host_bound), over this run's own eager readings
        split, below_ms = {True: [], False: []}, _host_bound_below_ms()
        for x in rows:
            if x["eager_source"] == "live" and x["ratio_ref_ours_over_nv"]:
                split[_host_bound(x["our_eager_ms"], x.get("our_eager_busy_ms"),
                                  below_ms)].append(x["ratio_ref_ours_over_nv"])
        gr_gpu, gr_host = _geomean(split[False]), _geomean(split[True])
        # a reference-only case: their CLI timed the same reference as the solution and as the
        # reference, in one process, seconds apart (their own repeatability)
        selfr = [_ratio(x["nvidia_ms"], x["nvidia_reference_ms"]) for x in rows] \
            if e.get("kind") == "reference" else []
        gs = _geomean(selfr)
        cases.append({
            "case": e["case"], "problem": e["problem"], "subset": e["subset"],
            "kind": e.get("kind", "kernel"), "variant": e.get("variant", "-"),
            "reason": e.get("reason"), "blob_missing": e.get("blob_missing", []),
            "n_workloads": len(rows),
            "solforge_passed": sum(x["solforge_status"] in PASS for x in rows),
            "nvidia_passed": sum(x["nvidia_status"] in PASS for x in rows),
            "verdicts_agree": f"{sum(agree)}/{len(agree)}" if kernel else "-",
            "all_verdicts_agree": all(agree) if kernel and agree else None,
            "geomean_kernel_ratio_sf_over_nv": gk,
            "geomean_ref_ratio_ours_over_nv": gr,
            "kernel_within_tol": abs(gk - 1) <= tol if gk else None,
            "ref_within_tol": abs(gr - 1) <= tol if gr else None,
            "geomean_ref_ratio_gpu_bound": gr_gpu, "geomean_ref_ratio_host_bound": gr_host,
            "geomean_nvidia_self_ratio": gs,
            "nvidia_self_within_tol": abs(gs - 1) <= tol if gs else None,
            "nvidia_self_range": [min(x for x in selfr if x), max(x for x in selfr if x)]
            if any(selfr) else None,
            "nvidia_rc": (r.get("nvidia") or {}).get("rc"), "solforge_error": sf_all.get("error"),
            "eager_error": sf_all.get("eager_error"),
            "nvidia_schema_check": e.get("nvidia_schema_check"),
            "rows": rows, "raw": r})
    return {"cases": cases, "summary": summarize(cases, tol)}


def summarize(cases: list, tol: float = 0.05) -> dict:
    k = [c for c in cases if c["kind"] == "kernel"]
    run = [c for c in cases if c["kind"] != "cannot_run"]
    spans = [c["nvidia_self_range"] for c in run if c.get("nvidia_self_range")]
    return {"problems": len(cases), "with_kernel": len(k),
            "reference_only": sum(c["kind"] == "reference" for c in cases),
            "cannot_run": [c["case"] for c in cases if c["kind"] == "cannot_run"],
            "workloads_blob_missing": sum(len(c["blob_missing"]) for c in cases),
            "verdicts_agree_problems": sum(bool(c["all_verdicts_agree"]) for c in k),
            "verdict_disagreements": [c["case"] for c in k if c["all_verdicts_agree"] is False],
            "kernel_compared": sum(c["kernel_within_tol"] is not None for c in k),
            "kernel_within_tol": sum(bool(c["kernel_within_tol"]) for c in k),
            "ref_compared": sum(c["ref_within_tol"] is not None for c in run),
            "ref_within_tol": sum(bool(c["ref_within_tol"]) for c in run),
            **{f"ref_{side}_{k}": v for side in ("gpu_bound", "host_bound") for k, v in (
                ("compared", sum(c.get(f"geomean_ref_ratio_{side}") is not None for c in run)),
                ("within_tol", sum(abs(c[f"geomean_ref_ratio_{side}"] - 1) <= tol for c in run
                                   if c.get(f"geomean_ref_ratio_{side}") is not None)))},
            "nvidia_self_compared": sum(c.get("nvidia_self_within_tol") is not None for c in run),
            "nvidia_self_within_tol": sum(bool(c.get("nvidia_self_within_tol")) for c in run),
            "nvidia_self_range": [min(r[0] for r in spans), max(r[1] for r in spans)]
            if spans else None,
            "tol": tol,
            "geomean_kernel_ratio": _geomean([c["geomean_kernel_ratio_sf_over_nv"] for c in k]),
            "geomean_ref_ratio": _geomean([c["geomean_ref_ratio_ours_over_nv"] for c in run])}


def _fmt(x, nd=4):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)


def render(doc: dict) -> str:
    m = doc.get("meta", {})
    sm = doc.get("summary") or summarize(doc["cases"])
    tol = f"{sm['tol'] * 100:.0f}%"
    # the card the run had: the report's file names keep _h200 (the target) whatever ran them
    out = [f"# NVIDIA sol-execbench vs solforge evaluator on one {m.get('gpu', 'GPU')}", "",
           f"GPU: {m.get('gpu', '?')}; torch {m.get('torch', '?')}; sol-execbench "
           f"{m.get('sol_execbench', '?')} (their CLI, unmodified, default config: 10 correctness "
           "rounds, 10 warm-up calls, 50 CUPTI-timed calls queued behind a 2 x L2 flush, inputs "
           "copied afresh per call, no clock locking); solforge: solforge.evaluate.api."
           "evaluate_candidate (its timing and guards as in the optimize runs) and the eager T_b "
           "timing of solforge.evaluate.baseline (docs/timing_agreement.md).", "",
           "Commands: here `.venv/bin/python benchmarks/compare_sol_execbench.py carry` and `... prepare "
           f"--problems {' '.join(m.get('problems') or ['?'])}`; on the device "
           + (f"`{m.get('command', '?')}` (NVIDIA's CLI, wall {m.get('wall_s', '?')} s) and "
              f"`{m['command_solforge']}` (solforge, wall {m.get('wall_s_solforge', '?')} s); here "
              "`benchmarks/compare_sol_execbench.py merge --nvidia A.json --solforge B.json --out DIR`"
              if m.get("command_solforge") else
              f"`{m.get('command', '?')}` (wall {m.get('wall_s', '?')} s"
              + ("; cut short: the cases finished before the call ended" if m.get("complete") is False
                 else "") + ")")
           + f". solforge commit {m.get('solforge_commit', '?')}.", "",
           "## Summary", "",
           f"- {sm['problems']} problems: {sm['with_kernel']} with a solforge kernel, "
           f"{sm['reference_only']} reference-only, {len(sm['cannot_run'])} cannot run in NVIDIA's "
           f"CLI{': ' + ', '.join(sm['cannot_run']) if sm['cannot_run'] else ''}.",
           f"- Verdicts agree on every workload of {sm['verdicts_agree_problems']} of "
           f"{sm['with_kernel']} kernel problems"
           + (f"; disagreements: {', '.join(sm['verdict_disagreements'])}"
              if sm['verdict_disagreements'] else "") + ".",
           f"- Kernel time within {tol} (geomean per problem): {sm['kernel_within_tol']} of "
           f"{sm['kernel_compared']}; geomean of the ratios {_fmt(sm['geomean_kernel_ratio'], 3)}.",
           f"- Eager reference time within {tol}: {sm['ref_within_tol']} of {sm['ref_compared']}; "
           f"geomean of the ratios {_fmt(sm['geomean_ref_ratio'], 3)}.",
           *([f"- The same over a problem's GPU-bound workloads (the GPU busy "
              f"{_busy_share():.0%} or more of solforge's eager span where recorded, else an "
              f"eager call of {_host_bound_below_ms():g} ms or more): {sm['ref_gpu_bound_within_tol']} of "
              f"{sm['ref_gpu_bound_compared']}; over its host-bound ones: "
              f"{sm['ref_host_bound_within_tol']} of {sm['ref_host_bound_compared']}."]
             if sm.get("ref_gpu_bound_compared") is not None else []),
           *([f"- NVIDIA against itself (reference-only cases: their CLI times the same reference "
              f"as the solution and as the reference, in one process): within {tol} on "
              f"{sm['nvidia_self_within_tol']} of {sm['nvidia_self_compared']}; single workloads "
              f"{_fmt(sm['nvidia_self_range'][0], 2)}x to {_fmt(sm['nvidia_self_range'][1], 2)}x."]
             if sm.get("nvidia_self_compared") else []),
           f"- Workloads left out because their safetensors blobs are missing from the dataset "
           f"copy (NVIDIA's CLI cannot run them): {sm['workloads_blob_missing']}.", "",
           "## Per problem", "",
           "| problem | kind | variant | workloads | solforge passed | NVIDIA passed | verdicts agree "
           f"| kernel ms solforge/NVIDIA (geomean) | within {tol} | eager ref ms solforge/NVIDIA "
           f"(geomean) | within {tol} | NVIDIA rc |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        if c["kind"] == "cannot_run":
            out.append(f"| {c['case']} | cannot run | - | 0 | - | - | - | - | - | - | - | "
                       f"{c.get('reason') or ''} |")
            continue
        out.append(f"| {c['case']} | {c['kind']} | {c['variant']} | {c['n_workloads']} | "
                   f"{c['solforge_passed'] if c['kind'] == 'kernel' else '-'} | "
                   f"{c['nvidia_passed'] if c['kind'] == 'kernel' else '-'} | {c['verdicts_agree']} | "
                   f"{_fmt(c['geomean_kernel_ratio_sf_over_nv'], 3)} | {_fmt(c['kernel_within_tol'])} | "
                   f"{_fmt(c['geomean_ref_ratio_ours_over_nv'], 3)} | {_fmt(c['ref_within_tol'])} | "
                   f"{c['nvidia_rc']} |")
    out += ["", "## Per workload", "",
            "| problem | axes | solforge | NVIDIA | solforge ms | NVIDIA ms | ratio | NVIDIA ref ms | "
            "solforge eager ms | ratio |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        for r in c["rows"]:
            ax = " ".join(f"{k}={v}" for k, v in r["axes"].items())
            out.append(f"| {c['case']} | {ax} | {r['solforge_status'] or '-'} | "
                       f"{r['nvidia_status'] or '-'} | {_fmt(r['solforge_ms'])} | "
                       f"{_fmt(r['nvidia_ms'])} | {_fmt(r.get('ratio_kernel_sf_over_nv'), 3)} | "
                       f"{_fmt(r['nvidia_reference_ms'])} | {_fmt(r['our_eager_ms'])} | "
                       f"{_fmt(r.get('ratio_ref_ours_over_nv'), 3)} |")
    blobs = [(c["case"], b) for c in doc["cases"] for b in c.get("blob_missing", [])]
    if blobs:
        out += ["", "## Workloads NVIDIA's CLI cannot run: safetensors blobs missing", "",
                "The dataset copy lacks these FlashInfer-Bench blobs; their CLI would fail to load "
                "the inputs. solforge synthesizes valid values for them (solforge.evaluate.inputs."
                "synthesize_missing), which cannot be compared, so they are left out of both sides.",
                "", "| problem | workload | axes | blob |", "|---|---|---|---|"]
        for case, b in blobs:
            ax = " ".join(f"{k}={v}" for k, v in b.get("axes", {}).items())
            out.append(f"| {case} | {b['uuid'][:8]} | {ax} | {', '.join(b.get('paths', []))} |")
    if m.get("notes_md"):
        out += ["", m["notes_md"].rstrip()]
    errs = [(c["case"], k, c[k]) for c in doc["cases"] for k in ("solforge_error", "eager_error")
            if c.get(k)]
    if errs:
        out += ["", "## Errors", ""] + [f"- {a}: {k}: {v}" for a, k, v in errs]
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
    return _write_report(Path(args.out), "sol_execbench_compare_h200", doc, render(doc))


# The four timings a `run` records per workload: (row field, what it is)
TIMINGS = (("solforge_ms", "solforge kernel"), ("nvidia_ms", "NVIDIA kernel"),
           ("our_eager_ms", "solforge eager reference"), ("nvidia_reference_ms", "NVIDIA reference"))


def _live_eager(row: dict) -> Optional[float]:
    """solforge's eager reading of a row when this run measured it; a case cut at the deadline
    fills our_eager_ms from baselines_h200.csv (eager_source), which is no reading of this run."""
    return row.get("our_eager_ms") if row.get("eager_source") in (None, "live") else None


def _nvidia_reference_readings(row: dict, reference_only: bool) -> list:
    """NVIDIA's readings of the reference in one row: reference_latency_ms, and in a reference-only
    case also the solution's time (the solution calls the reference: a second reading of it, in
    the same process and window kind)."""
    vals = [row.get("nvidia_reference_ms")] + ([row.get("nvidia_ms")] if reference_only else [])
    return [v for v in vals if v]


def _host_bound_below_ms() -> float:
    from solforge import settings

    return settings.get().eager_windows_below_ms


def _busy_share() -> float:
    from solforge import settings

    return settings.get().host_bound_busy_share


def _host_bound(eager_ms: float, busy_ms: Optional[float], below_ms: float) -> bool:
    """Whether solforge's eager reading of a workload is host time: the GPU busy under
    settings.host_bound_busy_share of the span where the reading knows the GPU's own time per call
    (busy_ms, runs since afdc60a), else the eager T_b's rule (under below_ms a call)."""
    from solforge.evaluate.host_time import is_host_bound

    if busy_ms is not None:
        return is_host_bound(eager_ms, busy_ms)
    return eager_ms < below_ms


def repeatability(docs: list[dict], tol: float = 0.05,
                  host_bound_below_ms: Optional[float] = None) -> dict:
    """Two or more `run`s over the same cases (each side measured once per run): per problem, each
    timing's own repeatability (geomean over workloads of run k / run 1, the worst k) and the cross
    ratios solforge / NVIDIA on the per-workload medians over the runs (NVIDIA's reference: every
    reading of it, _nvidia_reference_readings). A side's own scatter is the floor any agreement
    between the two sides can reach. The reference ratio is also split by workload: host-bound
    (_host_bound: the GPU busy under settings.host_bound_busy_share of solforge's eager span where
    the run recorded it, else the eager reading under host_bound_below_ms, the rule by which the
    eager T_b takes several readings, settings.eager_windows_below_ms by default) and GPU-bound (the
    rest)."""
    if host_bound_below_ms is None:
        host_bound_below_ms = _host_bound_below_ms()
    rows: dict = {}
    for k, d in enumerate(docs):
        for c in d["cases"]:
            ref_only = c.get("kind") == "reference"
            for r in c.get("rows") or []:
                r = {**r, "our_eager_ms": _live_eager(r),
                     "_nv_ref": _nvidia_reference_readings(r, ref_only)}
                rows.setdefault((c["case"], r["uuid"]), {})[k] = r
    problems = {}
    for (case, _uuid), per_run in rows.items():
        problems.setdefault(case, []).append(per_run)
    out = []
    for case, wls in problems.items():
        row = {"case": case, "workloads": len(wls)}
        for field, _label in TIMINGS:
            worst = None
            for k in range(1, len(docs)):
                ratios = [w[k][field] / w[0][field] for w in wls
                          if 0 in w and k in w and w[0].get(field) and w[k].get(field)]
                g = _geomean(ratios)
                if g is not None and (worst is None or abs(math.log(g)) > abs(math.log(worst))):
                    worst = g
            row[f"repeat_{field}"] = worst
        med = {}
        for field, _label in TIMINGS:
            med[field] = [statistics.median(v) if v else None for v in
                          ([w[k][field] for k in w if w[k].get(field)] for w in wls)]
        nv_ref = [statistics.median(v) if v else None
                  for v in ([x for k in w for x in w[k]["_nv_ref"]] for w in wls)]
        row["kernel_sf_over_nv"] = _geomean([a / b for a, b in zip(med["solforge_ms"], med["nvidia_ms"])
                                             if a and b])
        busy = [statistics.median(v) if v else None for v in
                ([w[k]["our_eager_busy_ms"] for k in w if w[k].get("our_eager_ms")
                  and w[k].get("our_eager_busy_ms") is not None] for w in wls)]
        pairs = [(a, b, _host_bound(a, c, host_bound_below_ms))
                 for a, b, c in zip(med["our_eager_ms"], nv_ref, busy) if a and b]
        row["ref_sf_over_nv"] = _geomean([a / b for a, b, _ in pairs])
        row["ref_sf_over_nv_gpu_bound"] = _geomean([a / b for a, b, h in pairs if not h])
        row["ref_sf_over_nv_host_bound"] = _geomean([a / b for a, b, h in pairs if h])
        row["host_bound_workloads"] = sum(h for _, _, h in pairs)
        out.append(row)

    def within(x):
        return x is not None and abs(x - 1.0) <= tol

    summary = {"runs": len(docs), "problems": len(out), "tol": tol,
               "host_bound_below_ms": host_bound_below_ms}
    for key in [f"repeat_{f}" for f, _ in TIMINGS] + list(CROSS_KEYS):
        vals = [r[key] for r in out if r[key] is not None]
        summary[key] = {"compared": len(vals), "within_tol": sum(map(within, vals)),
                        "geomean": _geomean(vals)}
    return {"problems": out, "summary": summary,
            "commands": [d.get("meta", {}).get("command") for d in docs]}


CROSS_KEYS = {"kernel_sf_over_nv": "kernel solforge / NVIDIA",
              "ref_sf_over_nv": "reference solforge / NVIDIA",
              "ref_sf_over_nv_gpu_bound": "reference solforge / NVIDIA, GPU-bound workloads",
              "ref_sf_over_nv_host_bound": "reference solforge / NVIDIA, host-bound workloads"}


def render_repeat(doc: dict) -> str:
    sm, tol = doc["summary"], doc["summary"]["tol"]

    def f(x):
        return "-" if x is None else f"{x:.3f}"

    cols = [(f"repeat_{fld}", f"{label}: run k / run 1") for fld, label in TIMINGS] + list(CROSS_KEYS.items())
    out = ["# Each side twice: repeatability and agreement", "",
           f"{sm['runs']} runs over the same cases: " + " ; ".join(f"`{c}`" for c in doc["commands"]),
           "", f"Ratios are geomeans over a problem's workloads; within = within {tol:.0%}. "
           "The cross ratios use each workload's median over the runs (NVIDIA's reference: every "
           "reading of it, in a reference-only case its time as the solution too). Host-bound "
           f"workloads: the GPU busy under {_busy_share():.0%} of solforge's eager span "
           "where the run recorded its busy time, else solforge's eager reading under "
           f"{sm.get('host_bound_below_ms', 2.0):g} ms a call (the eager T_b's rule for several "
           "readings); GPU-bound: the rest. A case cut at "
           "the deadline has no reading of that run (its CSV fallback is not counted).", "",
           "| measure | problems | within | geomean |", "|---|---|---|---|"]
    for key, label in cols:
        s = sm[key]
        out.append(f"| {label} | {s['compared']} | {s['within_tol']} | {f(s['geomean'])} |")
    out += ["", "| problem | workloads | " + " | ".join(label for _, label in cols) + " |",
            "|---|---|" + "---|" * len(cols)]
    for r in doc["problems"]:
        out.append(f"| {r['case']} | {r['workloads']} | " + " | ".join(f(r[k]) for k, _ in cols) + " |")
    return "\n".join(out) + "\n"


def _write_report(out: Path, stem: str, doc: dict, md: str, echo: bool = True) -> int:
    """OUT/STEM.json and OUT/STEM.md, the markdown printed too when `echo`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / f"{stem}.md").write_text(md)
    if echo:
        print(md)
    return 0


def cmd_repeat(args) -> int:
    doc = repeatability([json.loads(Path(f).read_text()) for f in args.docs])
    return _write_report(Path(args.out), args.stem, doc, render_repeat(doc))


def cmd_combine(args) -> int:
    """Several runs' JSON (e.g. two device calls over two halves of the problem list) as one report."""
    docs = [json.loads(Path(f).read_text()) for f in args.docs]
    index = [e for d in docs for e in d["index"]]
    results = {c["case"]: c["raw"] for d in docs for c in d["cases"]}
    doc = compare(index, results)
    doc["index"] = index
    first = docs[0].get("meta", {})
    doc["meta"] = {**first, "command": " ; ".join(d.get("meta", {}).get("command", "?") for d in docs),
                   "wall_s": round(sum(d.get("meta", {}).get("wall_s") or 0 for d in docs), 1),
                   "problems": [p for d in docs for p in (d.get("meta", {}).get("problems") or [])],
                   "solforge_commit": first.get("solforge_commit")}
    if args.notes:
        doc["meta"]["notes_md"] = Path(args.notes).read_text()
    return _write_report(Path(args.out), args.stem, doc, render(doc))


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
    c = sub.add_parser("carry", help="NVIDIA's source and the wheels their CLI needs, to carry")
    c.add_argument("--dest", default=str(REPO / ".carry" / "sxb"))
    c.add_argument("--mirror", default=str(SXB_MIRROR),
                   help="git directory of NVIDIA/SOL-ExecBench (the fetch tool's mirror)")
    c.add_argument("--wheels", nargs="*", default=list(CARRY_WHEELS))
    c.add_argument("--python-version", default="3.12", help="the GPU box's Python")
    p = sub.add_parser("prepare")
    p.add_argument("--problems", nargs="+", required=True,
                   help="globs under --problems-root (L1/05*), SUBSET/NAME, directories, @FILE")
    p.add_argument("--max-workloads", type=int, default=MAX_WORKLOADS,
                   help="per problem, spread over sizes (0: all)")
    p.add_argument("--reference-only", action="store_true",
                   help="every case's solution is its reference (eager reference times only: their "
                        "CLI builds nothing, so a serial run fits one call)")
    p.add_argument("--no-schema-check", action="store_true",
                   help="skip validating each solution.json with NVIDIA's models (no --sxb here)")
    p.add_argument("--out", default=str(REPO / ".carry" / "sxb" / "cases"))
    p.add_argument("--sxb", default=str(REPO / ".carry" / "sxb" / "repo"),
                   help="a checkout of NVIDIA/SOL-ExecBench (its src/ is imported)")
    # resolved when prepare runs, not here: importing solforge while the parser is built would make
    # `run` evaluate with this tree's solforge instead of the cases' committed snapshot
    p.add_argument("--problems-root", help="the dataset (default: settings.shared_dir/sol_execbench)")
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
    r.add_argument("--deadline-s", type=float, default=540.0,
                   help="stop starting and waiting for either side this many seconds after the start")
    r.add_argument("--jobs", type=int, default=8, help="their CLI processes at a time (nvcc builds)")
    r.add_argument("--cpus", help="the run and every process it starts on these cores (comma "
                                  "list, e.g. 4,5; with --serial: one process at a time on them)")
    r.add_argument("--serial", action="store_true",
                   help="one process on the host at a time: per case NVIDIA's CLI, then solforge's "
                        "side (no build beside any timing; slower: split the list over calls and "
                        "`combine`)")
    mg = sub.add_parser("merge", help="NVIDIA's results from one run's JSON, solforge's from another's")
    mg.add_argument("--nvidia", required=True)
    mg.add_argument("--solforge", required=True)
    mg.add_argument("--out", required=True, help="folder for sol_execbench_compare_h200.{json,md}")
    mg.add_argument("--notes", help="a markdown file appended to the table (findings)")
    cb = sub.add_parser("combine", help="several runs (different problems) as one report")
    cb.add_argument("docs", nargs="+")
    cb.add_argument("--out", required=True)
    cb.add_argument("--notes")
    cb.add_argument("--stem", default="sol_execbench_compare_h200",
                    help="the report's file names, STEM.json and STEM.md (name the card that ran)")
    rp = sub.add_parser("repeat", help="two or more runs of both sides over the same cases: each "
                                      "side's own repeatability beside the cross ratios")
    rp.add_argument("docs", nargs="+")
    rp.add_argument("--out", required=True)
    rp.add_argument("--stem", default="sol_execbench_repeat_h200",
                    help="the report's file names, STEM.json and STEM.md (name the card that ran)")
    g = sub.add_parser("render")
    g.add_argument("json")
    g.add_argument("--out")
    g.add_argument("--json-out", help="write the recomputed JSON here")
    args = ap.parse_args()
    return {"carry": cmd_carry, "prepare": cmd_prepare, "run": cmd_run, "merge": cmd_merge,
            "combine": cmd_combine, "repeat": cmd_repeat, "render": cmd_render}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
