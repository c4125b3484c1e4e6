"""The reference-output cache (solforge/evaluate/refcache.py, solforge/orchestrate/refcache.py), on the
CPU: keys, invalidation on a reference change, hits and live fallbacks, tampering, the filler as its
own process, and that a candidate's process sees no cache path in its environment or stage."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from solforge.evaluate import refcache as rc
from solforge.evaluate import refcache_fill as rcf
from solforge.evaluate.evaluator import EvalConfig, Env, evaluate_workload
from solforge.evaluate.results import EvalStatus
from solforge.evaluate.runner import run_stage, stage_candidate
from tests.unit.adv_problem import reference_run, write_problem

REF = ("import torch\n\n\n@torch.no_grad()\ndef run(x, y):\n    z = x\n    for _ in range(8):\n"
       "        z = torch.sin(z) + y\n    return z\n")


def _problem_dir(root: Path, reference: str = REF, name: str = "rc_sin") -> Path:
    return write_problem(root, "S", name, reference, [(f"w{n}", n) for n in (256, 1000)])


def _load(d: Path):
    from solforge.problem import load_problem_dir

    return load_problem_dir(d, subset="S")


def _stage(tmp: Path, problem, rounds: int = 2) -> Path:
    return stage_candidate(tmp / "fill-stage", problem,
                           job={"settings": {"correctness_rounds": rounds, "timing": False}})


def _fill(tmp: Path, problem, rounds: int = 2):
    cache = tmp / "cache"
    summary = rcf.fill(_stage(tmp, problem, rounds), cache, probe=2)
    return cache, summary


class _Caller:
    """A 'candidate' computing the answer in Python (or a wrong one)."""

    def __init__(self, wrong: bool = False):
        self.wrong = wrong

    def prepare(self, rw, inputs, outputs):
        def call():
            z = inputs["x"]
            for _ in range(8):
                z = torch.sin(z) + inputs["y"]
            outputs["out"].copy_(z + (1.0 if self.wrong else 0.0))
        return call


def _env(problem, reader, wrong=False, calls=None):
    run = reference_run(problem, "_rc_ref")

    def reference(*args):
        if calls is not None:
            calls.append(1)
        return run(*args)

    return Env(problem=problem.name, reference=reference, caller=_Caller(wrong),
               device=torch.device("cpu"), config=EvalConfig(correctness_rounds=2, timing=False),
               refcache=reader)


def _reader(cache, summary, problem):
    return rc.RefCacheReader(rc.job_spec(cache, summary), problem=problem.name,
                             reference_source=problem.definition.reference, device_name="cpu")


def test_entry_key_is_stable_and_changes_with_every_part():
    parts = ["p", "u", 3, "iv", "rh", "2.11", "H200"]
    k = rc.entry_key(*parts)
    assert k == rc.entry_key(*parts) and len(k) == 32
    for i, other in enumerate(["q", "v", 4, "iv2", "rh2", "2.12", "H100"]):
        changed = list(parts)
        changed[i] = other
        assert rc.entry_key(*changed) != k, i
    assert rc.reference_hash(REF) != rc.reference_hash(REF + "\n# changed\n")
    assert len(rc.inputs_version()) == 16


def test_fingerprint_tells_different_inputs_apart():
    a = {"x": torch.arange(10, dtype=torch.float32), "s": 2.0}
    b = {"x": torch.arange(10, dtype=torch.float32), "s": 2.0}
    assert rc.fingerprint(a) == rc.fingerprint(b)
    b["x"][3] += 1
    assert rc.fingerprint(a) != rc.fingerprint(b)
    assert rc.fingerprint({**a, "s": 3.0}) != rc.fingerprint(a)
    assert rc.fingerprint({"x": torch.zeros(3, dtype=torch.bfloat16)})  # odd byte counts work


def test_fill_then_every_check_is_a_hit_and_the_reference_never_runs(tmp_path):
    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    assert set(summary["entries"]) == {"w256", "w1000"} and not summary["unfillable"]
    assert set(summary["entries"]["w256"]) == {"0", "1"}  # timing off: the correctness rounds only
    for f in cache.iterdir():
        assert f.stat().st_mode & 0o777 == 0o400
    assert cache.stat().st_mode & 0o777 == 0o700
    reader = _reader(cache, summary, problem)
    calls: list = []
    env = _env(problem, reader, calls=calls)
    for w in problem.workloads:
        res = evaluate_workload(env, w)
        assert res.status == EvalStatus.PASSED and res.correct, res.message
    assert calls == []  # every expected output came from the cache
    assert reader.stats["w256"] == {"hits": 2, "live": 0, "rejected": []}


def test_a_wrong_candidate_still_fails_against_cached_outputs(tmp_path):
    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    res = evaluate_workload(_env(problem, _reader(cache, summary, problem), wrong=True),
                            problem.workloads[0])
    assert res.status == EvalStatus.INCORRECT and not res.correct


def test_a_rewritten_entry_is_rejected_and_the_reference_runs_live(tmp_path):
    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    e = summary["entries"]["w256"]["0"]
    path = cache / f"{e['key']}.pt"
    obj = torch.load(path, weights_only=True)
    obj["outputs"]["out"] = obj["outputs"]["out"] + 1.0  # what a wrong candidate would want there
    os.chmod(path, 0o600)
    torch.save(obj, path)
    reader = _reader(cache, summary, problem)
    calls: list = []
    # the wrong candidate matches the tampered entry, but the entry's sha256 no longer matches the
    # filler's: the reference runs live and the candidate fails
    res = evaluate_workload(_env(problem, reader, wrong=True, calls=calls), problem.workloads[0])
    assert res.status == EvalStatus.INCORRECT
    assert calls == [1]
    assert reader.stats["w256"]["rejected"] and "sha256" in reader.stats["w256"]["rejected"][0]


def test_a_changed_reference_invalidates_every_entry(tmp_path):
    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    changed = REF.replace("range(8)", "range(9)")
    reader = rc.RefCacheReader(rc.job_spec(cache, summary), problem=problem.name,
                               reference_source=changed, device_name="cpu")
    inputs = {"x": torch.zeros(256), "y": torch.zeros(256)}
    assert reader.get("w256", 0, inputs, "cpu") is None
    assert "stale key" in reader.stats["w256"]["rejected"][0]
    # another device name (GPU model) is stale as well
    reader = rc.RefCacheReader(rc.job_spec(cache, summary), problem=problem.name,
                               reference_source=REF, device_name="NVIDIA H100")
    assert reader.get("w256", 0, inputs, "cpu") is None


def test_regenerated_inputs_that_differ_fall_back_to_live(tmp_path):
    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    reader = _reader(cache, summary, problem)
    assert reader.get("w256", 0, {"x": torch.ones(256), "y": torch.ones(256)}, "cpu") is None
    assert "differ" in reader.stats["w256"]["rejected"][0]
    assert reader.get("w256", 55, {}, "cpu") is None  # no entry: a miss, counted live
    assert reader.stats["w256"]["live"] == 2 and reader.stats["w256"]["hits"] == 0


def test_planned_seeds_follow_the_evaluator():
    cfg = EvalConfig(correctness_rounds=2, max_sets=4, set_bytes_budget=1000)
    rw = SimpleNamespace()
    assert rcf.planned_seeds(cfg, rw, 100, [7, 8]) == [0, 1, 103, 7, 8]       # 4 timing sets
    assert rcf.planned_seeds(cfg, rw, 600, [7]) == [0, 1, 7]                  # 1 set: round 1 is last
    assert rcf.planned_seeds(EvalConfig(correctness_rounds=2, timing=False), rw, 1, [7]) == [0, 1]


def test_a_reference_over_max_ref_s_leaves_the_workload_out(tmp_path):
    slow = REF.replace("    z = x\n", "    import time\n    time.sleep(5 if x.numel() > 500 else 0)\n"
                                        "    z = x\n")
    problem = _load(_problem_dir(tmp_path, slow))
    summary = rcf.fill(_stage(tmp_path, problem), tmp_path / "cache", max_ref_s=0.5)
    assert "w256" in summary["entries"] and "w1000" not in summary["entries"]
    assert "over" in summary["unfillable"]["w1000"]


class _Pool:
    def __init__(self):
        self.slots = []

    def slot(self, label=""):
        import contextlib

        self.slots.append(label)
        return contextlib.nullcontext(SimpleNamespace(env={"CUDA_VISIBLE_DEVICES": ""}, gpu="cpu"))


def test_orchestrator_fills_once_per_problem_in_its_own_process(tmp_path, monkeypatch):
    from solforge.orchestrate.refcache import RefCaches, matches

    assert matches(["014_gqa", "015_gqa*"], "014_gqa_paged_prefill_causal_h32_kv4_d128_ps1")
    assert matches(["014_gqa", "015_gqa*"], "015_gqa_paged_prefill")
    assert not matches(["014_gqa"], "021_rmsnorm_h128")
    problem = _load(_problem_dir(tmp_path))
    lab = SimpleNamespace(eval_job=lambda p: {"problem": p.name, "settings": {"correctness_rounds": 2}})
    caches = RefCaches(["rc_sin"], root=tmp_path / "root")
    pool = _Pool()
    a = caches.job_for(lab, problem, pool)
    b = caches.job_for(lab, problem, pool)
    assert pool.slots == ["refcache-fill:rc_sin"]  # one fill, on a slot of its own
    assert a["workloads"] == ["w256", "w1000"] and a["refcache"]["entries"] == b["refcache"]["entries"]
    assert Path(a["refcache"]["dir"]).is_dir()
    assert caches.summary()["rc_sin"]["evaluations"] == 2
    assert caches.job_for(lab, SimpleNamespace(name="other"), pool) is None
    caches.close()
    assert not caches.root.exists()


HOST_DUMP = """
import json, os
json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "files": sorted(os.listdir("."))},
          open("DUMP_PATH", "w"))


