"""SOL score per workload of a kernel family's measured rows (benchmarks/bench_kernels.py run) on a GPU
profile, with a proper T_b, and the per-family results file issue #6 asks for.

    S = 1 / (1 + (T_k - T_sol) / (T_b - T_sol))          (solforge.roofline.score.sol_score)

- T_k: the bench rows' `t_kernel_ms` (CUDA events, L2 flushed, median) of each problem's best variant:
  correct on every workload, lowest geomean kernel time (a variant that fails anywhere is out).
- T_sol: solforge's roofline for the profile (`solforge sol --gpu h200`: counts + pricing, the same
  functions), per workload uuid.
- T_b, in this order (the row says which):
    `csv`        data/results/baselines/baselines_h200.csv (solforge baseline: CUPTI, L2 flushed, the
                 faster of eager and torch.compile; the pipeline's own T_b);
    `bench`      the bench row's `t_eager_ms` when that run timed the reference properly (median
                 of several calls) -- give such rows files with --rows;
    `ref-once`   the bench row's `t_eager_ms` from a `--ref-once` run (ONE wall-clock call that
                 includes the first call's warm-up) -- rows files given with --ref-once-rows; shown,
                 but such workloads count as lacking a T_b in the summary;
    missing      none of these.
- S_nv: the same kernel time scored with NVIDIA's published B200 `baseline_latency_ms` as T_b and
  the H200 T_sol (b200_reference.json). A cross-GPU number, not the pipeline's score: it asks
  whether the kernel would still score high against a fast library baseline instead of the
  references' Python loops.

Prints the per-workload table and geomean / median SOL per problem; --md writes it as markdown.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from ..settings import REPO_ROOT as REPO


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from ..settings import get

    return get().shared_dir


def load_rows(paths: list[str], tb_kind: str) -> list[dict]:
    rows = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                r["_tb_kind"] = tb_kind
                rows.append(r)
    return rows


def load_baselines(path: Path) -> dict:
    """(problem, uuid) -> (T_b ms, variant) from a run_baselines CSV; rows without a T_b skipped."""
    out = {}
    if not path.exists():
        return out
    with path.open() as f:
        for r in csv.DictReader(f):
            if r.get("T_b_ms"):
                out[(r["problem"], r["workload_uuid"])] = (float(r["T_b_ms"]), r.get("T_b_variant", ""))
    return out


def variant_key(r: dict) -> str:
    """A variant is its family and params: ids like `fam:v1` are per bench run (v1 of one run is
    not v1 of another), so rows of several runs can be scored together."""
    return f"{r['family']} {json.dumps(r['params'], sort_keys=True)}"


def best_variant(rows: list[dict]) -> tuple[str, list[dict]] | None:
    by: dict = {}
    for r in rows:
        by.setdefault(variant_key(r), []).append(r)
    best = None
    for vid, rs in by.items():
        if not all(r.get("ok") and r.get("t_kernel_ms") for r in rs):
            continue
        g = math.exp(sum(math.log(r["t_kernel_ms"]) for r in rs) / len(rs))
        if best is None or g < best[0]:
            best = (g, vid, rs)
    return None if best is None else (best[1], best[2])


def t_sol_by_uuid(problem_dirs: list[Path], gpu: str) -> dict:
    from solforge.roofline.batch import count_many
    from solforge.roofline.hardware import load_profile
    from solforge.roofline.table import price
    from ..settings import get

    profile = load_profile(gpu)
    out = {}
    for pc in count_many(problem_dirs, Path(get().cache_dir), jobs=1):
        for c, rl in zip(pc.counts, price(pc, profile)):
            out[(pc.name, c.uuid)] = {"t_sol_ms": rl.t_sol_ms, "limiter": rl.limiter,
                                      "bytes": rl.dram_bytes, "flops": rl.total_flops}
    return out


def nvidia_baselines(pdir: Path) -> dict:
    """workload index -> NVIDIA's B200 baseline_latency_ms (b200_reference.json), if published."""
    f = pdir / "b200_reference.json"
    if not f.exists():
        return {}
    data = json.loads(f.read_text())
    return {w["index"]: w.get("baseline_latency_ms") for w in data.get("per_workload", [])}


