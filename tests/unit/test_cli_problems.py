"""`solforge ingest / problems / show` run for real on a temp DuckDB file with the shared dataset."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from solforge.cli import main
from solforge.store import Store


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _defs_sol(root: Path) -> dict[str, dict]:
    return {d.parent.name: json.loads(d.read_text()) for d in root.glob("*/*/definition.json")}


def _expected_sol(root: Path) -> tuple[Counter, Counter]:
    probs, wls = Counter(), Counter()
    for d in root.glob("*/*/workload.jsonl"):
        subset = d.parent.parent.name
        probs[subset] += 1
        wls[subset] += sum(1 for line in d.read_text().splitlines() if line.strip())
    return probs, wls


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, sol_execbench_dir, flashinfer_trace_dir):
    db = tmp_path_factory.mktemp("cli") / "cli.duckdb"
    sol = run_cli("--db", db, "--json", "ingest", sol_execbench_dir)
    fi = run_cli("--db", db, "ingest", flashinfer_trace_dir, "--json")  # --json after the command
    return db, sol, fi


def test_ingest_sol_execbench(ingested, sol_execbench_dir):
    db, (rc, out, err), _ = ingested
    assert rc == 0, err
    report = json.loads(out)
    probs, wls = _expected_sol(sol_execbench_dir)
    assert report["errors"] == []
    assert report["problems"] == sum(probs.values()) == 201
    assert report["workloads"] == sum(wls.values()) == 3427
    assert {s: c["problems"] for s, c in report["subsets"].items()} == dict(probs)
    assert {s: c["workloads"] for s, c in report["subsets"].items()} == dict(wls)
    assert report["stored"] == {"inserted": 201, "updated": 0, "unchanged": 0}
    s = Store(db)
    assert s.scalar("SELECT count(*) FROM problems WHERE subset IN ('L1','L2','Quant',"
                    "'FlashInfer-Bench')") == 201
    assert s.scalar("SELECT count(*) FROM workloads w JOIN problems p ON p.name = w.problem "
                    "WHERE p.subset <> 'FlashInfer-Trace'") == 3427
    kinds = sum(k["count"] for k in report["warning_kinds"])
    assert kinds == len(report["warnings"])


def test_ingest_flashinfer_trace(ingested, flashinfer_trace_dir):
    db, _, (rc, out, err) = ingested
    assert rc == 0, err
    report = json.loads(out)
    n_defs = len(list(flashinfer_trace_dir.glob("definitions/*/*.json")))
    assert report["errors"] == [] and report["problems"] == n_defs == 156
    assert Store(db).scalar("SELECT count(*) FROM problems") == 201 + 156


def test_human_output_and_reingest_is_idempotent(ingested, sol_execbench_dir):
    db = ingested[0]
    rc, out, err = run_cli("--db", db, "ingest", sol_execbench_dir / "Quant")
    assert rc == 0 and out == ""  # human output goes to stderr only
    n = len(list((sol_execbench_dir / "Quant").glob("*/definition.json")))
    assert f"{n} problems" in err and f"0 new, 0 updated, {n} unchanged" in err


def test_problems_filters(ingested, sol_execbench_dir, flashinfer_trace_dir):
    db = ingested[0]
    defs = list(_defs_sol(sol_execbench_dir).values()) + [
        json.loads(p.read_text()) for p in flashinfer_trace_dir.glob("definitions/*/*.json")]

    def names(*args):
        rc, out, err = run_cli("--db", db, "--json", "problems", *args)
        assert rc == 0, err
        return sorted(r["name"] for r in json.loads(out))

    l1 = len(list((sol_execbench_dir / "L1").glob("*/definition.json")))
    assert len(names("--subset", "l1")) == l1  # case-insensitive
    def dtypes(d):
        return {t["dtype"] for g in ("inputs", "outputs") for t in d[g].values()}
    assert names("--dtype", "float8_e4m3fn") == sorted(d["name"] for d in defs
                                                       if "float8_e4m3fn" in dtypes(d))
    want = sorted(d["name"] for d in defs if "model:llama-3.1-8b" in d.get("tags", [])
                  or "llama-3.1-8b" in (d.get("hf_id") or "").lower())
    assert want and names("--model", "LLAMA-3.1-8B") == want
    gemm_l1 = sorted(d["name"] for d in _defs_sol(sol_execbench_dir / ".." / "sol_execbench")
                     .values() if d.get("op_type") == "gemm")
    assert set(gemm_l1) <= set(names("--op", "gemm"))
    assert len(names("--limit", "5")) == 5
    assert names("--subset", "nope") == []


def test_show(ingested, sol_execbench_dir):
    db = ingested[0]
    pdir = sorted((sol_execbench_dir / "L2").iterdir())[3]
    d = json.loads((pdir / "definition.json").read_text())
    n_wl = sum(1 for line in (pdir / "workload.jsonl").read_text().splitlines() if line.strip())
    rc, out, err = run_cli("--db", db, "--json", "show", f"L2/{d['name']}")
    assert rc == 0, err
    info = json.loads(out)
    assert info["name"] == d["name"] and info["n_workloads"] == n_wl == len(info["workloads"])
    assert set(info["axes"]) == set(d["axes"])
    assert sum(t["workloads"] for t in info["tolerances"]) == n_wl
    assert info["best_attempt"] is None and info["baselines"] == []

    s = Store(db)
    uuid = info["workloads"][0]["uuid"]
    a1 = s.create_attempt(d["name"], agent="offline", language="cuda")
    a2 = s.create_attempt(d["name"], agent="llm", language="cuda")
    s.insert_rows("scores", [{"attempt_id": a1, "workload_uuid": uuid, "sol_score": 0.4, "speedup": 1.2},
                             {"attempt_id": a2, "workload_uuid": uuid, "sol_score": 0.7, "speedup": 2.0}])
    s.insert_rows("baselines", [{"problem": d["name"], "workload_uuid": uuid, "variant": "eager",
                                 "median_ms": 3.0, "hardware_id": "h", "created_at": datetime(2026, 1, 1)},
                                {"problem": d["name"], "workload_uuid": uuid, "variant": "eager",
                                 "median_ms": 2.0, "busy_ms": 0.5, "hardware_id": "h",
                                 "created_at": datetime(2026, 1, 2)}])
    # the newer measurement of a workload wins
    s.upsert_rows("roofline", [{"problem": d["name"], "workload_uuid": uuid, "gpu_profile": "h200",
                                "t_sol_ms": 0.1, "limiter": "memory"}],
                  key=("problem", "workload_uuid", "gpu_profile"))
    # the best attempt's time per kernel, from its eval_results rows (the profiler's names)
    s.insert_rows("eval_results", [{"attempt_id": a2, "workload_uuid": uuid, "status": "passed",
                                    "correct": True, "median_ms": 0.05,
                                    "kernel_ms": {"k0_mm": 0.03, "k1_out": 0.01}}])
    rc, out, _ = run_cli("--db", db, "--json", "show", d["name"])
    info = json.loads(out)
    assert info["best_attempt"]["id"] == a2 and info["best_attempt"]["mean_sol_score"] == 0.7
    assert info["best_kernel_ms"] == pytest.approx({"k0_mm": 0.03, "k1_out": 0.01})
    assert info["baselines"][0]["median_ms"] == 2.0 and info["baselines"][0]["workloads"] == 1
    assert info["baselines"][0]["busy_share"] == pytest.approx(0.25)   # 0.5 of 2.0 ms: launch-bound
    assert info["roofline"][0]["limiter"] == "memory"
    assert info["attempts"] == {"queued": 2}
    rc, out, err = run_cli("--db", db, "show", d["name"])  # the human view renders
    assert rc == 0 and d["name"] in err and "best attempt" in err and "k0_mm 0.03 ms (75%)" in err
    assert "GPU busy" in err and "25%" in err


def test_show_unknown_and_ambiguous(ingested):
    db = ingested[0]
    rc, _, err = run_cli("--db", db, "show", "no_such_problem")
    assert rc == 2 and "no problem 'no_such_problem'" in err
    rc, _, err = run_cli("--db", db, "show", "00")
    assert rc == 2 and "matches several problems" in err


def test_ingest_reports_bad_problems_and_stores_good_ones(sol_execbench_dir, tmp_path):
    tree = tmp_path / "tree" / "L1"
    names = sorted(p.name for p in (sol_execbench_dir / "L1").iterdir())[:2]
    for n in names:
        shutil.copytree(sol_execbench_dir / "L1" / n, tree / n)
    bad = tree / names[1] / "workload.jsonl"
    lines = bad.read_text().splitlines()
    obj = json.loads(lines[1])
    obj["axes"] = {k: "many" for k in obj["axes"]}
    lines[1] = json.dumps(obj)
    bad.write_text("\n".join(lines) + "\n")
    db = tmp_path / "e.duckdb"
    rc, out, err = run_cli("--db", db, "--json", "ingest", tmp_path / "tree")
    assert rc == 1
    report = json.loads(out)
    assert report["problems"] == 1 and len(report["errors"]) == 1
    e = report["errors"][0]
    assert e["file"].endswith("workload.jsonl") and e["line"] == 2 and e["field"].startswith("axes")
    assert Store(db).scalar("SELECT count(*) FROM problems") == 1
    rc, _, err = run_cli("--db", db, "ingest", tmp_path / "tree")
    assert rc == 1 and "workload.jsonl:2 [axes" in err.replace("\n", "")
