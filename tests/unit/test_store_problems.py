"""Problems and workloads into the store: idempotent upserts, updates, nothing half-written."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.problem import load_problem_dir
from solforge.store import Store, StoreError
from solforge.store import problems as sp
from solforge.store.problems import UpsertOutcome, upsert_problem, upsert_problems

PROBLEM = "L1/001_attention_softmax_dropout_value_matmul_backward"


@pytest.fixture
def problem_dir(sol_execbench_dir, tmp_path):
    """A private copy of one shared problem, so a test can change it."""
    dst = tmp_path / "L1" / PROBLEM.split("/")[1]
    shutil.copytree(sol_execbench_dir / PROBLEM, dst)
    return dst


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_insert_then_reingest_is_unchanged(problem_dir, tmp_path):
    s = Store(tmp_path / "p.duckdb")
    p = load_problem_dir(problem_dir, subset="L1")
    assert upsert_problem(s, p) == UpsertOutcome.INSERTED
    row = s.query_one("SELECT * FROM problems")
    assert row["name"] == p.name and row["subset"] == "L1" and row["content_hash"] == p.content_hash
    assert row["definition"]["axes"]["head_dim"] == {"type": "const", "value": 128,
                                                     "description": "Dimension per attention head"}
    assert row["n_workloads"] == len(_lines(problem_dir / "workload.jsonl"))
    assert row["provenance"]["b200_reference"]["gpu"] == "NVIDIA B200"
    assert set(row["dtypes"]) >= {"bfloat16"}
    wl = s.query("SELECT * FROM workloads ORDER BY workload_index")
    given = _lines(problem_dir / "workload.jsonl")
    assert [w["uuid"] for w in wl] == [g["uuid"] for g in given]
    assert wl[0]["axes"]["num_key_value_groups"] == 10  # expr axis resolved (80 // 8)
    assert wl[0]["axes"]["batch_size"] == given[0]["axes"]["batch_size"]
    assert wl[0]["tolerance"]["max_atol"] == given[0]["tolerance"]["max_atol"]
    ref = json.loads((problem_dir / "b200_reference.json").read_text())["per_workload"][0]
    assert wl[0]["published"]["sol_ms"] == ref["sol_ms"]

    first = s.query_one("SELECT ingested_at, updated_at FROM problems")
    assert upsert_problem(s, load_problem_dir(problem_dir, subset="L1")) == UpsertOutcome.UNCHANGED
    assert s.query_one("SELECT ingested_at, updated_at FROM problems") == first


def test_changed_content_updates_row_and_replaces_workloads(problem_dir, tmp_path):
    s = Store(tmp_path / "p.duckdb")
    upsert_problem(s, load_problem_dir(problem_dir, subset="L1"))
    first = s.query_one("SELECT ingested_at, updated_at, content_hash FROM problems")
    wl_file = problem_dir / "workload.jsonl"
    kept = wl_file.read_text().splitlines()[:3]
    wl_file.write_text("\n".join(kept) + "\n")
    d = json.loads((problem_dir / "definition.json").read_text())
    d["description"] = "changed"
    (problem_dir / "definition.json").write_text(json.dumps(d))
    p2 = load_problem_dir(problem_dir, subset="L1")
    assert upsert_problem(s, p2) == UpsertOutcome.UPDATED
    row = s.query_one("SELECT * FROM problems")
    assert row["content_hash"] == p2.content_hash != first["content_hash"]
    assert row["definition"]["description"] == "changed" and row["n_workloads"] == 3
    assert row["ingested_at"] == first["ingested_at"] and row["updated_at"] > first["updated_at"]
    assert s.scalar("SELECT count(*) FROM workloads") == 3
    assert s.scalar("SELECT count(*) FROM problems") == 1


def test_a_failing_problem_is_not_half_written(problem_dir, tmp_path, monkeypatch):
    s = Store(tmp_path / "p.duckdb")
    p = load_problem_dir(problem_dir, subset="L1")
    real = sp.workload_rows
    # The workloads insert fails after the problem row went in: both must be rolled back.
    monkeypatch.setattr(sp, "workload_rows", lambda prob: [{**r, "no_such_column": 1}
                                                            for r in real(prob)])
    with pytest.raises(StoreError, match="no_such_column"):
        upsert_problem(s, p)
    assert s.scalar("SELECT count(*) FROM problems") == 0
    assert s.scalar("SELECT count(*) FROM workloads") == 0


def test_many_problems_in_batches(sol_execbench_dir, tmp_path):
    dirs = sorted((sol_execbench_dir / "Quant").iterdir())[:7]
    probs = [load_problem_dir(d, subset="Quant") for d in dirs]
    s = Store(tmp_path / "p.duckdb")
    seen = []
    summary = upsert_problems(s, probs, progress=lambda p, o: seen.append((p.name, o)), batch=3)
    assert summary.as_dict() == {"inserted": 7, "updated": 0, "unchanged": 0}
    assert [n for n, _ in seen] == [p.name for p in probs]
    assert s.scalar("SELECT count(*) FROM workloads") == sum(len(p.workloads) for p in probs)
    again = upsert_problems(s, probs + [], batch=4)
    assert again.as_dict() == {"inserted": 0, "updated": 0, "unchanged": 7}