def score_problem(pname: str, rows: list[dict], baselines: dict, tsol: dict, nv: dict) -> dict:
    from solforge.roofline.score import below_sol, geomean, sol_score

    pick = best_variant(rows)
    if pick is None:
        return {"problem": pname, "variant": None, "workloads": []}
    vid, rs = pick
    n_variants = len({variant_key(r) for r in rows})
    wls = []
    for r in sorted(rs, key=lambda r: r["workload"]):
        t_k = r["t_kernel_ms"]
        sol = tsol.get((pname, r["uuid"]), {})
        t_sol = sol.get("t_sol_ms")
        if (pname, r["uuid"]) in baselines:
            t_b, kind = baselines[(pname, r["uuid"])]
            kind = f"csv:{kind}"
        elif r.get("t_eager_ms") and r["_tb_kind"] == "bench":
            t_b, kind = min(t for t in (r["t_eager_ms"], r.get("t_compile_ms")) if t), "bench"
        elif r.get("t_eager_ms") and r["_tb_kind"] == "ref-once":
            t_b, kind = r["t_eager_ms"], "ref-once"
        else:
            t_b, kind = None, "missing"
        t_nv = nv.get(r["workload"])
        wls.append({"workload": r["workload"], "uuid": r["uuid"], "axes": r["axes"], "t_k_ms": t_k,
                    "t_b_ms": t_b, "t_b_kind": kind, "t_sol_ms": t_sol, "limiter": sol.get("limiter"),
                    "bytes": sol.get("bytes"), "sol": sol_score(t_k, t_b, t_sol),
                    "speedup": (t_b / t_k) if t_b else None, "below_sol": below_sol(t_k, t_sol),
                    "t_nv_b200_ms": t_nv, "sol_nv": sol_score(t_k, t_nv, t_sol),
                    "max_abs_err": r.get("max_abs_err")})
    proper = [w for w in wls if w["t_b_kind"].startswith("csv") or w["t_b_kind"] == "bench"]
    s_all = [w["sol"] for w in wls if w["sol"] is not None]
    s_prop = [w["sol"] for w in proper if w["sol"] is not None]
    s_nv = [w["sol_nv"] for w in wls if w["sol_nv"] is not None]
    return {"problem": pname, "variant": rs[0]["variant"], "params": rs[0]["params"], "n_variants": n_variants,
            "all_variants_correct": all(r.get("ok") for r in rows), "workloads": wls,
            "n_proper_tb": len(proper),
            "lacking_tb": [w["workload"] for w in wls if w not in proper],
            "sol_geomean_proper": geomean(s_prop), "sol_median_proper": statistics.median(s_prop) if s_prop else None,
            "sol_min_proper": min(s_prop) if s_prop else None,
            "sol_geomean_all": geomean(s_all), "sol_min_all": min(s_all) if s_all else None,
            "speedup_geomean_proper": geomean([w["speedup"] for w in proper]),
            "sol_nv_geomean": geomean(s_nv), "sol_nv_median": statistics.median(s_nv) if s_nv else None,
            "sol_nv_min": min(s_nv) if s_nv else None,
            "n_below_sol": sum(w["below_sol"] for w in wls)}


def write_best(res: dict, pdir: Path, env: dict, args) -> Path:
    """The best solution with its measured result, next to the family's sources (issue #6 item 3)."""
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    fam_name = res["variant"].split(":")[0]
    fam = get_family(fam_name)
    cand = fam.instantiate(load_problem_dir(pdir, subset=pdir.parent.name), res["params"])
    out = fam.family_dir / "best" / f"{res['problem']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in res.items() if k != "workloads"}
    out.write_text(json.dumps({
        **keep, "subset": pdir.parent.name, "family": fam_name, "gpu": env.get("gpu"),
        "driver": env.get("driver"), "torch": env.get("torch"), "commit": env.get("commit"),
        "gpu_profile": args.gpu, "copy_tb_s": env.get("copy_tb_s"),
        "timing": "CUDA events, L2 flushed before each call, median; benchmarks/bench_kernels.py run",
        "baseline": "data/results/baselines/baselines_h200.csv T_b (faster of eager and torch.compile) where "
                    "present, else the bench's eager timing (t_b_kind per workload)",
        "scored_by": "python -m solforge.results.bench_scores",
        "candidate_built_at": subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                             text=True).stdout.strip(),
        "candidate_note": "rebuilt by the family from params at candidate_built_at; measured as built at commit",
        "workloads": res["workloads"],
        "candidate": cand.model_dump()}, indent=1) + "\n")
    return out


def _f(v, fmt="{:.4g}"):
    return "-" if v is None else fmt.format(v)


