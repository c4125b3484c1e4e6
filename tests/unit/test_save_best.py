"""solforge best (solforge.results.best) on a real DuckDB file written through the store API: which attempt becomes
best/<problem>.json (the README table's rule, or --by speedup), what the file holds (params that
rebuild the stored candidate), and when an existing best/ file is replaced."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from solforge.kernels import get_family
from solforge.problem import load_problem_dir
from solforge.store import AttemptStatus, Store
from solforge.store.problems import upsert_problems

REPO = Path(__file__).resolve().parents[2]
PROB = ("L1", "069_rms_norm")   # served by the rmsnorm family, which fixes some params per problem


from solforge.results import best as sb  # noqa: E402


@pytest.fixture(scope="module")
def problem(sol_execbench_dir):
    return load_problem_dir(sol_execbench_dir / PROB[0] / PROB[1], PROB[0])


def _attempt(s, run, problem, fam, params, speedup, sol, wrong_on=None):
    """One evaluated attempt: the family's candidate for `params`; every workload scored with the same
    speedup and SOL score; `wrong_on` (a workload index) evaluated incorrect."""
    cand = fam.instantiate(problem, params)
    cand.notes = f"family={fam.name} (test); {cand.notes}".strip("; ")
    aid = s.create_attempt(problem.name, run_id=run, agent="offline", language=cand.language, candidate=cand)
    evals, scores = [], []
    for i, w in enumerate(problem.workloads):
        ok = i != wrong_on
        t_k = 1.0 / speedup
        evals.append({"attempt_id": aid, "workload_uuid": w.uuid, "status": "passed" if ok else "incorrect",
                      "correct": ok, "median_ms": t_k, "max_abs_err": 1e-3 * (i + 1), "max_rel_err": 1e-4,
                      "n_reps": 20, "hardware_id": None})
        scores.append({"attempt_id": aid, "workload_uuid": w.uuid, "speedup": speedup, "sol_score": sol,
                       "t_kernel_ms": t_k, "t_baseline_ms": 1.0, "t_sol_ms": 0.1,
                       "baseline_variant": "compile" if i % 2 else "eager"})
    s.mark_attempt(aid, AttemptStatus.EVALUATED, rows={"eval_results": evals, "scores": scores},
                   outcome="ok" if wrong_on is None else "incorrect", sol_score=sol if wrong_on is None else None)
    return aid


@pytest.fixture()
def db(tmp_path, problem):
    """Three attempts: A (speedup 2, SOL 0.6), B (speedup 2.5, SOL 0.5: faster by geomean, lower mean
    SOL score), C (speedup 9, SOL 0.9, wrong on one workload: never best)."""
    path = tmp_path / "opt.duckdb"
    s = Store(path)
    upsert_problems(s, [problem])
    run = s.create_run(kind="optimize", config={"gpu_identity": "NVIDIA H200|580.159.04"}, gpu_profile="h200")
    fam = get_family("rmsnorm")
    space = fam.param_space(problem)
    assert len(space) >= 3
    ids = {"A": _attempt(s, run, problem, fam, space[0], 2.0, 0.6),
           "B": _attempt(s, run, problem, fam, space[1], 2.5, 0.5),
           "C": _attempt(s, run, problem, fam, space[2], 9.0, 0.9, wrong_on=1)}
    s.finish_run(run)
    s.close()
    return path, ids, run


def _target(root: Path) -> Path:
    return root / "kernels_cuda" / "rmsnorm" / "best" / f"{PROB[1]}.json"


def test_selects_the_tables_best_and_writes_a_faithful_record(db, tmp_path, problem):
    path, ids, run = db
    root = tmp_path / "repo"
    (d,) = sb.save_best(path, write=True, root=root, db_label="opt.duckdb")
    assert d.action == "new" and d.path == _target(root)
    rec = json.loads(_target(root).read_text())
    assert rec["attempt_id"] == ids["A"]            # highest mean SOL score among the correct ones
    assert rec["run_id"] == run and rec["source"] == "optimize pipeline" and rec["db"] == "opt.duckdb"
    assert rec["family"] == "rmsnorm" and rec["gpu"] == "NVIDIA H200" and rec["driver"] == "580.159.04"
    assert rec["geomean_speedup"] == pytest.approx(2.0) and rec["sol_median"] == pytest.approx(0.6)
    assert rec["commit"] is None and "not stored" in rec["commit_source"]
    # params where the family's readers look, without the problem-fixed ones, rebuilding the candidate
    fam = get_family(rec["family"])
    spec = fam.analyze(problem.definition)
    assert spec.fixed and not set(spec.fixed) & set(rec["params"])
    assert fam.instantiate(problem, rec["params"]).source_hash() == rec["candidate_source_hash"]
    assert rec["candidate"]["params"] == fam.instantiate(problem, rec["params"]).params
    wl = rec["workloads"]
    assert [w["uuid"] for w in wl] == [w.uuid for w in problem.workloads]
    assert all(w["correct"] for w in wl) and wl[2]["max_abs_err"] == pytest.approx(3e-3)
    assert {w["t_b_kind"] for w in wl} == {"eager", "compile"} and rec["t_b_from"] == "compile+eager"
    assert all(w["speedup"] == pytest.approx(w["t_base_ms"] / w["t_kernel_ms"]) for w in wl)
    assert ids["A"] in rec["reproduce"]


def test_by_speedup_picks_the_fastest_correct_attempt(db, tmp_path):
    path, ids, _ = db
    root = tmp_path / "repo"
    sb.save_best(path, write=True, root=root, by="speedup")
    rec = json.loads(_target(root).read_text())
    assert rec["attempt_id"] == ids["B"] and rec["geomean_speedup"] == pytest.approx(2.5)


def _existing(root: Path, problem, speedup: float, uuids=None) -> dict:
    old = {"problem": problem.name, "family": "rmsnorm", "params": {"VEC": 1}, "scored_by": "solforge/results/bench_scores.py",
           "commit": "abc", "workloads": [{"uuid": u, "t_k_ms": 1.0, "t_b_ms": speedup}
                                          for u in (uuids or [w.uuid for w in problem.workloads])]}
    _target(root).parent.mkdir(parents=True, exist_ok=True)
    _target(root).write_text(json.dumps(old))
    return old


def test_replace_only_when_faster_over_common_workloads(db, tmp_path, problem):
    path, ids, _ = db
    root = tmp_path / "repo"
    # the existing file is faster (3x against the pipeline's 2x): kept, byte for byte
    _existing(root, problem, 3.0)
    before = _target(root).read_bytes()
    (d,) = sb.save_best(path, write=True, root=root)
    assert (d.action, d.n_common) == ("kept", len(problem.workloads))
    assert d.old_speedup == pytest.approx(3.0) and d.new_speedup == pytest.approx(2.0)
    assert _target(root).read_bytes() == before
    # slower (1.5x) on half the workloads, and absent on the rest: compared on the common half
    half = [w.uuid for w in problem.workloads][: len(problem.workloads) // 2]
    _existing(root, problem, 1.5, half)
    (d,) = sb.save_best(path, write=False, root=root)        # dry run: decides, writes nothing
    assert d.action == "replaced" and d.n_common == len(half) and "kept" not in d.line()
    assert json.loads(_target(root).read_text())["params"] == {"VEC": 1}
    (d,) = sb.save_best(path, write=True, root=root)
    rec = json.loads(_target(root).read_text())
    assert rec["attempt_id"] == ids["A"]
    assert rec["replaced"]["commit"] == "abc" and rec["replaced"]["speedup_geomean_common"] == pytest.approx(1.5)
    # no workload in common: nothing to compare, the existing file stays
    _existing(root, problem, 0.1, ["not-a-uuid"])
    (d,) = sb.save_best(path, write=True, root=root)
    assert d.action == "kept" and d.n_common == 0
    assert json.loads(_target(root).read_text())["params"] == {"VEC": 1}


def test_gz_input_and_the_db_file_is_not_touched(db, tmp_path, capsys):
    path, ids, _ = db
    gz = tmp_path / "opt.duckdb.gz"
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    digest = hashlib.sha256(gz.read_bytes()).hexdigest()
    root = tmp_path / "repo"
    assert sb.main(["--db", str(gz), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"new      {PROB[1]}: pipeline 2.0000x" in out and "dry run" in out
    assert not _target(root).exists()
    assert hashlib.sha256(gz.read_bytes()).hexdigest() == digest
    assert not list(tmp_path.glob("opt.duckdb.gz.lock*"))


def test_tunable_params_drops_derived_keys(sol_execbench_dir):
    """gemm_wgmma adds TICKETS itself (not fixed, not tunable): the saved params leave it out, and
    they rebuild the stored candidate; params that rebuild something else are refused."""
    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / "004_gemm_n128_k2048", "FlashInfer-Bench")
    fam = get_family("gemm_wgmma")
    params = fam.param_space(p)[1]
    cand = fam.instantiate(p, params)
    assert "TICKETS" in cand.params
    assert sb.tunable_params(fam, p.definition, cand) == params
    other = fam.instantiate(p, fam.param_space(p)[2])
    other.params = cand.params
    with pytest.raises(ValueError, match="different candidate"):
        sb.tunable_params(fam, p.definition, other)


def test_the_record_names_commit_torch_and_cuda_from_the_run_row(tmp_path, problem):
    """Issue #6: a best/ file carries the GPU, driver, git commit and torch version of its run; the
    optimize loop stores them in runs (migration 080) and runs.config.provenance."""
    path = tmp_path / "prov.duckdb"
    s = Store(path)
    upsert_problems(s, [problem])
    pv = {"commit": "0123456789abcdef0123456789abcdef01234567", "commit_source": "env SOLFORGE_COMMIT",
          "dirty": None, "torch": "2.11.0+cu130", "cuda": "13.0"}
    run = s.create_run(kind="optimize", config={"gpu_identity": "NVIDIA H200|580.159.04", "provenance": pv},
                       gpu_profile="h200", provenance=pv)
    assert s.query_one("SELECT git_commit, torch_version, cuda_version FROM runs WHERE id = ?", [run]) == {
        "git_commit": pv["commit"], "torch_version": "2.11.0+cu130", "cuda_version": "13.0"}
    fam = get_family("rmsnorm")
    _attempt(s, run, problem, fam, fam.param_space(problem)[0], 2.0, 0.6)
    s.finish_run(run)
    s.close()
    root = tmp_path / "repo"
    (d,) = sb.save_best(path, write=True, root=root, db_label="prov.duckdb")
    rec = json.loads(_target(root).read_text())
    assert rec["gpu"] == "NVIDIA H200" and rec["driver"] == "580.159.04"
    assert rec["commit"] == pv["commit"] and rec["commit_before_run"] is None
    assert rec["commit_source"] == "stored in the DB (env SOLFORGE_COMMIT)"
    assert rec["torch"] == "2.11.0+cu130" and rec["cuda"] == "13.0"
    # a file without a commit (measured before provenance), faster only by noise (2%): the result
    # with a commit replaces it ("refreshed")
    old = dict(rec, commit=None, workloads=[dict(w, speedup=w["speedup"] * 1.02) for w in rec["workloads"]])
    _target(root).write_text(json.dumps(old))
    (d,) = sb.save_best(path, write=True, root=root, db_label="prov.duckdb")
    assert d.action == "refreshed" and d.old_speedup > d.new_speedup
    assert json.loads(_target(root).read_text())["commit"] == pv["commit"]
    # beyond the noise (the old file 5% faster): kept, commit or not
    old = dict(old, workloads=[dict(w, speedup=w["speedup"] * 1.05) for w in rec["workloads"]])
    _target(root).write_text(json.dumps(old))
    (d,) = sb.save_best(path, write=True, root=root, db_label="prov.duckdb")
    assert d.action == "kept" and json.loads(_target(root).read_text())["commit"] is None
