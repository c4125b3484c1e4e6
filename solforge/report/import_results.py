"""Import committed benchmark measurements (data/results/) into a store, so reports work on real data.

Sources, as benchmarks/bench_kernels.py and solforge/baselines/scheduler.py wrote them on the H200:
- `kernels_h200_round{1,2,3}_rows.jsonl` (or the merged `kernels_h200_rows.jsonl`): one JSON line per
  (problem, variant, workload) with t_kernel_ms, the same session's t_eager_ms / t_compile_ms, ok,
  max_abs_err, the family and its params;
- `kernels_h200_env.json`: GPU, driver, torch, commit of that session;
- `baselines_h200.csv`: per-workload eager / torch.compile times of the references.

Each rows file becomes one run (kind "import", its path and sha256 in runs.config, so importing a file
twice is a no-op); each (problem, variant) in it becomes one attempt (agent "offline": the kernel
families swept by the benchmark), with eval_results and scores per workload. T_b per workload is the
fastest eager or torch.compile time any of the files imported together measured for it (the bench's
own timer, as kernels_h200.txt scores; baselines_h200.csv is CUPTI kernel-only time, so it is imported
into the baselines table but not mixed into these ratios; round 1 timed eager only),
T_sol comes from the project roofline (solforge.roofline, profile h200) written into the roofline
table. Attempt times are import order (the files carry no timestamps), spaced by one second.

    python -m solforge.report.import_results --db h200.duckdb            # the committed H200 files
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..store import Store, new_id, utcnow
from ..store import report_queries as rq
from ..store.attempt_queries import ensure_hardware

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "data" / "results"
DEFAULT_ROWS = [RESULTS / f"kernels_h200_round{i}_rows.jsonl" for i in (1, 2, 3)]
DEFAULT_BASELINES = RESULTS / "baselines_h200.csv"
DEFAULT_ENV = RESULTS / "kernels_h200_env.json"
IMPORTER = "solforge.report.import_results"


@dataclass
class ImportSummary:
    runs: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)  # already imported (same sha256)
    attempts: int = 0
    eval_rows: int = 0
    score_rows: int = 0
    baseline_rows: int = 0
    roofline_rows: int = 0
    problems: int = 0
    missing_problems: list[str] = field(default_factory=list)
    candidates_rebuilt: int = 0
    notes: list[str] = field(default_factory=list)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_rows(path: Path) -> list[dict]:
    """The JSON lines of a bench rows file; a bad line is an error naming file and line."""
    from ..errors import InputError

    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"not JSON: {e.msg}", file=path, line=i) from None
        for key in ("problem", "variant", "uuid", "ok"):
            if key not in r:
                raise InputError(f"row lacks {key!r}", file=path, line=i, field=key)
        out.append(r)
    return out


def _find_problem_dir(root: Path, name: str) -> Optional[Path]:
    for cand in (root / name, *root.glob(f"*/{name}")):
        if (cand / "definition.json").exists():
            return cand
    return None


def hardware_row(env: dict) -> dict:
    key = json.dumps({k: env.get(k) for k in ("gpu", "driver", "cuda_driver_api")}, sort_keys=True)
    return {"id": "hw-" + hashlib.sha256(key.encode()).hexdigest()[:16], "gpu_name": env.get("gpu"),
            "driver": env.get("driver"), "cuda": env.get("cuda_driver_api"), "details": env}


def _t_base(r: dict) -> tuple[Optional[float], Optional[str]]:
    """min(eager, torch.compile) of the row, and which one it was."""
    opts = [(t, v) for t, v in ((r.get("t_eager_ms"), "eager"), (r.get("t_compile_ms"), "compile"))
            if t is not None and t > 0]
    if not opts:
        return None, None
    return min(opts)


def _ensure_roofline(store: Store, problems: dict, needed: set, gpu_profile: str,
                     cache_dir: Optional[Path], summary: ImportSummary,
                     progress: Callable[[str], None]) -> dict:
    """(problem, uuid) -> t_sol_ms; computes the roofline rows `needed` lacks with the project's
    roofline (rows already in the store are kept as they are)."""
    have = {(r["problem"], r["workload_uuid"]): r["t_sol_ms"] for r in rq.roofline_t_sol(store, gpu_profile)}
    missing = {k for k in needed if k not in have}
    todo = [p for name, p in problems.items() if any(k[0] == name for k in missing)]
    if todo:
        from ..roofline.batch import count_cached
        from ..roofline.estimate import roofline
        from ..roofline.hardware import load_profile

        profile = load_profile(gpu_profile)
        rows = []
        for p in todo:
            progress(f"roofline {p.name}")
            for c in count_cached(p, cache_dir).counts:
                if (p.name, c.uuid) in have:
                    continue
                rf = roofline(p.name, c, profile)
                rows.append({"problem": p.name, "workload_uuid": c.uuid, "gpu_profile": gpu_profile,
                             "flops": rf.total_flops, "bytes": rf.dram_bytes, "t_sol_ms": rf.t_sol_ms,
                             "limiter": rf.limiter or rf.status,
                             "details": {"flops": rf.flops, "method": c.method, "reason": rf.reason,
                                         "by": IMPORTER}})
                have[(p.name, c.uuid)] = rf.t_sol_ms
        if rows:
            store.upsert_rows("roofline", rows, key=("problem", "workload_uuid", "gpu_profile"))
        summary.roofline_rows += len(rows)
    return have


def _rebuild_candidate(problem, family: str, params: dict):
    """The Candidate a family makes from these params today (None if the family no longer can)."""
    try:
        from ..kernels import get_family

        return get_family(family).instantiate(problem, params)
    except Exception:  # noqa: BLE001 - a family that moved on just leaves the candidate empty
        return None


def import_bench_rows(store: Store, rows_files: Iterable[Path], *, baselines_csv: Optional[Path] = None,
                      env_file: Optional[Path] = None, problems_root: Optional[Path] = None,
                      gpu_profile: str = "h200", roofline_cache: Optional[Path] = None,
                      rebuild_candidates: bool = True,
                      progress: Callable[[str], None] = lambda s: None) -> ImportSummary:
    from ..problem.loader import load_problem_dir
    from ..roofline.score import sol_score
    from ..store.problems import upsert_problems

    summary = ImportSummary()
    rows_files = [Path(f) for f in rows_files]
    env = json.loads(Path(env_file).read_text()) if env_file and Path(env_file).exists() else {}
    hw = hardware_row(env) if env else None
    if hw:
        ensure_hardware(store, hw)
    hw_id = hw["id"] if hw else None

    todo = []
    for f in rows_files:
        digest = _sha256(f)
        if rq.import_done(store, digest):
            summary.skipped_files.append(str(f))
            continue
        todo.append((f, digest, read_rows(f)))

    names = sorted({r["problem"] for _, _, rows in todo for r in rows})
    problems = {}
    if problems_root:
        root = Path(problems_root)
    else:
        from ..settings import get

        root = get().shared_dir / "sol_execbench"
    for n in names:
        d = _find_problem_dir(root, n)
        if d is None:
            summary.missing_problems.append(n)
            continue
        problems[n] = load_problem_dir(d, d.parent.name)
    if problems:
        upsert_problems(store, list(problems.values()))
        summary.problems = len(problems)
    needed = {(r["problem"], r["uuid"]) for _, _, rows in todo for r in rows}
    t_sol = _ensure_roofline(store, problems, needed, gpu_profile, roofline_cache, summary,
                             progress) if problems else {}

    # T_b per workload: the fastest baseline any imported file saw for it (same bench timer). Round 1
    # timed eager only; without this its attempts would be scored against a slower baseline.
    t_base: dict[tuple[str, str], tuple[float, str]] = {}
    for _, _, rows in todo:
        for r in rows:
            tb = _t_base(r)
            key = (r["problem"], r["uuid"])
            if tb[0] is not None and (key not in t_base or tb[0] < t_base[key][0]):
                t_base[key] = tb
    clock = utcnow()
    for f, digest, rows in todo:
        rel = str(f.relative_to(REPO)) if f.is_relative_to(REPO) else str(f)
        run_id = store.create_run(kind="import", gpu_profile=gpu_profile, hardware_id=hw_id,
                                  config={"source": rel, "sha256": digest, "importer": IMPORTER,
                                          "env": env, "t_b": "per workload: min of every eager and torch.compile "
                                               "time in the files imported together (bench timer)",
                                          "files": [str(x.relative_to(REPO)) if x.is_relative_to(REPO) else str(x) for x in rows_files],
                                          "times": "import order, not measurement time"},
                                  note=f"H200 measurements imported from {rel}")
        summary.runs.append(run_id)
        groups: dict[tuple[str, str], list[dict]] = {}
        for r in rows:
            groups.setdefault((r["problem"], r["variant"]), []).append(r)
        attempts, evals, scores = [], [], []
        for (pname, variant), rs in groups.items():
            clock += timedelta(seconds=1)
            aid = new_id()
            family = rs[0].get("family") or variant.split(":")[0]
            params = rs[0].get("params") or {}
            cand = None
            if rebuild_candidates and pname in problems:
                cand = _rebuild_candidate(problems[pname], family, params)
                summary.candidates_rebuilt += cand is not None
            all_ok = all(r.get("ok") for r in rs)
            wl_scores = []
            for r in rs:
                tk = r.get("t_kernel_ms")
                correct = bool(r.get("ok"))
                spread = (r["spread_ms"] / tk) if r.get("spread_ms") is not None and tk else None
                evals.append({"attempt_id": aid, "workload_uuid": r["uuid"],
                              "status": "passed" if correct else "incorrect", "correct": correct,
                              "max_abs_err": r.get("max_abs_err"), "median_ms": tk, "spread": spread,
                              "message": r.get("reason") or None, "hardware_id": hw_id,
                              "created_at": clock})
                tb, variant_b = t_base.get((pname, r["uuid"]), (None, None))
                if correct and tk and tb:
                    ts = t_sol.get((pname, r["uuid"]))
                    s = sol_score(tk, tb, ts)
                    wl_scores.append(s)
                    scores.append({"attempt_id": aid, "workload_uuid": r["uuid"], "speedup": tb / tk,
                                   "sol_score": s, "t_kernel_ms": tk, "t_baseline_ms": tb,
                                   "t_sol_ms": ts, "baseline_variant": variant_b,
                                   "hardware_id": hw_id, "created_at": clock})
            mean_sol = (sum(wl_scores) / len(wl_scores)
                        if all_ok and wl_scores and all(s is not None for s in wl_scores) else None)
            attempts.append({
                "id": aid, "run_id": run_id, "problem": pname, "agent": "offline", "model": None,
                "language": "cute" if family.startswith("cute") else "cuda",
                "candidate": cand, "params": params,
                "source_hash": cand.source_hash() if cand is not None else None,
                "status": "evaluated", "outcome": "ok" if all_ok else "incorrect",
                "sol_score": mean_sol, "error": None if all_ok else "incorrect on some workload",
                "created_at": clock, "updated_at": clock})
        with store.transaction():
            store.insert_rows("attempts", attempts)
            store.insert_rows("eval_results", evals)
            store.insert_rows("scores", scores)
        store.finish_run(run_id)
        summary.attempts += len(attempts)
        summary.eval_rows += len(evals)
        summary.score_rows += len(scores)
        progress(f"{rel}: {len(attempts)} attempts, {len(evals)} workload results")

    if baselines_csv is not None and Path(baselines_csv).exists():
        summary.baseline_rows = import_baselines(store, Path(baselines_csv), hw_id)
    return summary


def _num(v: str) -> Optional[float]:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def import_baselines(store: Store, path: Path, hardware_id: Optional[str]) -> int:
    """baselines_h200.csv -> baselines rows (eager and compile per workload); once per file content."""
    digest = _sha256(path)
    label = f"import:{digest[:12]}"
    if rq.baselines_labelled(store, label):
        return 0
    rows = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            for variant, t_key, st_key, sp_key in (("eager", "eager_ms", "eager_status", "eager_spread"),
                                                   ("compile", "compile_ms", "compile_status",
                                                    "compile_spread")):
                status = r.get(st_key) or ("passed" if _num(r.get(t_key)) else None)
                if status is None:
                    continue
                # message keeps the source marker (re-import guard); the run's own message follows
                msg = r.get(f"{variant}_message") or ""
                rows.append({"problem": r["problem"], "workload_uuid": r["workload_uuid"],
                             "variant": variant, "median_ms": _num(r.get(t_key)),
                             "spread": _num(r.get(sp_key)), "hardware_id": hardware_id,
                             "busy_ms": _num(r.get(f"{variant}_busy_ms")),
                             "label": r.get("label") or None, "status": status,
                             "message": label if not msg else label + " " + msg})
    store.insert_rows("baselines", rows)
    return len(rows)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m " + IMPORTER, description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="DuckDB file to fill (created if absent)")
    ap.add_argument("rows", nargs="*", type=Path, help="bench rows .jsonl files (default: H200 rounds 1-3)")
    ap.add_argument("--baselines", type=Path, default=DEFAULT_BASELINES)
    ap.add_argument("--env", type=Path, default=DEFAULT_ENV)
    ap.add_argument("--problems-root", type=Path, default=None,
                    help="folder with <subset>/<problem>/ (default ../shared/sol_execbench)")
    ap.add_argument("--gpu-profile", default="h200")
    args = ap.parse_args(argv)
    from .. import settings

    store = Store(args.db)
    s = import_bench_rows(store, args.rows or [p for p in DEFAULT_ROWS if p.exists()],
                          baselines_csv=args.baselines, env_file=args.env,
                          problems_root=args.problems_root, gpu_profile=args.gpu_profile,
                          roofline_cache=settings.get().cache_dir, progress=print)
    print(json.dumps(s.__dict__, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
