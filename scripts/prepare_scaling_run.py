#!/usr/bin/env python3
"""CPU side of scripts/scaling_run_h200x2.sh: stage what the two-GPU optimize run carries.

    python scripts/prepare_scaling_run.py [--out .carry/scaling] [--problems GLOB]

Writes OUT/problems/<subset>/<name>/ (every shared problem a kernel family is offered for, or
--problems), OUT/seed.duckdb (those problems ingested, their H200 baselines imported from
data/results/baselines_h200.csv so T_b is the faster of eager and torch.compile where both were
measured, and their roofline; problems without a row there get T_b measured by the run itself) and
OUT/cute_prebuilt/ (CuTe cubins for every cute family candidate: the GPU box has no CuTe DSL), and
OUT/manifest.json (what was staged, from which commit, and which problems lack a baseline).
OUT is git-ignored; carry it. Re-run it after a kernel family is offered for more problems.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def drop_untimed(problems_dir: Path, csv_path: Path, max_tb_ms: float = float("inf")) -> dict:
    """Remove from each staged workload.jsonl the workloads whose row in the baselines CSV has no T_b
    (neither eager nor torch.compile measured) or whose T_b exceeds max_tb_ms. Returns {problem: [uuid, ...]} of what was removed."""
    import csv

    no_tb: dict[str, set] = {}
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            tb = (r.get("T_b_ms") or "").strip()
            # no T_b, or a reference call longer than the run lets a reference run (the optimize
            # script's REFCACHE_MAX_REF_S): the run would leave the workload out, and the problem
            # could then never have a kernel correct "on every workload"
            if not tb or float(tb) > max_tb_ms:
                no_tb.setdefault(r["problem"], set()).add(r["workload_uuid"])
    out = {}
    for wl in sorted(problems_dir.glob("*/*/workload.jsonl")):
        bad = no_tb.get(wl.parent.name)
        if not bad:
            continue
        lines = wl.read_text().splitlines(keepends=True)
        keep = [ln for ln in lines if not ln.strip() or json.loads(ln)["uuid"] not in bad]
        if len(keep) != len(lines):
            wl.write_text("".join(keep))
            out[wl.parent.name] = sorted(json.loads(ln)["uuid"] for ln in lines
                                         if ln.strip() and json.loads(ln)["uuid"] in bad)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".carry" / "scaling")
    ap.add_argument("--problems", default=None, help="glob over SUBSET/NAME (default: all)")
    ap.add_argument("--keep-untimed", action="store_true",
                    help="keep workloads without an H200 T_b in the baselines CSV (default: leave them "
                         "out: the run would measure T_b itself, in its own process, and 014's one such "
                         "workload has a reference call of over 300 s)")
    ap.add_argument("--max-tb-s", type=float, default=30.0,
                    help="also leave out workloads whose T_b is over this (default 30: the optimize "
                         "script's REFCACHE_MAX_REF_S, the longest reference call a run caches; 014's "
                         "9fb16120 takes 76 s compiled)")
    a = ap.parse_args(argv)
    from solforge import settings
    from solforge.orchestrate.setup import select_problems
    from solforge.report.import_results import import_baselines
    from solforge.store import Store

    cfg = settings.get()
    probs = select_problems(Store(cfg.db_path), a.problems, with_family=True, shared_dir=cfg.shared_dir)
    shutil.rmtree(a.out, ignore_errors=True)
    dst = a.out / "problems"
    for p in probs:
        src = Path(p.source)
        shutil.copytree(src, dst / src.parent.name / src.name)
    print(f"{len(probs)} problems -> {dst}")
    dropped = {} if a.keep_untimed else drop_untimed(dst, REPO / "data" / "results" / "baselines_h200.csv",
                                                     a.max_tb_s * 1e3)
    for name, uu in dropped.items():
        print(f"{name}: left out {len(uu)} workload(s) without an H200 T_b or with T_b over "
              f"{a.max_tb_s:g} s: {', '.join(uu)}")
    db = a.out / "seed.duckdb"
    subprocess.run([sys.executable, "-m", "solforge.cli", "ingest", "--db", str(db), str(dst)], check=True,
                   stdout=subprocess.DEVNULL)
    store = Store(db)
    n = import_baselines(store, REPO / "data" / "results" / "baselines_h200.csv", None)
    names = {p.name for p in probs}
    kept = store.scalar("SELECT count(*) FROM baselines WHERE problem IN (SELECT unnest(?))", [sorted(names)])
    print(f"baselines imported: {n} rows ({kept} for the selected problems)")
    cute = [str(Path(p.source)) for p in probs if "rmsnorm" in p.name and p.subset == "FlashInfer-Bench"]
    if cute:
        subprocess.run([sys.executable, str(REPO / "scripts" / "cute_eval_gpu.py"), "prebuild", "--out",
                        str(a.out / "cute_prebuilt"), *cute], check=True)
    have = {r["problem"] for r in store.query("SELECT DISTINCT problem FROM baselines")}
    store.close()
    for f in a.out.glob("*.duckdb.lock*"):  # the store's lock files: nothing to carry
        f.unlink()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    manifest = {"commit": commit, "problems": sorted(f"{p.subset}/{p.name}" for p in probs),
                "workloads_left_out": dropped,
                "without_baseline": sorted(p.name for p in probs if p.name not in have)}
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
