"""Check exported solutions on the GPU: the torch op gives the evaluator's result, and (optionally)
NVIDIA's own sol-execbench CLI accepts and runs the exported solution.json.

Two steps, because the GPU box has no DuckDB:

  # 1. here (CPU, with the store): export the best attempt of each problem into a carry folder
  python -m solforge.export.gpu_check prepare --db h200.duckdb --out .carry/export_check \
      069_rms_norm 033_post_norm_residual

  # 2. on the H200 (device run; pydantic from .whl as usual):
  python3 -m solforge.export.gpu_check check --dir .carry/export_check --out $OUT/export_check.json \
      [--sol-execbench /path/to/SOL-ExecBench]

`check`, per problem and workload (random inputs, seeded per workload): runs the candidate through the
evaluator's own runtime (solforge.compile.launcher, what solforge.evaluate launches), through the
exported torch op, and the problem's reference; reports whether op == evaluator bit for bit and both
within the workload's tolerance of the reference; with --build-solution also the solution.json's own C++
entry (built by torch.utils.cpp_extension with nvcc, as SOL-ExecBench builds it) against the evaluator. It then runs solforge's evaluator
(solforge.evaluate.api.evaluate_candidate) for its verdict. With --sol-execbench it also runs
`sol_execbench.cli.main` (their CLI, from that checkout's src/) on the exported solution.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..settings import REPO_ROOT as REPO


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from ..settings import get

    return get().shared_dir


def prepare_one(att, d: Path, problems_root: Path) -> dict:
    """One attempt's export folder: solution/ (CUDA C++ only), op/ (torch op package), problem/,
    candidate.json and, for a CuTe DSL candidate, prebuilt/: its cubin precompiled here, which the
    box's compile step needs because the box has no DSL (solforge.compile.cute_prebuilt)."""
    from solforge.compile.api import compile_candidate
    from solforge.compile.cute_prebuilt import write_prebuilt
    from solforge.export import ExportError
    from solforge.export.solution import write_solution
    from solforge.export.torch_op import write_torch_op

    prob = att.problem_name
    if d.exists():
        shutil.rmtree(d)
    try:
        write_solution(att, d / "solution")
        has_solution = True
    except ExportError as e:  # CuTe DSL candidates: torch op only
        print(f"{prob}: no solution.json: {e}")
        has_solution = False
    res = compile_candidate(att.candidate)
    if not res.ok:
        raise ExportError(f"{prob}: attempt {att.attempt_id} does not compile here:\n{res.log[:2000]}")
    pdir = write_torch_op(att, d / "op", compiled=res)
    if att.candidate.language == "cute":
        write_prebuilt(d / "prebuilt", att.candidate, res)
    src = next(Path(problems_root).glob(f"*/{prob}"))
    shutil.copytree(src, d / "problem")
    (d / "candidate.json").write_text(json.dumps(att.candidate.model_dump(), indent=1))
    return {"problem": prob, "attempt": att.attempt_id, "package": pdir.name,
            "solution": has_solution, "language": att.candidate.language,
            "cubin_hash": res.cubin_hash, "sol_score": att.sol_score, "speedup": att.speedup}


def cmd_prepare(args) -> int:
    from solforge.export import load_attempt
    from solforge.store import Store

    s = Store(args.db)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for prob in args.problems:
        att = load_attempt(s, f"best:{prob}")
        d = out / prob
        index.append(prepare_one(att, d, Path(args.problems_root)))
        print(f"{prob}: attempt {att.attempt_id[:12]} -> {d}")
    (out / "index.json").write_text(json.dumps(index, indent=1))
    return 0


def use_prebuilt(d: Path) -> None:
    """Point the compile step at every export's precompiled CuTe cubins. Before the compile worker
    starts: it reads the variable once, at its own start."""
    import os

    from solforge.compile.cute_prebuilt import ENV

    dirs = [str(p) for p in sorted(Path(d).resolve().glob("*/prebuilt")) if p.is_dir()]
    old = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    os.environ[ENV] = os.pathsep.join(dict.fromkeys(dirs + old))


