#!/usr/bin/env python3
"""A seed DuckDB for an optimize run that continues an earlier run's database.

    .venv/bin/python scripts/prepare_cumulative_seed.py data/results/db/optimize_long_h200x2_s4.duckdb.gz \
        --out .carry/scaling/seed_cumulative.duckdb.gz

The earlier run's attempts stay (so the README table, regenerated from the result, is the best attempt per
problem over every run in the file, and identical candidates are not evaluated again); the problems staged
in .carry/scaling are ingested (new ones added) and the current data/results/baselines_h200.csv is imported,
so T_b is today's. After the run, `solforge rescore --refresh` brings the earlier attempts' scores to the
same baselines. The result is gzipped: it travels inside the 64 MiB carry.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from solforge.report.import_results import import_baselines  # noqa: E402
from solforge.store import Store  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", type=Path, help="earlier run's DuckDB (.duckdb or .duckdb.gz)")
    ap.add_argument("--problems", type=Path, default=REPO / ".carry" / "scaling" / "problems")
    ap.add_argument("--baselines", type=Path, default=REPO / "data" / "results" / "baselines_h200.csv")
    ap.add_argument("--out", type=Path, default=REPO / ".carry" / "scaling" / "seed_cumulative.duckdb.gz")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "seed.duckdb"
        opener = gzip.open if a.db.suffix == ".gz" else open
        with opener(a.db, "rb") as src, db.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        subprocess.run([sys.executable, "-m", "solforge.cli", "ingest", "--db", str(db), str(a.problems)],
                       check=True, stdout=subprocess.DEVNULL)
        store = Store(db)
        n = import_baselines(store, a.baselines, None)
        attempts = store.scalar("SELECT count(*) FROM attempts")
        store.execute("CHECKPOINT")
        store.close()
        a.out.parent.mkdir(parents=True, exist_ok=True)
        with db.open("rb") as src, gzip.open(a.out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(f"{a.out}: {attempts} earlier attempts, {n} baseline rows imported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
