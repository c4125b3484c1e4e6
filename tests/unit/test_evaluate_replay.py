"""`solforge replay`'s code path against a real DuckDB file: the attempt and its problem come back out
of the store, the candidate is compiled (NVRTC) and run in a spawned driver, and the comparison and
the child attempt are written. Without a GPU the driver reports that it cannot load cubins, which is
exactly what a replay on the wrong machine must say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ADV = Path(__file__).resolve().parent.parent / "adversarial"
sys.path.insert(0, str(ADV))


def test_replay_reads_store_reruns_and_records(tmp_path):
    pytest.importorskip("duckdb")
    import harness

    from solforge.orchestrate.replay import replay
    from solforge.problem import load_problem_dir
    from solforge.store import Store
    from solforge.store.problems import upsert_problem

    s = Store(tmp_path / "t.duckdb")
    problem = load_problem_dir(harness.PROBLEM_DIR)
    upsert_problem(s, problem)
    cand = harness.cuda_candidate(ADV / "good.cu")
    aid = s.create_attempt(problem.name, agent="test", language="cuda", candidate=cand)
    s.insert_rows("eval_results", [{"attempt_id": aid, "workload_uuid": "adv-4k", "status": "passed",
                                    "correct": True, "median_ms": 0.005, "n_reps": 50}])
    out = replay(s, aid, workdir=tmp_path / "work", record_new=True, timeout_s=240)
    assert [r["workload"] for r in out["rows"]] == ["adv-4k"]  # only what was stored is replayed
    row = out["rows"][0]
    assert row["stored_status"] == "passed" and row["stored_ms"] == 0.005
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        gpu = False
    if not gpu:
        assert row["new_status"] == "runtime_error" and not row["same_status"]
    new = s.query("SELECT status, parent_id FROM attempts WHERE id = ?", [out["new_attempt"]])
    assert new == [{"status": "evaluated", "parent_id": aid}]
    assert s.query("SELECT count(*) AS n FROM eval_results WHERE attempt_id = ?",
                   [out["new_attempt"]])[0]["n"] == 1