def run(inputs, outputs, ctx):
    return None
"""


def test_a_candidate_process_sees_no_cache_path_in_its_environment(tmp_path, monkeypatch):
    problem = _load(_problem_dir(tmp_path))
    cache = tmp_path / "private" / "secret-cache-5f3a"
    summary = rcf.fill(_stage(tmp_path, problem, 1), cache, probe=0)
    dump = tmp_path / "dump.json"
    monkeypatch.setenv("RC_DUMP", str(dump))  # a variable of the parent's: the allowlist keeps it out
    job = {"settings": {"correctness_rounds": 1, "timing": False},
           "refcache": rc.job_spec(cache, summary)}
    stage = stage_candidate(tmp_path / "cand", problem, host_source=HOST_DUMP.replace("DUMP_PATH", str(dump)),
                            job=job)
    report = run_stage(stage, timeout_s=120, launch="spawn", workloads=["w256"])
    assert "reference cache" not in report.results[0].message  # host candidates: live reference only
    seen = json.loads(dump.read_text())
    assert "RC_DUMP" not in seen["env"]  # the candidate's environment is an allowlist
    assert not [k for k, v in seen["env"].items() if "secret-cache-5f3a" in v or "REFCACHE" in k.upper()]
    assert "secret-cache-5f3a" not in json.dumps(seen["files"])
    assert not Path(seen["cwd"]).resolve().is_relative_to(cache.resolve())
    assert not cache.resolve().is_relative_to(Path(seen["cwd"]).resolve())


def test_per_problem_eval_timeouts():
    from solforge.errors import InputError
    from solforge.orchestrate.evaluation import eval_timeout_for
    from solforge.orchestrate.setup import parse_timeouts

    lab = SimpleNamespace(eval_timeout_s=60.0,
                          eval_timeout_overrides=parse_timeouts("014_gqa*=240, 015_gqa=180"))
    assert eval_timeout_for(lab, "014_gqa_paged_prefill") == 240.0
    assert eval_timeout_for(lab, "015_gqa_paged_prefill") == 180.0
    assert eval_timeout_for(lab, "021_rmsnorm_h128") == 60.0
    with pytest.raises(InputError):
        parse_timeouts("014_gqa")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_the_driver_uses_the_cache_for_cuda_candidates_and_says_so(tmp_path, monkeypatch):
    """driver.main end to end on the CPU, the cuda caller replaced by a Python one: every check a
    hit, the reference never run, the message naming the cache; a host candidate ignores it."""
    import io

    from solforge.evaluate import callers, driver

    problem = _load(_problem_dir(tmp_path))
    cache, summary = _fill(tmp_path, problem)
    job = {"settings": {"correctness_rounds": 2, "timing": False}, "refcache": rc.job_spec(cache, summary),
           "candidate_kind": "cuda"}
    stage = stage_candidate(tmp_path / "drv", problem, job=job)

    class FakeCuda(_Caller):
        def __init__(self, stage, device):
            super().__init__()

    monkeypatch.setattr(callers, "CudaCaller", FakeCuda)
    ref_calls: list = []
    from solforge.evaluate import reference as refmod

    orig = refmod.load_reference

    def counting_load(defn, folder, name="_solforge_reference"):
        mod = orig(defn, folder, name)
        run = mod.run
        mod.run = lambda *a: (ref_calls.append(1), run(*a))[1]
        return mod

    monkeypatch.setattr(refmod, "load_reference", counting_load)
    out = io.StringIO()
    monkeypatch.setattr(driver, "_OUT", out)
    assert driver.main([str(stage)]) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    results = [x for x in lines if x["type"] == "result"]
    assert [r["status"] for r in results] == ["passed", "passed"]
    assert all("reference cache: 2 hit(s), 0 live" in r["message"] for r in results)
    assert ref_calls == []
