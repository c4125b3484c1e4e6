#!/usr/bin/env python3
"""Every problem's first candidate through the evaluator, on every workload: the coverage sweep.

Which problems does solforge serve with a kernel that is correct on every workload? This stages, on
the CPU, one candidate per (problem, worker) for every problem of a dataset: the planner's first
candidate (the first family `families_for` offers) and the trace-driven compiler's plan, compiles
each for the target arch, and writes a stage the evaluator's driver runs as it is (the same stage the
optimize loop writes: correctness rounds with fresh inputs, poisoned outputs, timing, guards). On the
GPU box `run` evaluates the stages, several driver processes at a time (verdicts do not depend on
it; timings taken this way are not reported: the optimize pass times one candidate at a time).

    prepare (CPU)  .venv/bin/python benchmarks/first_candidate_sweep.py prepare \
                       --dataset ../shared/sol_execbench --out .carry/sweep
    run     (GPU)  python3 benchmarks/first_candidate_sweep.py run --dir .carry/sweep --out $OUT \
                       --parallel 4 --deadline-s 540
    table   (CPU)  .venv/bin/python benchmarks/first_candidate_sweep.py table --dir .carry/sweep \
                       --results RESULTS.jsonl [--json]   (several runs: --dir and --results in run order)

`run` appends one JSON line per stage to OUT/sweep_results.jsonl as it finishes (a call cut short
keeps what it measured; a second `run` with `--skip-done FILE` continues). `table` prints one line per
problem: served or not (and why), the worker, workloads passed of total, and the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The sweep asks for verdicts: fewer timing reps than an optimize run, the same correctness rounds.
SWEEP_SETTINGS = {"rep_count": 10, "warmup_ms": 5.0}


def _problem_dirs(dataset: Path, only: list[str]) -> list[Path]:
    import fnmatch

    dirs = sorted(p.parent for p in dataset.glob("*/*/definition.json"))
    if only:
        dirs = [d for d in dirs if any(fnmatch.fnmatch(f"{d.parent.name}/{d.name}", pat) or
                                       fnmatch.fnmatch(d.name, pat) for pat in only)]
    return dirs


def _candidates(problem, workers: list[str]) -> list[tuple[str, object]]:
    """(worker label, Candidate) for each asked worker that serves the problem. A worker is 'first'
    (the planner's first family, its first point), a family name (its first point), or NAME@I (the
    I-th point of that family's param space, e.g. compiler@1: the compiler's second lowering)."""
    from solforge.kernels import families_for, get_family

    out, seen = [], set()
    for w in workers:
        name, _, idx = w.partition("@")
        i = int(idx or 0)
        if name == "first":
            fams = families_for(problem)
            fam = fams[0] if fams else None
        else:
            fam = get_family(name)
            fam = fam if fam.matches(problem) else None
        if fam is None:
            continue
        label = fam.name if i == 0 else f"{fam.name}@{i}"
        if label in seen:
            continue
        space = fam.param_space(problem)
        if i >= len(space):
            continue
        seen.add(label)
        out.append((label, fam.instantiate(problem, space[i])))
    return out


def _stage_one(pdir: Path, workers: list[str], out: Path, arch: str, t_sol: bool = True) -> list[dict]:
    from solforge.agents.lab import Lab
    from solforge.compile import compile_candidate
    from solforge.evaluate.runner import stage_candidate
    from solforge.problem import load_problem_dir

    # The optimize loop's job (one builder), with fewer timing reps: the sweep asks for verdicts.
    lab = Lab(arch=arch, gpu_profile="h200", has_gpu=False, eval_settings=SWEEP_SETTINGS)

    problem = load_problem_dir(pdir, subset=pdir.parent.name)
    key = f"{pdir.parent.name}/{pdir.name}"
    rows = []
    try:
        cands = _candidates(problem, workers)
    except Exception as e:  # noqa: BLE001 - a matcher's failure is this problem's line, not the run's
        return [{"problem": key, "worker": None, "staged": False, "reason": f"matching failed: {e}"}]
    if not cands:
        return [{"problem": key, "worker": None, "staged": False, "reason": _why_unserved(problem)}]
    for order, (worker, cand) in enumerate(cands):
        res = compile_candidate(cand, arch)
        row = {"problem": key, "worker": worker, "staged": False, "order": order}
        if not res.ok:
            row["reason"] = f"compile {res.status.value}: " + (res.log or "").strip().splitlines()[-1][:200] \
                if (res.log or "").strip() else f"compile {res.status.value}"
            rows.append(row)
            continue
        stage = f"{pdir.parent.name}__{pdir.name}__{worker.replace('@', '_p')}"
        if t_sol:
            job = lab.eval_job(problem)
        else:  # verdicts only: no roofline (the SOL-floor guard is off), the same one job builder
            from solforge import settings
            from solforge.evaluate.job import build_job

            job = build_job(problem, settings.get(), overrides=SWEEP_SETTINGS)
        job.pop("blob_roots", None)  # the GPU box has no dataset: absent blobs are synthesized
        stage_candidate(out / stage, problem, candidate=cand, compile_result=res, job=job)
        rows.append({**row, "staged": True, "stage": stage,
                     "workloads": len(problem.workloads), "launches": len(cand.launches)})
    return rows


def _why_unserved(problem) -> str:
    """The compiler's one-line reason (the op or pattern that stopped it)."""
    try:
        from solforge.compiler.api import compile_problem

        out = compile_problem(problem)
        return f"compiler: {out.reason}" if not out.ok else "no worker offered"
    except Exception as e:  # noqa: BLE001
        return f"compiler: {type(e).__name__}: {e}"[:200]


