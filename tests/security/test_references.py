"""A dataset's reference.py is code nobody here wrote: `solforge sol`, the tracers optimize uses and
the baselines run it only in the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import MARK, leaks_in_duckdb, leaks_in_files
from .problems import write_problem

SLEEPER = "import time\ntime.sleep(10**6)\n\ndef run(x, y):\n    return x\n"


def shell(flag: Path) -> str:
    return f"import os\nos.system('touch {flag}')\n\ndef run(x, y):\n    return x\n"


def leaker(out: Path) -> str:
    """Tries every way out with the environment, then fails with it in the message."""
    return (f"import os, json\n\ndef run(x, y):\n    return x\n\nblob = json.dumps(dict(os.environ))\n"
            f"try: open({str(out)!r}, 'w').write(blob)\nexcept OSError: pass\n"
            f"raise RuntimeError(blob)\n")


@pytest.mark.slow
def test_sol_over_hostile_references_finishes_prices_the_rest_and_reports_each_once(tmp_path):
    """The must-show: one reference sleeps forever, one calls os.system, beside normal problems."""
    root, flag, out = tmp_path / "problems", tmp_path / "pwned", tmp_path / "env.json"
    write_problem(root, "normal_a")
    write_problem(root, "normal_b")
    write_problem(root, "sleeper", SLEEPER)
    write_problem(root, "shell", shell(flag))
    write_problem(root, "leaker", leaker(out))
    db, cache = tmp_path / "sol.duckdb", tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(Path.cwd()), SOLFORGE_CACHE_DIR=str(cache))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "solforge.cli", "sol", "--db", str(db), "--root", str(root),
                        "--timeout", "20", "--no-cache", "--json"],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.monotonic() - t0 < 200
    doc = json.loads(r.stdout)
    by = {p["problem"]: p for p in doc["problems"]}
    assert by["normal_a"]["t_sol_ms_geomean"] and by["normal_b"]["t_sol_ms_geomean"]
    assert by["normal_a"]["unsupported"] == 0
    for bad in ("sleeper", "shell", "leaker"):
        assert by[bad]["unsupported"] == by[bad]["workloads"] and not by[bad]["t_sol_ms_geomean"]
    refused = doc["refused"]
    assert sum(x.startswith("sleeper:") for x in refused) == 1 and "timed out" in \
        next(x for x in refused if x.startswith("sleeper:"))
    assert sum(x.startswith("shell:") for x in refused) == 1 and "os.system" in \
        next(x for x in refused if x.startswith("shell:"))
    assert all("\n" not in x for x in refused)
    assert sum(line.startswith("sleeper:") for line in r.stderr.splitlines()) == 1
    assert not flag.exists() and not out.exists()
    assert MARK not in r.stdout + r.stderr
    assert not leaks_in_duckdb(db) and not leaks_in_files(cache, root)


@pytest.mark.slow
def test_tracer_runs_the_reference_in_the_sandbox(tmp_path):
    from solforge.kernels import pointwise_rows_trace as rt
    from solforge.kernels import pointwise_trace as pt
    from solforge.problem.loader import load_problem_dir

    flag = tmp_path / "pwned"
    defn = load_problem_dir(write_problem(tmp_path, "traced", shell(flag))).definition
    assert pt.trace_pointwise(defn) is None and "os.system" in pt.last_reason
    assert rt.trace_rows(defn) is None and "os.system" in rt.last_reason
    assert not flag.exists()
    normal = load_problem_dir(write_problem(tmp_path, "plain")).definition
    assert pt.trace_pointwise(normal) is not None  # an ordinary reference still traces


@pytest.mark.slow
def test_roofline_count_in_process_callers_get_sandboxed_counts(tmp_path):
    """count_problem (used by the optimize loop's roofline adapter) never runs a reference in the
    caller: a leaking one fails with the allowlisted environment only."""
    from solforge.problem.loader import load_problem_dir
    from solforge.roofline.estimate import CountStatus
    from solforge.roofline.sandboxed import count_problem

    out = tmp_path / "env.json"
    counts = count_problem(load_problem_dir(write_problem(tmp_path, "leak", leaker(out))), timeout_s=60)
    assert all(c.status is CountStatus.UNSUPPORTED for c in counts)
    assert all("RuntimeError" in c.reason and MARK not in c.reason for c in counts)
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shell", "sleeper"])
def test_baseline_reference_runs_sandboxed(tmp_path, kind):
    from solforge.evaluate.baseline import time_problem_isolated
    from solforge.problem.loader import load_problem_dir

    flag = tmp_path / "pwned"
    ref = shell(flag) if kind == "shell" else SLEEPER
    problem = load_problem_dir(write_problem(tmp_path, f"bl_{kind}", ref))
    t0 = time.monotonic()
    rows = time_problem_isolated(problem, "eager", device="cpu", reps=2, timeout_s=20)
    assert time.monotonic() - t0 < 60
    assert len(rows) == len(problem.workloads)
    if kind == "shell":
        assert all(r.status == "runtime_error" and "os.system" in r.message for r in rows)
    else:
        assert all(r.status == "timeout" for r in rows)
    assert not flag.exists() and all(MARK not in r.message for r in rows)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["eager", "compile"])
def test_baseline_isolated_times_a_normal_reference_on_the_gpu(tmp_path, variant):
    """On a GPU box: the sandboxed baseline sees the GPU (device nodes bound into bwrap) and times."""
    from solforge.evaluate.baseline import time_problem_isolated
    from solforge.problem.loader import load_problem_dir

    problem = load_problem_dir(write_problem(tmp_path, f"bl_gpu_{variant}"))
    rows = time_problem_isolated(problem, variant, reps=5, timeout_s=600)
    assert [r.status for r in rows] == ["passed"] * len(problem.workloads), [r.message for r in rows]
    assert all(r.median_ms and r.median_ms > 0 for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("g++") is None, reason="needs a host C++ compiler")
def test_compiler_check_runs_the_reference_in_the_sandbox(tmp_path):
    # the reference answers differently when it can see a credential: with the canary keys in this
    # process's environment, only a reference run without them matches the compiled plan
    from solforge.compiler.check import check_problem
    from solforge.problem.loader import load_problem_dir

    d = tmp_path / "keyed"
    d.mkdir()
    (d / "definition.json").write_text(json.dumps({
        "name": "keyed", "axes": {"N": {"type": "var"}},
        "inputs": {"x": {"shape": ["N"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["N"], "dtype": "float32"}},
        "reference": "import os\nimport torch\ndef run(x):\n"
                     "    return x * (3.0 if os.environ.get('OPENAI_API_KEY') else 2.0)\n"}))
    (d / "workload.jsonl").write_text(json.dumps({"uuid": "w0", "axes": {"N": 64},
                                                  "inputs": {"x": {"type": "random"}}}) + "\n")
    assert os.environ.get("OPENAI_API_KEY")
    r = check_problem(load_problem_dir(d), cap=16)
    assert r["ok"], r