def evaluator_parts(cand) -> tuple[dict, dict]:
    """(cubins, manifest) as solforge.evaluate gets them on this machine: compile_candidate, which on
    a box without the CuTe DSL answers from the precompiled folder. The first H200 run's failure (2026-11-30)
    ("kernel 'rmsnorm_cute' has no entry in the compile manifest") was this compile failing (no DSL
    on the box) and its empty manifest being used anyway."""
    from solforge.compile.api import compile_candidate
    from solforge.compile.launcher import resolve_entries

    res = compile_candidate(cand)
    if not res.ok:
        raise RuntimeError(f"the evaluator's compile failed here ({res.status.value}): {res.log[:1500]}")
    manifest = res.launch_manifest()
    resolve_entries(cand.model_dump(), manifest, res.cubins)
    return res.cubins, manifest


def _tolerant(a, b, tol) -> tuple[bool, float]:
    a, b = a.float(), b.float()
    ok = (a - b).abs() <= tol.max_atol + tol.max_rtol * b.abs()
    ratio = ok.float().mean().item()
    return ratio >= tol.required_matched_ratio, ratio


def build_solution(d: Path, entry: dict, args):
    """The exported solution.json built the way SOL-ExecBench builds a torch-bound CUDA C++ solution
    (torch.utils.cpp_extension.load over its sources with its compile options; needs nvcc)."""
    from torch.utils.cpp_extension import load

    sol = json.loads((d / "solution" / "solution.json").read_text())
    opts = sol["spec"]["compile_options"]
    srcs = [str(d / "solution" / f["path"]) for f in sol["sources"] if f["path"].endswith(".cu")]
    build = Path(args.build_dir) / entry["package"]
    build.mkdir(parents=True, exist_ok=True)
    return load(name=f"sol_{entry['package']}", sources=srcs, extra_cflags=opts.get("cflags") or [],
                extra_cuda_cflags=opts.get("cuda_cflags") or [], extra_ldflags=opts.get("ld_flags") or [],
                build_directory=str(build), verbose=False)


