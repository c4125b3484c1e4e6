#!/usr/bin/env python3
"""CPU side of scripts/scaling_run_h200x2.sh: stage what the two-GPU optimize run carries.

    python scripts/prepare_scaling_run.py [--out .carry/scaling] [--problems GLOB]

Writes OUT/problems/<subset>/<name>/ (every shared problem a kernel family serves, or --problems),
OUT/seed.duckdb (those problems ingested, their H200 baselines imported from
data/results/baselines_h200.csv so T_b is the faster of eager and torch.compile where both were
measured, and their roofline), OUT/cute_prebuilt/ (CuTe cubins for every cute family candidate: the GPU
box has no CuTe DSL) and OUT/dataset/ (the shared dataset, for the baselines that run beside it).
OUT is git-ignored; carry it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".carry" / "scaling")
    ap.add_argument("--problems", default=None, help="glob over SUBSET/NAME (default: all)")
    a = ap.parse_args(argv)
    from types import SimpleNamespace

    from solforge import settings
    from solforge.cli.optimize import select_problems
    from solforge.report.import_results import import_baselines
    from solforge.store import Store

    cfg = settings.get()
    probs = select_problems(SimpleNamespace(problems=a.problems, subset=None, limit=None,
                                            with_family=True), cfg.shared_dir)
    shutil.rmtree(a.out, ignore_errors=True)
    dst = a.out / "problems"
    for p in probs:
        src = Path(p.source)
        shutil.copytree(src, dst / src.parent.name / src.name)
    print(f"{len(probs)} problems -> {dst}")
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
    shutil.copytree(cfg.shared_dir / "sol_execbench", a.out / "dataset",
                    ignore=shutil.ignore_patterns("*.safetensors"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
