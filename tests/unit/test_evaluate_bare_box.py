"""The GPU box has only the stdlib, pydantic, numpy, torch and cuda-python: every module of
solforge.evaluate and the baseline path must work with the orchestration and store packages
unimportable. A sitecustomize on PYTHONPATH (tests/adversarial/harness.bare_box_site) blocks them in a
child interpreter. The spawned driver runs under the same block in tests/adversarial (CPU run)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/adversarial"))
import harness  # noqa: E402

BLOCKED = harness.BARE_BOX_BLOCKED

CHILD = textwrap.dedent("""
    import importlib, json, pkgutil, sys, tempfile
    from pathlib import Path
    import solforge.evaluate as ev

    # driver.py takes over fd 1 when imported; report through a file instead
    names = sorted(m.name for m in pkgutil.iter_modules(ev.__path__, "solforge.evaluate."))
    for n in names + ["solforge.compile.launcher", "solforge.problem.loader"]:
        importlib.import_module(n)

    # the baseline path of the baselines scheduler: one eager row on the CPU
    from solforge.baselines import scheduler as run_baselines
    from solforge.evaluate.baseline import time_problem
    from solforge.problem import load_problem_dir

    p = load_problem_dir(Path(sys.argv[3]))
    rows = list(time_problem(p, "eager", Path(tempfile.mkdtemp()), reps=3, device="cpu",
                             timer=run_baselines.WallTimer(), only=[p.workloads[0].uuid]))
    blocked = sorted(m for m in sys.modules if m.split(".")[0] in %r)
    Path(sys.argv[1]).write_text(json.dumps({"modules": names, "blocked_loaded": blocked,
                                              "rows": [r.to_json() for r in rows]}))
""" % (BLOCKED,))


def _blocker_dir(tmp_path: Path) -> Path:
    return harness.bare_box_site(tmp_path / "bare")


def test_blocker_blocks(tmp_path):
    """The check itself works: a blocked package fails to import in the child."""
    d = _blocker_dir(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import duckdb"], capture_output=True, text=True,
                       env={"PYTHONPATH": str(d), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode != 0 and "bare GPU box" in r.stderr


def test_every_evaluate_module_imports_and_baselines_run_on_the_bare_box(tmp_path):
    d = _blocker_dir(tmp_path)
    report = tmp_path / "report.json"
    problem = REPO / "tests/adversarial/problem"
    r = subprocess.run([sys.executable, "-c", CHILD, str(report), str(REPO), str(problem)],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path,
                       env={"PYTHONPATH": f"{d}:{REPO}", "PATH": "/usr/bin:/bin",
                            "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(report.read_text())
    assert "solforge.evaluate.driver" in rep["modules"] and "solforge.evaluate.baseline" in rep["modules"]
    assert len(rep["modules"]) >= 12
    assert rep["blocked_loaded"] == []
    (row,) = rep["rows"]
    assert row["status"] == "passed" and row["median_ms"] > 0, row