def _prepare_one(pdir: Path, workers: list[str], out: Path, arch: str, t_sol: bool,
                 box_s: float = 600.0) -> list[dict]:
    """One problem's stages, made in a forked child with a wall-clock limit (as `solforge coverage`
    does): the compiler's lowering runs in-process after its time-boxed trace, and one problem's
    lowering once held its worker for over an hour; a stage the child began is left unlisted."""
    from solforge.forked import run_forked

    t0 = time.time()
    # a module global looked up here, so that a test's stand-in reaches the child
    got = run_forked(_stage_one, (pdir, workers, out, arch, t_sol), box_s)
    rows = got.value if got.ok else [{"problem": f"{pdir.parent.name}/{pdir.name}", "worker": None,
                                      "staged": False,
                                      "reason": got.stopped("trace, lowering and compile")}]
    for r in rows:
        r["prepare_s"] = round(time.time() - t0, 1)
    return rows


def cmd_prepare(a) -> None:
    from concurrent.futures import ProcessPoolExecutor

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    workers = a.workers.split(",")
    rows = []
    dirs = _problem_dirs(Path(a.dataset), a.only)
    # Problems are independent: a process each (tracing and compiling are CPU-bound).
    with ProcessPoolExecutor(max(1, a.jobs)) as ex:
        futs = {ex.submit(_prepare_one, d, workers, out, a.arch, not a.no_tsol, a.box_s): d
                for d in dirs}
        for f in as_completed(futs):
            try:
                got = f.result()
            except Exception as e:  # noqa: BLE001 - a worker that died is that problem's line
                d = futs[f]
                got = [{"problem": f"{d.parent.name}/{d.name}", "worker": None, "staged": False,
                        "reason": f"prepare process failed: {e}"}]
            for r in got:
                print(f"{r['problem']:<70} {r.get('worker') or '-':<18} "
                      f"{'staged' if r['staged'] else r.get('reason', '')}", flush=True)
            rows += got
            (out / "staged.json").write_text(json.dumps(sorted(rows, key=lambda r: r["problem"]), indent=1))
    n = sum(r["staged"] for r in rows)
    print(f"staged {n} candidate(s) for {len({r['problem'] for r in rows if r['staged']})} problem(s) "
          f"of {len({r['problem'] for r in rows})} under {out}")


