"""Evaluation phases in the store (migrations 031 + 071): a RunReport's launch, mode and phase seconds go
through the loop's record stage into attempts.eval_* and eval_results.phases on a real DuckDB file,
with real NVRTC compiles and real staging; only the GPU process (runner.run_stage) is a stand-in,
named as such, returning a RunReport shaped like the runner's."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.evaluate.phase_totals import flat_seconds
from solforge.evaluate.results import EvalResult, RunReport
from solforge.store import Store, StoreError
from solforge.store import migrate as m

MINE = ("031_eval_phases.sql", "071_eval_phase_views.sql")


def test_flat_seconds_of_one_process_of_screen_and_rest_and_of_nothing():
    one = {"seconds": {"launch": 0.5, "cuda_init": 0.25, "teardown": 0.125}, "mode": "zygote",
           "driver_s": 1.0, "pid": 7, "first_line_s": 0.5, "total_s": 1.75}
    assert flat_seconds(one) == {"launch": 0.5, "cuda_init": 0.25, "teardown": 0.125, "driver": 1.0,
                                 "total": 1.75}
    two = {"screen": one, "rest": {**one, "seconds": {"launch": 0.25, "reference": 2.0},
                                   "total_s": 3.0}, "total_s": 4.75}
    assert flat_seconds(two) == {"launch": 0.75, "cuda_init": 0.25, "teardown": 0.125, "reference": 2.0,
                                 "driver": 2.0, "total": 4.75}
    # already flat (the documented shape), non-finite values dropped
    assert flat_seconds({"launch": 0.5, "load": float("nan"), "total": 2}) == {"launch": 0.5, "total": 2.0}
    assert flat_seconds({}) == {} and flat_seconds(None) == {}


# ---- through the loops' record path --------------------------------------------------------------

@pytest.fixture(scope="module")
def rms_problem(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    return load_problem_dir(sol_execbench_dir / "L1" / "069_rms_norm", subset="L1")


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "phases.duckdb")
    yield s
    s.close()


def standin_gpu(monkeypatch, lab, problem, launch="zygote"):
    """runner.run_stage as a GPU would answer it (this machine has none): every staged workload passes,
    the n-th evaluation's cuda_init takes 0.1 * n s; each workload has its own phases."""
    from solforge.evaluate import runner

    calls = []

    def run_stage(stage, **kw):
        calls.append(stage)
        n = len(calls)
        sols = {s.uuid: s for s in lab.roofline(problem)}
        uuids = runner._expected_uuids(stage)
        assert (stage / "candidate.json").exists()  # the real staging ran
        res = [EvalResult(u, "passed", problem=problem.name, correct=True, max_abs_err=0.0,
                          matched_ratio=1.0, median_ms=sols[u].t_sol_ms * 2, n_reps=5,
                          extra={"phases": {"reference": 0.01, "checks": 0.02 * n, "workload": 0.05}})
               for u in uuids]
        phases = {"seconds": {"launch": 0.03, "imports": 0.0, "cuda_init": 0.1 * n, "load": 0.2,
                              "timing_profile": 0.4, "teardown": 0.01},
                  "mode": launch, "driver_s": 0.9, "pid": 1000 + n, "first_line_s": 0.03,
                  "total_s": 1.0 + n}
        return RunReport(problem.name, res, wall_s=1.0 + n, exit_code=0, launch=launch,
                         phases=phases, mode="full")

    monkeypatch.setattr(runner, "run_stage", run_stage)
    monkeypatch.setattr(runner, "prestart", lambda *a, **k: None)  # no zygote server without a GPU
    return calls


def _loop(pool, store, problem, tmp_path, monkeypatch):
    from solforge.agents.lab import Lab
    from solforge.agents.offline import OfflineWorker
    from solforge.agents.planner import Budget, PlannerConfig
    from solforge.orchestrate.gpus import GpuPool
    from solforge.orchestrate.loop import LoopConfig, OptimizeLoop

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path / "gpulocks"))
    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, store=store)  # the real evaluate path
    lab.set_baselines(problem, {s.uuid: s.t_sol_ms * 4 for s in lab.roofline(problem)})
    cfg = LoopConfig(budget=Budget(attempts=2), planner=PlannerConfig(attempts_per_round=2))
    workers = {"offline": OfflineWorker(lab)}
    # the loop's default slots (none visible here: one of its own), or GPU 0 given explicitly
    return lab, OptimizeLoop(store, [problem], lab, workers, cfg,
                             pool=None if pool == "default" else GpuPool(["0"]))


