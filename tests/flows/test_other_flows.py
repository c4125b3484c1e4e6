"""extract, baseline, replay and report flows against the session's real Prefect server, in one
subprocess (one Prefect import): what each does on a machine without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.store import Store


REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
sys.path.insert(0, '.')
from flows.extract import extract
from flows.baseline import baseline
from flows.replay import replay
from flows.report import report
from solforge.orchestrate.setup import OptimizeParams, build
db, out = sys.argv[1], sys.argv[2]
build(OptimizeParams(problems='L1/069_rms_norm', gpus='', db=db, budget_attempts=5)).run()
r = {'extract': extract(out_dir=out, only=['clip-vit-large-patch14'], db=db),
     'baseline': baseline(problems='L1/069_rms_norm', db=db),
     'replay': replay(problems='069_*', db=db, gpus=''),
     'report': report(db=db, out_dir=out + '/report')}
print('RESULT ' + json.dumps(r, default=str))
"""


@pytest.mark.slow
def test_extract_baseline_replay_report_without_a_gpu(prefect_api, tmp_path, sol_execbench_dir):
    db = tmp_path / "o.duckdb"
    env = {**prefect_api.env, "SOLFORGE_CACHE_DIR": str(tmp_path / "cc"),
           "SOLFORGE_GPU_LOCK_DIR": str(tmp_path / "locks"), "SOLFORGE_GPUS": "", "COLUMNS": "300"}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(db), str(tmp_path / "problems")], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    r = json.loads(p.stdout.split("RESULT ", 1)[1].splitlines()[0])
    # extract wrote problem directories and ingested them
    assert r["extract"]["extract"]["problems_written"] > 0
    assert list((tmp_path / "problems").glob("*/*/definition.json"))
    store = Store(db)
    assert store.scalar("SELECT count(*) FROM problems") >= r["extract"]["extract"]["problems_written"]
    # baseline: no GPU, nothing measured, and it says so
    assert r["baseline"] == {"measured": 0, "skipped": 1, "gpu": False}
    # replay of the compiled attempt: answered by the store (same source, same arch), no new attempt
    assert r["replay"]["replayed"] == 1 and r["replay"]["cache_hits"] == 1
    # the optimize run compiled the rmsnorm family's guess and the compiler's plan; replay added none
    assert store.scalar("SELECT count(*) FROM attempts") == 2
    assert store.scalar("SELECT count(*) FROM runs WHERE kind = 'replay' AND status = 'finished'") == 1
    # report: the SQL leaderboard (solforge.report may not exist yet)
    assert r["report"]["problems"] == 1
    built = r["report"]["report"]  # solforge.report's HTML, or its error: the SQL leaderboard goes out anyway
    assert built and ("error" in built or Path(built["html"]).read_text().startswith("<!DOCTYPE html>"))
    arts = {a["key"] for a in prefect_api.call("POST", "/artifacts/filter", {})}
    assert {"extract-summary", "baseline-summary", "replay-leaderboard", "leaderboard-summary"} <= arts, arts
