"""CLI: coverage DIR: which problems solforge serves, by what, and why not (owner: compiler).

For each problem in any ingestible place: the families that serve it (hand-written first, the
compiler's plan last), the compiler's segments, whether the first candidate compiles for sm_90a
(--compile), and for an unserved problem the op or pattern that stopped the compiler (one line).
Never stops on a problem: every failure is that problem's reason. --emit OUTDIR writes each served
problem's first candidate as OUTDIR/<subset>__<name>.json (the compiler's with --worker compiler).
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("coverage", help="which problems solforge serves, by what, and why not",
                       description=__doc__.splitlines()[2].strip())
    p.add_argument("path", help="problem directory, SOL-ExecBench tree, or anything `ingest` reads")
    p.add_argument("--compile", action="store_true", help="compile the first candidate for --arch")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--emit", default=None, help="write first candidates here as <subset>__<name>.json")
    p.add_argument("--worker", choices=["first", "compiler"], default="first",
                   help="first: the planner's first candidate; compiler: the compiler's plan")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds for tracing one reference (default: settings' trace_timeout_s)")
    p.add_argument("--problem-timeout", type=float, default=900,
                   help="seconds for one problem's whole line (trace, lowering, compile), in a child "
                        "process; past it the line says so and the next problem starts")
    p.add_argument("--only", default=None, help="only problems whose name contains this")
    p.add_argument("--problems", default=None,
                   help="only these problems: names, SUBSET/name or globs, comma-separated, or "
                        "@FILE with one a line (as every command selects problems)")
    p.add_argument("--jsonl", "--lines", dest="jsonl", default=None,
                   help="append one JSON line per problem to this file")
    p.add_argument("--json", dest="json_out", action="store_true",
                   help="machine-readable output on stdout (same as `solforge --json coverage`)")
    p.add_argument("--resume", action="store_true",
                   help="skip problems the --lines file already has as served by the compiler")
    p.add_argument("--evaluate", action="store_true",
                   help="on a GPU: run the evaluator (correctness on every workload, no timing) on "
                        "each first candidate that compiles")
    p.add_argument("--eval-timeout", type=float, default=600, help="seconds per problem's evaluation")
    p.add_argument("--emulate", action="store_true",
                   help="no GPU needed: run the compiler's plan on the CPU (its kernels built with g++ "
                        "against a CUDA shim) at a shrunk workload and compare with the reference "
                        "(run in the sandbox) under the workload's tolerance")
    p.add_argument("--emulate-cap", type=int, default=8, help="var axes shrunk to at most this")
    p.set_defaults(func=run)


def evaluate_row(problem, cand, timeout: float) -> dict:
    """Correctness of the candidate on every workload, with the evaluator (needs a GPU)."""
    from ..evaluate.api import evaluate_candidate

    try:
        report, _ = evaluate_candidate(problem, cand.model_dump(), timeout_s=timeout, timing=False)
    except Exception as e:  # noqa: BLE001 - one line per problem
        return {"correct": False, "eval_error": f"{type(e).__name__}: {str(e)[:200]}"}
    bad = [r for r in report.results if not r.passed]
    out = {"correct": bool(report.all_passed), "workloads": len(report.results),
           "workloads_failed": len(bad)}
    if bad:
        out["eval_error"] = f"{bad[0].status.value}: {bad[0].message[:200]}"
    return out


def emulate_row(problem, cand, cap: int, timeout: float) -> dict:
    """The compiler's plan emulated on the CPU against the sandboxed reference (compiler/check.py), in
    a forked child with a wall-clock limit: a slow emulation (big constant dims) or a crash of the
    g++-built code costs this problem's line only."""
    from ..compiler.check import check_problem
    from ..forked import run_forked

    got = run_forked(check_problem, (problem, cap, cand, timeout), timeout + 30)
    r = got.value if got.ok else {"ok": False, "stage": "emulate",
                                  "reason": "timed out" if got.timed_out else got.why}
    # True / False: the comparison's verdict; None: no verdict (the emulation or the reference
    # timed out or failed), which is not a wrong answer
    out = {"emulated": bool(r.get("ok")) if r.get("stage") == "check" else None}
    if not r.get("ok"):
        out["emulate_error"] = f"{r.get('stage')}: {str(r.get('reason'))[:200]}"
    return out


