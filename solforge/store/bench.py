"""Store benchmark: what opening DuckDB, an attempt's lifecycle, an ingest and two concurrent writers
cost on this machine. `python -m solforge.store.bench [--out data/results/store_bench.json]`.

The numbers back the claims in SCHEMA.md ("Concurrency"); they depend heavily on the disk (every
commit is an fsync of the DuckDB WAL) and on how loaded the machine is, so the load is recorded too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import duckdb


def _ms(samples: list[float]) -> dict:
    return {"median_ms": round(statistics.median(samples) * 1e3, 2),
            "p90_ms": round(sorted(samples)[int(0.9 * (len(samples) - 1))] * 1e3, 2), "n": len(samples)}


def bench_open_close(db: Path, n: int = 20) -> dict:
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE IF NOT EXISTS t (a INTEGER)")
    con.close()
    opens, closes = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        c = duckdb.connect(str(db))
        t1 = time.perf_counter()
        c.execute("INSERT INTO t VALUES (1)")
        t2 = time.perf_counter()
        c.close()
        opens.append(t1 - t0)
        closes.append(time.perf_counter() - t2)
    return {"open": _ms(opens), "close_after_one_insert": _ms(closes)}


def bench_lifecycle(db: Path, n: int = 100) -> dict:
    from . import AttemptStatus, Store

    s = Store(db)
    run = s.create_run(kind="bench")
    create, compiled, evaluated = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        aid = s.create_attempt("bench", run_id=run, agent="bench", params={"i": i})
        t1 = time.perf_counter()
        s.mark_attempt(aid, AttemptStatus.COMPILED, rows={"compile_results": [
            {"attempt_id": aid, "status": "ok", "seconds": 0.1}]})
        t2 = time.perf_counter()
        s.mark_attempt(aid, AttemptStatus.EVALUATED, rows={"eval_results": [
            {"attempt_id": aid, "workload_uuid": f"w{k}", "status": "passed", "median_ms": 0.1}
            for k in range(16)]})
        evaluated.append(time.perf_counter() - t2)
        create.append(t1 - t0)
        compiled.append(t2 - t1)
    s.close()
    return {"create_attempt": _ms(create), "mark_compiled_with_compile_row": _ms(compiled),
            "mark_evaluated_with_16_eval_rows": _ms(evaluated)}


def bench_ingest(db: Path, source: Path) -> dict:
    from ..problem.sources import ingest_path
    from . import Store
    from .problems import upsert_problems

    t0 = time.perf_counter()
    report = ingest_path(source)
    t1 = time.perf_counter()
    s = Store(db)
    first = upsert_problems(s, report.problems).as_dict()
    t2 = time.perf_counter()
    again = upsert_problems(s, report.problems).as_dict()
    t3 = time.perf_counter()
    return {"source": str(source), "problems": len(report.problems),
            "workloads": sum(len(p.workloads) for p in report.problems),
            "read_s": round(t1 - t0, 2), "store_s": round(t2 - t1, 2), "first": first,
            "reingest_store_s": round(t3 - t2, 2), "reingest": again}


def _writer(db: str, n: int, q) -> None:
    from . import AttemptStatus, Store

    s = Store(db)
    t0 = time.perf_counter()
    for i in range(n):
        aid = s.create_attempt("bench", agent=str(os.getpid()))
        s.mark_attempt(aid, AttemptStatus.FAILED, error="x")
    q.put((time.perf_counter() - t0, s._lease.opens))


def bench_concurrent(db: Path, writers: int = 2, n: int = 200) -> dict:
    from . import Store

    Store(db).close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(db), n, q)) for _ in range(writers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    res = [q.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    total = Store(db).scalar("SELECT count(*) FROM attempts WHERE agent <> 'bench'")
    return {"writers": writers, "attempts_each": n, "rows_found": total,
            "rows_expected": writers * n, "wall_s": round(wall, 2),
            "commits_per_s": round(2 * writers * n / wall, 1),
            "per_writer_s": [round(r[0], 2) for r in res], "opens_per_writer": [r[1] for r in res]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/results/cpu_benchmarks/store_bench.json")
    ap.add_argument("--source", default=None, help="dataset to ingest (default: shared sol_execbench)")
    args = ap.parse_args(argv)
    from .. import settings

    source = Path(args.source) if args.source else settings.get().shared_dir / "sol_execbench"
    out = {"machine": {"python": platform.python_version(), "duckdb": duckdb.__version__,
                       "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
           "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="solforge-bench-", dir=".") as tmp:
        d = Path(tmp)
        out["open_close"] = bench_open_close(d / "raw.duckdb")
        out["lifecycle"] = bench_lifecycle(d / "life.duckdb")
        if source.exists():
            out["ingest"] = bench_ingest(d / "ingest.duckdb", source)
        out["concurrent"] = bench_concurrent(d / "conc.duckdb")
    out["machine"]["loadavg_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