def check_one(entry: dict, d: Path, args) -> dict:
    import torch

    from solforge.candidate import Candidate
    from solforge.compile.launcher import CandidateRuntime
    from solforge.problem.loader import load_problem_dir

    problem = load_problem_dir(d / "problem", d.parent.name)
    cand = Candidate.model_validate_json((d / "candidate.json").read_text())
    cubins, manifest = evaluator_parts(cand)
    rt = CandidateRuntime(cand.model_dump(), cubins, manifest)
    sys.path.insert(0, str(d / "op"))
    importlib.import_module(entry["package"])
    op = getattr(torch.ops.solforge, entry["package"])
    ns: dict = {}
    exec(problem.definition.reference, ns)  # noqa: S102 - the problem's own reference
    ref = ns["run"]
    defn = problem.definition
    sol = build_solution(d, entry, args) if getattr(args, "build_solution", False) and entry.get("solution") else None
    rows = []
    for i, w in enumerate(problem.workloads[: args.max_workloads]):
        g = torch.Generator(device="cuda").manual_seed(1000 + i)
        scal = w.axes_and_scalars()
        inputs = {k: (scal[k] if s.shape is None else
                      torch.randn(w.input_shapes[k], generator=g, device="cuda").to(getattr(torch, s.dtype)))
                  for k, s in defn.inputs.items()}
        outs_eval = {k: torch.empty(w.output_shapes[k], dtype=getattr(torch, s.dtype), device="cuda")
                     for k, s in defn.outputs.items()}
        tensors = {k: v for k, v in inputs.items() if hasattr(v, "data_ptr")}
        scalars = {k: v for k, v in inputs.items() if not hasattr(v, "data_ptr")}
        rt.launch_all({**tensors, **outs_eval}, dict(w.axes), scalars)
        got = op(*inputs.values())
        got = got if isinstance(got, tuple) else (got,)
        want = ref(*inputs.values())
        want = want if isinstance(want, tuple) else (want,)
        torch.cuda.synchronize()
        outs_sol = None
        if sol is not None:  # the solution.json's C++ entry, destination passing style
            outs_sol = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else torch.zeros_like(v)
                        for k, v in outs_eval.items()}
            sol.run(*inputs.values(), *outs_sol.values())
            torch.cuda.synchronize()
        row = {"workload": w.workload.uuid, "axes": dict(w.axes), "outputs": []}
        for (name, ev), o, r in zip(outs_eval.items(), got, want):
            same = bool(torch.equal(ev, o))
            ok_op, ratio_op = _tolerant(o, r, w.workload.tolerance)
            ok_ev, ratio_ev = _tolerant(ev, r, w.workload.tolerance)
            row["outputs"].append({"name": name, "op_equals_evaluator_runtime": same,
                                   "op_within_tolerance": ok_op, "op_matched_ratio": ratio_op,
                                   "evaluator_within_tolerance": ok_ev})
            if outs_sol is not None:
                row["outputs"][-1]["solution_equals_evaluator_runtime"] = bool(torch.equal(ev, outs_sol[name]))
        rows.append(row)
    out = {"problem": entry["problem"], "attempt": entry["attempt"], "workloads": rows,
           "all_equal": all(o["op_equals_evaluator_runtime"] and o.get("solution_equals_evaluator_runtime", True)
                            for r in rows for o in r["outputs"]),
           "solution_built": sol is not None,
           "all_within_tolerance": all(o["op_within_tolerance"] for r in rows for o in r["outputs"])}
    try:
        from solforge.evaluate.api import evaluate_candidate

        report, _ = evaluate_candidate(problem, cand, timing=False)
        out["solforge_evaluator"] = {r.workload_uuid if hasattr(r, "workload_uuid") else str(i):
                                     getattr(r.status, "value", str(r.status))
                                     for i, r in enumerate(report.results)}
    except Exception as e:  # noqa: BLE001 - the check above stands on its own
        out["solforge_evaluator_error"] = f"{type(e).__name__}: {e}"[:500]
    if args.sol_execbench and entry.get("solution"):
        src = Path(args.sol_execbench) / "src"
        t0 = time.time()
        p = subprocess.run([sys.executable, "-c", "from sol_execbench.cli.main import cli; cli()",
                            str(d / "problem"), "--solution", str(d / "solution" / "solution.json"),
                            "--json"], capture_output=True, text=True, timeout=args.timeout_s,
                           env={**__import__("os").environ, "PYTHONPATH": f"{src}"})
        out["sol_execbench"] = {"rc": p.returncode, "seconds": round(time.time() - t0, 1),
                                "stdout_tail": p.stdout[-4000:], "stderr_tail": p.stderr[-3000:]}
    return out


def cmd_check(args) -> int:
    d = Path(args.dir)
    index = json.loads((d / "index.json").read_text())
    use_prebuilt(d)
    results = []
    for entry in index:
        try:
            r = check_one(entry, d / entry["problem"], args)
        except Exception as e:  # noqa: BLE001 - one broken export must not hide the others
            r = {"problem": entry["problem"], "error": f"{type(e).__name__}: {e}"[:2000]}
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "workloads"})[:1500], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    ok = all(r.get("all_equal") and r.get("all_within_tolerance") for r in results)
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--db", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--problems-root", default=str(_shared_dir() / "sol_execbench"))
    p.add_argument("problems", nargs="+")
    c = sub.add_parser("check")
    c.add_argument("--dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--max-workloads", type=int, default=8)
    c.add_argument("--sol-execbench", help="path to a checkout of NVIDIA/SOL-ExecBench")
    c.add_argument("--build-solution", action="store_true",
                   help="also build each solution.json with torch.utils.cpp_extension (nvcc) and check its "
                        "C++ entry's outputs against the evaluator's, bit for bit")
    c.add_argument("--build-dir", default="/tmp/solforge_solution_build")
    c.add_argument("--timeout-s", type=int, default=300)
    args = ap.parse_args()
    return cmd_prepare(args) if args.cmd == "prepare" else cmd_check(args)


if __name__ == "__main__":
    raise SystemExit(main())