def _compiler_first(problem, out):
    """The compiler family's first candidate (its default point: the GEMM template where the plan
    has matmuls and the template takes them, else the generic plan `out` already holds)."""
    if not out.ok:
        return None
    from ..kernels.compiled import CompiledFamily

    fam = CompiledFamily()
    try:
        return fam.instantiate(problem, fam.default_params(problem))
    except Exception:  # noqa: BLE001 - the template's failure leaves the generic plan first
        return out.candidate


def _unserved_row(problem) -> dict:
    return {"problem": problem.name, "subset": problem.subset or "", "served": False,
            "families": [], "first": None, "segments": {}, "compiles": None, "reason": ""}


def cover_problem(problem, do_compile: bool, arch: str, timeout: float, worker: str) -> dict:
    from ..compiler.api import compile_problem

    row = _unserved_row(problem)
    t0 = time.time()
    # the trace (the reference's code) runs in a child process with its own timeout; no alarm
    # here: an exception raised at an arbitrary point (mid-import) would poison this process
    try:
        fams = []
        try:
            if worker == "compiler":
                raise LookupError  # the compiler's own coverage: hand-written families not asked
            from ..kernels import FAMILIES, GENERIC, COMPILER, _offered

            specific = [f for f in FAMILIES if f not in GENERIC and f is not COMPILER
                        and _offered(f, problem) and f.matches(problem)]
            fams = specific or [f for f in GENERIC if _offered(f, problem) and f.matches(problem)]
        except LookupError:
            pass
        except Exception as e:  # noqa: BLE001 - a family's matcher failing is that family's problem
            row["family_error"] = f"{type(e).__name__}: {e}"[:200]
        out = compile_problem(problem, timeout_s=timeout)
        row["compiler"] = out.ok
        row["segments"] = out.segments
        row["ops"] = out.ops
        if not out.ok:
            row["reason"] = f"{out.stage}: {out.reason}"
        names = [f.name for f in fams] + (["compiler"] if out.ok else [])
        row["families"] = names
        row["served"] = bool(names)
        cand = None
        if worker == "compiler":
            cand = _compiler_first(problem, out)
            row["first"] = "compiler" if out.ok else None
        elif fams:
            try:
                cand = fams[0].instantiate(problem)
                row["first"] = fams[0].name
            except Exception as e:  # noqa: BLE001
                row["reason"] = f"{fams[0].name}: instantiate failed: {e}"[:300]
                cand = _compiler_first(problem, out)
                row["first"] = "compiler" if out.ok else None
        elif out.ok:
            cand = _compiler_first(problem, out)
            row["first"] = "compiler"
        row["candidate"] = cand
        if cand is not None:
            row["launches"] = launches_by_variant(cand)
            if row["first"] == "compiler":
                from ..kernels.compiled import GEMM_LOWERING, GEMM_PARAM

                # which matmul lowering the first plan takes (the template only while the plan's
                # source stays under settings.template_first_max_kb)
                row["gemm_first"] = GEMM_LOWERING.get((cand.params or {}).get(GEMM_PARAM))
        if do_compile and cand is not None:
            from ..compile import compile_candidate

            res = compile_candidate(cand, arch=arch)
            row["compiles"] = bool(res.ok)
            if not res.ok:
                log = [l for l in res.log.splitlines() if "error" in l] or res.log.splitlines() or [""]
                row["compile_error"] = log[0][:300]
    except Exception as e:  # noqa: BLE001 - the command never stops on one problem
        row["reason"] = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    row["seconds"] = round(time.time() - t0, 1)
    return row


def launches_by_variant(cand) -> dict:
    """Kernel launches per call of each structure the plan serves, keyed by the variant's `when`
    (its sizes' test; "all" for a plan of one structure, "device" for a variant selected on the
    device, whose launches all run and return early)."""
    unguarded = "device" if any(launch.when for launch in cand.launches) else "all"
    out: dict = {}
    for launch in cand.launches:
        key = launch.when or unguarded
        out[key] = out.get(key, 0) + 1
    return out