def cmd_run(a) -> None:
    from solforge.evaluate import gpu_share, runner

    d = Path(a.dir)
    dest = Path(a.out or os.environ.get("OUT") or ".")
    dest.mkdir(parents=True, exist_ok=True)
    res_path = dest / "sweep_results.jsonl"
    done, solved = set(), set()
    for f in a.skip_done or []:
        for line in Path(f).read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                done.add(rec["stage"])
                if sum(w["status"] == "passed" for w in rec.get("results") or []) == rec.get("workloads"):
                    solved.add(rec["problem"])  # its later candidates are not needed any more
    staged = [r for r in json.loads((d / "staged.json").read_text())
              if r["staged"] and r["stage"] not in done and r["problem"] not in solved]
    t_end = time.time() + a.deadline_s

    # Lanes share the GPU: each evaluation times alone (gpu_share: correctness side by side, timing
    # exclusive), so the times are the kernel's own; a stage too big to share the GPU's memory (its
    # largest workload's two input sets and outputs over ALONE_BYTES), or one that ran out of memory
    # beside the others, runs alone (once more, at the end).
    # (the lock files live outside OUT: a device call brings back only a few files)
    share = str(Path(tempfile.mkdtemp(prefix="sweep-share-")) / "gpu_share.lock") if a.parallel > 1 else ""
    # --no-timing: verdicts only, correctness rounds on every workload. Timing is what lanes take
    # turns for (each times alone); a slow generic kernel's duty-cycled timing held the GPU for
    # minutes and starved every other lane. The optimize pass times. Each stage's job is set to this
    # run's choice either way, so a later run on the same folder gets its own.
    for r in staged:
        jf = d / r["stage"] / "job.json"
        job = json.loads(jf.read_text())
        if job.setdefault("settings", {}).get("timing", True) != (not a.no_timing):
            job["settings"]["timing"] = not a.no_timing
            jf.write_text(json.dumps(job))

    def one(r: dict) -> dict:
        left = t_end - time.time()
        if left < 20:
            return {**r, "skipped": "deadline"}
        t0 = time.time()
        alone = bool(share) and (r.get("alone") or _stage_bytes(d / r["stage"]) > ALONE_BYTES)
        if alone:
            with gpu_share.alone(share):
                rep = runner.run_stage(d / r["stage"], timeout_s=min(a.timeout, t_end - time.time() - 5))
        else:
            # --timeout counts the stage's own time; its waits for lanes that hold the GPU alone
            # count against the run's deadline only (14 lanes once starved the big plans of a 150 s
            # limit that counted both)
            rep = runner.run_stage(d / r["stage"], timeout_s=min(a.timeout, left - 5),
                                   wall_cap_s=max(left - 5, 1.0),
                                   env={gpu_share.ENV: share} if share else None)
        wl = [{"uuid": x.workload_uuid, "status": x.status.value, "median_ms": x.median_ms,
               "message": (x.message or "")[:240]} for x in rep.results]
        rec = {**r, "wall_s": round(time.time() - t0, 1), "exit_code": rep.exit_code, "results": wl,
               "alone": alone}
        if rep.exit_code not in (0, None):  # the driver died: its last words say why
            err = d / r["stage"] / "driver.stderr"
            rec["stderr_tail"] = err.read_text(errors="replace")[-1500:] if err.exists() else ""
        return rec

    # --fallback: a problem's next candidate (the next worker staged for it) runs only when the one
    # before it was not correct on every workload; without it every staged candidate runs.
    groups: dict[str, list[dict]] = {}
    for r in sorted(staged, key=lambda r: r.get("order", 0)):
        groups.setdefault(r["problem"], []).append(r)
    if a.fallback:
        queue = [g[0] for g in groups.values()]
        later = {p: g[1:] for p, g in groups.items()}
    else:
        queue, later = list(staged), {}
    queue.sort(key=lambda r: r["workloads"])  # small first: a cut run keeps the most verdicts
    lock = threading.Lock()

    def lane(fh) -> None:
        while True:
            with lock:
                if not queue:
                    return
                r = queue.pop(0)
            rec = one(r)
            if rec.get("skipped"):
                continue
            ok = sum(w["status"] == "passed" for w in rec["results"])
            with lock:
                fh.write(json.dumps(rec, default=str) + "\n")
                fh.flush()
                if share and not rec["alone"] and any(w["status"] == "oom" for w in rec["results"]):
                    queue.append({**r, "alone": True})    # once more, alone, at the end
                    continue
                if ok < rec["workloads"] and later.get(rec["problem"]):
                    # after every first candidate: a cut run keeps the most first-candidate verdicts
                    queue.append(later[rec["problem"]].pop(0))
            first_bad = next((w for w in rec["results"] if w["status"] != "passed"), None)
            print(f"{rec['problem']:<64} {rec['worker']:<16} {ok}/{rec['workloads']} passed "
                  f"{rec['wall_s']:6.1f} s" + (f"  {first_bad['status']}: {first_bad['message'][:100]}"
                                               if first_bad else ""), flush=True)

    with open(res_path, "a") as fh:
        threads = [threading.Thread(target=lane, args=(fh,)) for _ in range(max(1, a.parallel))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


ALONE_BYTES = 8e9


def _stage_bytes(stage: Path) -> float:
    """The largest workload's device bytes (two input sets and the outputs), 0 if unknown."""
    from solforge.baselines.plan import workload_bytes

    return max(workload_bytes(stage) or [0.0])


def verdicts(staged: list[dict], results: list[dict]) -> list[dict]:
    """One row per problem: the best worker's verdict (correct on every workload beats partial)."""
    by_stage = {r["stage"]: r for r in results}
    problems: dict[str, dict] = {}
    for s in staged:
        row = problems.setdefault(s["problem"], {"problem": s["problem"], "workers": {}, "reasons": []})
        if not s["staged"]:
            if s.get("worker"):
                row["workers"][s["worker"]] = {"verdict": "compile error", "detail": s.get("reason", "")}
            else:
                row["reasons"].append(s.get("reason", ""))
            continue
        r = by_stage.get(s["stage"])
        if r is None:
            row["workers"][s["worker"]] = {"verdict": "not run", "detail": ""}
            continue
        ok = sum(w["status"] == "passed" for w in r["results"])
        n = s["workloads"]
        bad = next((w for w in r["results"] if w["status"] != "passed"), None)
        verdict = "correct" if ok == n and n > 0 else ("partial" if ok else "failed")
        if s.get("order", 0) == 0:
            row["first_verdict"] = verdict
        row["workers"][s["worker"]] = {"verdict": verdict, "passed": ok, "total": n,
                                       "detail": f"{bad['status']}: {bad['message'][:120]}" if bad else ""}
    rank = {"correct": 0, "partial": 1, "failed": 2, "compile error": 3, "not run": 4}
    out = []
    for p in sorted(problems.values(), key=lambda x: x["problem"]):
        ws = sorted(p["workers"].items(), key=lambda kv: rank[kv[1]["verdict"]])
        best = ws[0] if ws else None
        out.append({"problem": p["problem"], "served": bool(ws),
                    "worker": best[0] if best else None,
                    "verdict": best[1]["verdict"] if best else "unserved",
                    "passed": best[1].get("passed") if best else None,
                    "total": best[1].get("total") if best else None,
                    "detail": (best[1]["detail"] if best else "; ".join(p["reasons"]))[:160],
                    "first_verdict": p.get("first_verdict"),
                    "all": {k: v["verdict"] for k, v in ws}})
    return out


def _combined(dirs: list[str], results: list[str]) -> tuple[list[dict], list[dict]]:
    """Several runs as one: a problem's staged rows come from the last run that prepared it, and a
    stage's result from the last results file that holds it (a later run re-evaluated it)."""
    by_problem: dict[str, list[dict]] = {}
    for d in dirs:
        p = Path(d)
        rows = json.loads((p if p.suffix == ".json" else p / "staged.json").read_text())
        fresh: dict[str, list[dict]] = {}
        for r in rows:
            fresh.setdefault(r["problem"], []).append(r)
        by_problem.update(fresh)
    staged = [r for rows in by_problem.values() for r in rows]
    res = []
    for f in results:
        res += [json.loads(l) for l in Path(f).read_text().splitlines() if l.strip()]
    return staged, res


def ever_correct(runs: list[tuple[list[str], list[str]]]) -> set[str]:
    """Problems whose best candidate was correct on every workload in at least one of these runs
    (each run: its staged files and its results files, read as `table` reads them), each run at its
    own commit: a later run that stopped on time does not take back an earlier verdict."""
    out: set[str] = set()
    for dirs, results in runs:
        out |= {r["problem"] for r in verdicts(*_combined(dirs, results)) if r["verdict"] == "correct"}
    return out


def cmd_ever(a) -> None:
    runs = []
    for spec in a.run:
        staged, _, results = spec.partition("=")
        runs.append((staged.split(","), results.split(",")))
    got = ever_correct(runs)
    print(f"{len(got)} problem(s) correct on every workload in at least one of {len(runs)} run(s)")
    for p in sorted(got):
        print(p)


def cmd_table(a) -> None:
    staged, results = _combined(a.dir, a.results)
    rows = verdicts(staged, results)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    n = len(rows)
    correct = sum(r["verdict"] == "correct" for r in rows)
    served = sum(r["served"] for r in rows)
    print(f"{n} problems: {served} served, {correct} correct on every workload, "
          f"{sum(r['verdict'] == 'partial' for r in rows)} partial, "
          f"{sum(r['verdict'] in ('failed', 'compile error') for r in rows)} failed, "
          f"{sum(r['verdict'] == 'not run' for r in rows)} not run; the first candidate correct on "
          f"every workload for {sum(r.get('first_verdict') == 'correct' for r in rows)}\n")
    print("| problem | worker | verdict | workloads passed | first failure or reason |")
    print("|---|---|---|---|---|")
    for r in rows:
        pw = f"{r['passed']}/{r['total']}" if r["total"] else ""
        det = r["detail"].replace("|", "/").replace("\n", " ")
        print(f"| {r['problem']} | {r['worker'] or '-'} | {r['verdict']} | {pw} | {det} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", default="first,compiler",
                   help="comma list: 'first' (the planner's first family), family names, NAME@I (the "
                        "I-th point of a family's param space, e.g. compiler@1)")
    p.add_argument("--only", nargs="*", default=[], help="SUBSET/NAME or NAME globs")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--no-tsol", action="store_true",
                   help="skip pricing (T_sol): the driver's SOL-floor guard is then off")
    p.add_argument("--jobs", type=int, default=1, help="problems prepared at once (processes)")
    p.add_argument("--box-s", type=float, default=600.0,
                   help="wall-clock limit of one problem's staging (trace, lowering, compile)")
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", default="")
    r.add_argument("--parallel", type=int, default=4)
    r.add_argument("--timeout", type=float, default=240.0, help="seconds per stage")
    r.add_argument("--deadline-s", type=float, default=540.0)
    r.add_argument("--no-timing", action="store_true",
                   help="verdicts only: correctness on every workload, no timing (lanes never wait)")
    r.add_argument("--fallback", action="store_true",
                   help="run a problem's next staged candidate only when the one before was not correct")
    r.add_argument("--skip-done", nargs="*", default=[], help="results files whose stages are done")
    t = sub.add_parser("table")
    t.add_argument("--dir", nargs="+", required=True,
                   help="prepared dirs (or staged.json files), oldest first: later ones win per problem")
    t.add_argument("--results", nargs="+", required=True)
    t.add_argument("--json", action="store_true")
    e = sub.add_parser("ever", help="problems correct in at least one of several runs")
    e.add_argument("--run", nargs="+", required=True, metavar="STAGED[,STAGED]=RESULTS[,RESULTS]",
                   help="one run: its staged files and results files, comma-separated")
    a = ap.parse_args()
    {"prepare": cmd_prepare, "run": cmd_run, "table": cmd_table, "ever": cmd_ever}[a.cmd](a)


if __name__ == "__main__":
    main()