@pytest.mark.parametrize("pool", ["default", "explicit"])
def test_evaluated_attempts_carry_launch_mode_and_phases(pool, store, rms_problem, tmp_path,
                                                         monkeypatch):
    lab, loop = _loop(pool, store, rms_problem, tmp_path, monkeypatch)
    calls = standin_gpu(monkeypatch, lab, rms_problem)
    report = loop.run()
    rows = store.query("SELECT id, status, outcome, eval_launch, eval_mode, eval_phases, gpu_seconds "
                       "FROM attempts WHERE run_id = ? ORDER BY created_at", [report.run_id])
    assert len(calls) == 2 and len(rows) == 2
    n_wl = len(rms_problem.workloads)
    cuda_inits = []
    for r in rows:
        assert (r["status"], r["outcome"], r["eval_launch"], r["eval_mode"]) == \
            ("evaluated", "ok", "zygote", "full")
        ph = r["eval_phases"]
        assert set(ph) == {"launch", "imports", "cuda_init", "load", "timing_profile", "teardown",
                           "driver", "total"}
        assert ph["total"] == pytest.approx(r["gpu_seconds"])  # both are the runner's wall time
        cuda_inits.append(ph["cuda_init"])
        wl = store.query("SELECT phases FROM eval_results WHERE attempt_id = ?", [r["id"]])
        assert len(wl) == n_wl and all(set(w["phases"]) == {"reference", "checks", "workload"}
                                       for w in wl)
    assert sorted(cuda_inits) == pytest.approx([0.1, 0.2])
    # the report view: median seconds per phase, per problem and launch mode
    v = {r["phase"]: r for r in store.query(
        "SELECT * FROM v_eval_phases WHERE problem = ? AND launch = 'zygote'", [rms_problem.name])}
    assert v["cuda_init"]["n_evals"] == 2 and v["cuda_init"]["median_s"] == pytest.approx(0.15)
    assert v["total"]["median_s"] == pytest.approx(2.5)
    assert v["cuda_init"]["share_of_total"] == pytest.approx(0.3 / 5.0)
    w = store.query("SELECT phase, median(seconds) AS s FROM v_eval_workload_phases "
                    "WHERE problem = ? GROUP BY phase", [rms_problem.name])
    assert {r["phase"]: round(r["s"], 6) for r in w} == {"reference": 0.01, "checks": 0.03,
                                                          "workload": 0.05}


def test_a_failed_write_leaves_no_half_record(store):
    """The phases ride on the same UPDATE as the status, inside the transaction of the result rows:
    when a result row cannot be written, the attempt keeps neither status nor phases."""
    from solforge.agents.outcome import AttemptOutcome, Outcome
    from solforge.orchestrate.attempts import finish

    aid = store.create_attempt("p")
    store.mark_attempt(aid, "compiled")
    out = Outcome(AttemptOutcome.OK, "ok", eval_launch="spawn", eval_mode="full",
                  eval_phases={"total": 1.0},
                  eval_rows=[{"workload_uuid": "w", "status": "passed", "phases": "{not json"}])
    with pytest.raises(StoreError):
        finish(store, aid, out)
    a = store.query_one("SELECT status, eval_launch, eval_phases FROM attempts WHERE id = ?", [aid])
    assert a == {"status": "compiled", "eval_launch": None, "eval_phases": None}
    assert store.scalar("SELECT count(*) FROM eval_results") == 0
    out.eval_rows[0]["phases"] = {"workload": 0.5}
    finish(store, aid, out)
    a = store.query_one("SELECT status, eval_launch, eval_phases FROM attempts WHERE id = ?", [aid])
    assert a == {"status": "evaluated", "eval_launch": "spawn", "eval_phases": {"total": 1.0}}


def test_evaluate_api_record_writes_phases_too(store):
    """`solforge evaluate --record` / replay record through solforge.orchestrate.replay.record."""
    from solforge.orchestrate.replay import record

    aid = store.create_attempt("p")
    rep = RunReport("p", [EvalResult("w1", "passed", correct=True, median_ms=1.0,
                                     extra={"phases": {"workload": 0.25}})],
                    launch="spawn", mode="screen",
                    phases={"seconds": {"imports": 2.0}, "driver_s": 2.5, "total_s": 3.0})
    record(store, aid, rep)
    a = store.query_one("SELECT eval_launch, eval_mode, eval_phases FROM attempts WHERE id = ?", [aid])
    assert a == {"eval_launch": "spawn", "eval_mode": "screen",
                 "eval_phases": {"imports": 2.0, "driver": 2.5, "total": 3.0}}
    assert store.scalar("SELECT phases->>'workload' FROM eval_results WHERE attempt_id = ?",
                        [aid]) == "0.25"


def test_migration_applies_on_a_database_made_before_it(tmp_path):
    """A database with every other migration and an evaluated attempt gets 031 and 071 when a Store
    opens it: old rows keep NULL phases and stay out of the views; new records land."""
    import duckdb

    old_migs = tmp_path / "before"
    old_migs.mkdir()
    for mg in m.discover():
        if mg.path.name not in MINE:
            shutil.copy(mg.path, old_migs / mg.path.name)
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    m.migrate(con, old_migs)
    cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() "
                                      "WHERE table_name = 'attempts'").fetchall()}
    assert "eval_phases" not in cols
    con.execute("INSERT INTO attempts (id, problem, status) VALUES ('old', 'p', 'evaluated')")
    con.execute("INSERT INTO eval_results (attempt_id, workload_uuid, status, correct) "
                "VALUES ('old', 'w', 'passed', true)")
    con.close()

    s = Store(db)
    assert sorted(s.applied_migrations) == sorted(MINE)
    assert s.query_one("SELECT eval_launch, eval_mode, eval_phases FROM attempts WHERE id = 'old'") == \
        {"eval_launch": None, "eval_mode": None, "eval_phases": None}
    assert s.scalar("SELECT count(*) FROM v_eval_phases") == 0
    assert s.scalar("SELECT count(*) FROM v_eval_workload_phases") == 0
    aid = s.create_attempt("p")
    s.mark_attempt(aid, "evaluated", eval_launch="zygote", eval_mode="full",
                   eval_phases=json.dumps({"cuda_init": 0.5, "total": 1.0}))
    assert s.query_one("SELECT median_s FROM v_eval_phases WHERE phase = 'cuda_init'") == \
        {"median_s": 0.5}
    s.close()
    assert Store(db).applied_migrations == []
