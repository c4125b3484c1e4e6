"""Kill the optimize flow with SIGKILL mid-run (a real subprocess talking to a real Prefect server on
loopback), run it again with the same parameters, and check that it continued where it stopped:
no attempt lost, none compiled twice, the killed run's open attempts marked interrupted.

No GPU here: the flow runs its CPU-side stages (plan, check, compile with real NVRTC, store), so the
assertions are about those; evaluation follows the same path on a GPU box."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solforge.store import Store


REPO = Path(__file__).resolve().parents[2]
# 9 problems a kernel family serves (rmsnorm, gemm): 9 compiles. Not the attention problems after
# them (012-019): matching traces each reference under the compiler, up to its 300 s limit apiece,
# which on a 2-core machine pushed the first compiled attempt past this test's own deadline.
PROBLEMS = "FlashInfer-Bench/00*,FlashInfer-Bench/01[01]_*"


def _args(db: Path) -> list[str]:
    # an explicit job: the default (the UTC day) changes at midnight, and a test whose killed run
    # started before it and whose rerun started after found nothing to resume
    return [sys.executable, str(REPO / "flows" / "optimize.py"), "--problems", PROBLEMS, "--with-family",
            "--budget-attempts", "200", "--gpus", "", "--db", str(db), "--job", "sigkill-then-resume"]


def _count(db: Path, sql: str, params=None) -> int:
    if not db.exists():
        return 0
    try:
        return Store(db).scalar(sql, params) or 0
    except Exception:  # noqa: BLE001 - migrating right now: ask again
        return 0


@pytest.mark.slow
@pytest.mark.timeout(1500)  # its own waits: up to 480 s for run 1, 300 s for run 2, 400 s for the reference run
def test_sigkill_mid_run_then_resume(prefect_api, tmp_path, sol_execbench_dir, request):
    db = tmp_path / "opt.duckdb"
    env = {**prefect_api.env, "SOLFORGE_CACHE_DIR": str(tmp_path / "compile-cache"),
           "SOLFORGE_GPU_LOCK_DIR": str(tmp_path / "locks"), "PREFECT_LOGGING_LEVEL": "INFO"}
    # the same job, never killed, through the flow function with NO server (Prefect's ephemeral API
    # in a subprocess of its own), its own compile cache; started first so that its server start-up
    # overlaps runs 1 and 2. It must make the same candidates as the killed-and-resumed job.
    ref_db = tmp_path / "ref.duckdb"
    eph = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    eph.update(PREFECT_HOME=str(tmp_path / "ephemeral_home"), SOLFORGE_CACHE_DIR=str(tmp_path / "ref-cache"),
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    code = ("import json, sys; sys.path.insert(0, '.'); from flows.optimize import optimize; "
            f"r = optimize(problems={PROBLEMS!r}, with_family=True, budget_attempts=200, gpus='', "
            f"db={str(ref_db)!r}); print('RESULT ' + json.dumps(r))")
    # output to files, not pipes: nobody reads them until the end, and a full pipe would block it
    ref_outf, ref_errf = open(tmp_path / "ref.out", "w"), open(tmp_path / "ref.err", "w")
    ref = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=eph, stdout=ref_outf,
                           stderr=ref_errf, text=True, start_new_session=True)
    request.addfinalizer(lambda: ref.poll() is None and os.killpg(ref.pid, signal.SIGKILL))

    log1 = open(tmp_path / "run1.log", "w")
    proc = subprocess.Popen(_args(db), cwd=REPO, env=env, stdout=log1, stderr=subprocess.STDOUT,
                            start_new_session=True)
    # setup traces every problem's reference in the sandbox (families, compiler) before the first
    # attempt: minutes on a busy 2-core machine
    deadline = time.monotonic() + 480
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if _count(db, "SELECT count(*) FROM attempts WHERE status = 'compiled'") >= 3:
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the run finished before it could be killed:\n" + \
            (tmp_path / "run1.log").read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log1.close()
    store = Store(db)
    run1 = store.query_one("SELECT id, status FROM runs WHERE kind = 'optimize'")
    assert run1["status"] == "running"  # SIGKILL: nobody closed it
    open_at_kill = store.query("SELECT id, status FROM attempts WHERE run_id = ? AND status IN "
                               "('queued', 'compiled')", [run1["id"]])
    assert open_at_kill, "the kill left nothing open"
    store.close()

    # run 2: same parameters -> same resume key
    r2 = subprocess.run(_args(db), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
    out2 = r2.stdout + r2.stderr
    assert "resuming: 1 earlier run(s)" in out2, out2[-3000:]
    assert "correctness and timing need a GPU" in out2  # says clearly what was not done

    store = Store(db)
    runs = {r["id"]: r for r in store.query("SELECT id, status, config FROM runs WHERE kind = 'optimize'")}
    assert len(runs) == 2 and runs[run1["id"]]["status"] == "interrupted"
    run2 = next(r for r in runs.values() if r["id"] != run1["id"])
    assert run2["status"] == "finished"
    assert run2["config"]["resume_key"] == runs[run1["id"]]["config"]["resume_key"]
    # every attempt open at the kill is now interrupted, and none of them was lost: each either had
    # compiled (no GPU: that is all there is to do) or was finished by a new attempt in run 2
    for a in open_at_kill:
        row = store.query_one("SELECT status, outcome FROM attempts WHERE id = ?", [a["id"]])
        assert row["status"] == "interrupted"
        if row["outcome"] != "compiled":
            child = store.query_one("SELECT run_id, outcome FROM attempts WHERE parent_id = ?", [a["id"]])
            assert child and child["run_id"] == run2["id"] and child["outcome"] == "compiled", a
    # none compiled twice: per (problem, source), one attempt that compiled, and NVRTC ran to
    # completion at most once (a cache hit is not a compile)
    dup = store.query("SELECT problem, source_hash, count(*) AS n FROM attempts WHERE outcome = 'compiled' "
                      "GROUP BY problem, source_hash HAVING count(*) > 1")
    assert dup == [], dup
    recompiled = store.query(
        "SELECT a.source_hash, count(*) AS n FROM compile_results c JOIN attempts a ON a.id = c.attempt_id "
        "WHERE c.status = 'ok' AND NOT c.cache_hit GROUP BY a.source_hash HAVING count(*) > 1")
    assert recompiled == [], recompiled
    got = {(r["problem"], r["source_hash"]) for r in store.query(
        "SELECT problem, source_hash FROM attempts WHERE outcome = 'compiled'")}
    compiled_in = {r["run_id"]: r["n"] for r in store.query(
        "SELECT run_id, count(*) AS n FROM attempts WHERE outcome = 'compiled' GROUP BY run_id")}
    assert compiled_in.get(run1["id"], 0) >= 3 and compiled_in.get(run2["id"], 0) > 0
    store.close()

    try:
        ref.wait(timeout=400)
    finally:
        if ref.poll() is None:
            os.killpg(ref.pid, signal.SIGKILL)
        ref_outf.close()
        ref_errf.close()
    ref_out, ref_err = (tmp_path / "ref.out").read_text(), (tmp_path / "ref.err").read_text()
    assert ref.returncode == 0, ref_out[-2000:] + ref_err[-3000:]
    result = json.loads(ref_out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["gpu"] is False and result["leaderboard"] and "need a GPU" in " ".join(result["notes"])
    want = {(r["problem"], r["source_hash"]) for r in Store(ref_db).query(
        "SELECT problem, source_hash FROM attempts WHERE outcome = 'compiled'")}
    assert got == want, (sorted(want - got), sorted(got - want))
    # it continued: what run 1 compiled was not redone by run 2, and together they made the whole job
    assert compiled_in[run1["id"]] + compiled_in[run2["id"]] == len(want)

    # the UI artifacts of the resumed run are on the server
    arts = {a["key"] for a in prefect_api.call("POST", "/artifacts/filter", {})}
    assert {"optimize-leaderboard", "optimize-summary"} <= arts, arts