def render(res: dict, env: dict, gpu: str, var_axes: list[str]) -> list[str]:
    out = [f"### {res['problem']}", ""]
    if res["variant"] is None:
        return out + ["no variant correct on every workload", ""]
    out += [f"best variant `{res['variant']}` {json.dumps(res['params'])} (of {res['n_variants']} "
            f"measured; every variant correct on every workload: {res['all_variants_correct']})", "",
            f"- SOL score, workloads with a proper T_b ({res['n_proper_tb']}/{len(res['workloads'])}): "
            f"geomean **{_f(res['sol_geomean_proper'])}**, median {_f(res['sol_median_proper'])}, "
            f"min {_f(res['sol_min_proper'])}; speedup over T_b geomean {_f(res['speedup_geomean_proper'])}x",
            f"- lacking a proper T_b (workload indices): {res['lacking_tb'] or 'none'}",
            f"- all workloads incl. ref-once T_b: SOL geomean {_f(res['sol_geomean_all'])}, min {_f(res['sol_min_all'])}",
            f"- S_nv (T_b = NVIDIA's B200 baseline_latency_ms, T_sol {gpu}): geomean {_f(res['sol_nv_geomean'])}, "
            f"median {_f(res['sol_nv_median'])}, min {_f(res['sol_nv_min'])}",
            f"- workloads timed below T_sol: {res['n_below_sol']}", ""]
    head = ["wl", *var_axes, "T_k ms", "T_sol ms", "limiter", "T_k/T_sol", "T_b ms", "T_b from", "speedup",
            "SOL", "B200 base ms", "S_nv"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in res["workloads"]:
        ratio = w["t_k_ms"] / w["t_sol_ms"] if w["t_sol_ms"] else None
        out.append("| " + " | ".join([str(w["workload"]), *[str(w["axes"].get(a, "")) for a in var_axes],
                                       _f(w["t_k_ms"], "{:.4f}"), _f(w["t_sol_ms"], "{:.4f}"),
                                       w["limiter"] or "-", _f(ratio, "{:.2f}"), _f(w["t_b_ms"], "{:.4g}"),
                                       w["t_b_kind"], _f(w["speedup"], "{:.1f}"), _f(w["sol"], "{:.4f}"),
                                       _f(w["t_nv_b200_ms"], "{:.4g}"), _f(w["sol_nv"], "{:.3f}")]) + " |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m solforge.results.bench_scores", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", action="append", default=[], help="bench rows whose t_eager_ms is a "
                    "proper timing (repeatable)")
    ap.add_argument("--ref-once-rows", action="append", default=[], help="bench rows from a --ref-once run")
    ap.add_argument("--env", required=True, help="env.json of the bench run (GPU, driver, commit)")
    ap.add_argument("--baselines", default=str(REPO / "data" / "results" / "baselines_h200.csv"))
    ap.add_argument("--shared", default=str(_shared_dir() / "sol_execbench"))
    ap.add_argument("--gpu", default="h200", help="roofline profile")
    ap.add_argument("--problems", default="", help="comma-separated substrings")
    ap.add_argument("--md", default="", help="write the tables as markdown to this file")
    ap.add_argument("--title", default="")
    ap.add_argument("--json", default="", help="write the per-workload scores as JSON here")
    ap.add_argument("--notes", default="", help="markdown file whose text goes under the header "
                    "(the reading of the numbers)")
    ap.add_argument("--write-best", action="store_true", help="also write kernels_cuda/<family>/best/"
                    "<problem>.json: the best variant's candidate (sources, params, launches) with its "
                    "per-workload times and scores")
    ap.add_argument("--measured-by", default="", help="the device command that made the rows (quoted "
                    "into the markdown)")
    args = ap.parse_args()

    rows = load_rows(args.rows, "bench") + load_rows(args.ref_once_rows, "ref-once")
    if args.problems:
        rows = [r for r in rows if any(p in r["problem"] for p in args.problems.split(","))]
    env = json.loads(Path(args.env).read_text())
    baselines = load_baselines(Path(args.baselines))
    shared = Path(args.shared)
    names = sorted({r["problem"] for r in rows})
    dirs = {n: next(iter(shared.glob(f"*/{n}"))) for n in names}
    tsol = t_sol_by_uuid([dirs[n] for n in names], args.gpu)
    results, lines = [], []
    commit_now = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    lines += [f"# {args.title or 'SOL scores'}", "",
              f"GPU {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, CUDA driver API "
              f"{env.get('cuda_driver_api')}; kernels built at commit {env.get('commit', '')[:12]}; measured copy "
              f"bandwidth {_f(env.get('copy_tb_s'), '{:.2f}')} TB/s. T_sol: solforge roofline, profile `{args.gpu}`. "
              f"T_b: {Path(args.baselines).name} (run_baselines: faster of eager and torch.compile) where it "
              f"has the workload, else the bench's own eager timing. Scored by solforge.results.bench_scores at {commit_now}.",
              ""]
    if args.measured_by:
        lines += ["Measured by (device, after `bench_kernels.py prepare` on the CPU):", "",
                  "    " + args.measured_by, ""]
    lines += ["Regenerate this file (CPU): `.venv/bin/python -m solforge.results.bench_scores "
              + shlex.join(sys.argv[1:]) + "`", ""]
    if args.notes:
        lines += [Path(args.notes).read_text().strip(), ""]
    for n in names:
        prs = [r for r in rows if r["problem"] == n]
        res = score_problem(n, prs, baselines, tsol, nvidia_baselines(dirs[n]))
        results.append(res)
        var_axes = [a for a in (prs[0]["axes"] if prs else {}) if len({json.dumps(r["axes"].get(a)) for r in prs}) > 1]
        lines += render(res, env, args.gpu, var_axes)
    if args.write_best:
        for res in results:
            if res["variant"] is not None:
                print(f"wrote {write_best(res, dirs[res['problem']], env, args)}", file=sys.stderr)
    text = "\n".join(lines)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "gpu_profile": args.gpu, "problems": results}, indent=1))


if __name__ == "__main__":
    main()