def cover_problem_boxed(problem, do_compile: bool, arch: str, timeout: float, worker: str,
                        box_s: float) -> dict:
    """cover_problem in a forked child with a wall-clock limit: the lowering runs in-process and a
    large unrolled graph once took over 15 minutes, so one problem must not hold the whole command.
    The compiler's and the tracers' disk caches carry what a child learned to the next one."""
    from ..forked import run_forked

    t0 = time.time()
    # a module global looked up here, so that a test's stand-in reaches the child
    got = run_forked(cover_problem, (problem, do_compile, arch, timeout, worker), box_s)
    if got.ok:
        return got.value
    row = _unserved_row(problem)
    row["reason"] = got.stopped("trace, lowering and compile")
    row["seconds"] = round(time.time() - t0, 1)
    return row


def run(args) -> int:
    from ..problem.sources import ingest_path
    from .output import console, emit_json

    from ..settings import Settings

    want_json = bool(getattr(args, "json", False) or args.json_out)
    if args.timeout is None:
        args.timeout = Settings.load().trace_timeout_s
    rep = ingest_path(args.path)
    problems = sorted(rep.problems, key=lambda p: ((p.subset or ""), p.name))
    if args.only:
        problems = [p for p in problems if args.only in p.name]
    if args.problems:
        from ..problem.select import expand_file, select

        chosen = set(select([(p.name, p.subset) for p in problems], expand_file(args.problems)))
        problems = [p for p in problems if (p.name, p.subset) in chosen]
    if args.resume and args.jsonl and Path(args.jsonl).exists():
        done = set()
        for line in Path(args.jsonl).read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("compiler") and r.get("compiles") is not False:
                done.add((r.get("subset") or "", r.get("problem")))
        problems = [p for p in problems if ((p.subset or ""), p.name) not in done]
    emit = Path(args.emit) if args.emit else None
    if emit:
        emit.mkdir(parents=True, exist_ok=True)
    rows = []
    c = console()
    for p in problems:
        row = cover_problem_boxed(p, args.compile, args.arch, args.timeout, args.worker,
                                  args.problem_timeout)
        cand = row.pop("candidate", None)
        if emit and cand is not None:
            name = f"{row['subset']}__{row['problem']}.json".replace("/", "_")
            (emit / name).write_text(json.dumps(cand.model_dump(), indent=1))
        if args.evaluate and cand is not None and row["compiles"] is not False:
            row.update(evaluate_row(p, cand, args.eval_timeout))
        if args.emulate and cand is not None and row["first"] == "compiler" and row["compiles"] is not False:
            row.update(emulate_row(p, cand, args.emulate_cap, args.timeout))
        rows.append(row)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
        if not want_json:
            status = "served" if row["served"] else "-"
            comp = {True: "compiles", False: "COMPILE-ERROR", None: ""}[row["compiles"]]
            why = row["reason"] if not row["served"] or row["compiles"] is False else ""
            emu = {True: "emulated-correct", False: "EMULATED-WRONG", None: ""}[row.get("emulated")]
            if "emulated" in row and row["emulated"] is None:
                emu = "emulation: no verdict"
            c.print(f"{row['subset']}/{row['problem']}: {status} {','.join(row['families'])} "
                    f"{comp} {emu} {row.get('compile_error', '')} {row.get('emulate_error', '')} {why}",
                    markup=False, highlight=False)
    served = [r for r in rows if r["served"]]
    ok = [r for r in served if r["compiles"]] if args.compile else served
    summary = {"problems": len(rows), "served": len(served), "compiler": sum(bool(r.get("compiler"))
                                                                             for r in rows),
               "served_and_compiles": len(ok) if args.compile else None,
               "ingest_errors": [str(e) for e in rep.errors]}
    if args.evaluate:
        summary["correct"] = sum(bool(r.get("correct")) for r in rows)
    if args.emulate:
        summary["emulated"] = sum("emulated" in r for r in rows)
        summary["emulated_correct"] = sum(r.get("emulated") is True for r in rows)
        summary["emulated_wrong"] = sum(r.get("emulated") is False for r in rows)
        summary["emulate_no_verdict"] = sum("emulated" in r and r["emulated"] is None for r in rows)
    if want_json:
        emit_json({"summary": summary, "problems": rows})
    else:
        c.print(json.dumps(summary), markup=False, highlight=False)
    return 0
