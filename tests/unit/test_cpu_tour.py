"""The tour of the README on a machine without a GPU, command by command through the CLI, on the
example problem: ingest, sol, problems/show, compile, evaluate (refused in one line, nothing stored),
optimize (compiles, cannot time), report (HTML says nothing is scored yet), table, export (one line
saying why there is nothing to export yet), doctor. No command may raise: a traceback fails the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solforge.cli import main
from solforge.doctor import gpu_problem

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rmsnorm"
NAME = "example_rmsnorm_h256"


@pytest.mark.skipif(gpu_problem() is None, reason="this machine has a GPU: the tour would time kernels")
def test_tour_without_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOLFORGE_DB_PATH", str(tmp_path / "s.duckdb"))
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))

    def run(*argv) -> tuple[int, str, str]:
        rc = main(list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err

    assert run("ingest", str(EXAMPLE / "problem"))[0] == 0
    assert run("sol", "--store")[0] == 0
    rc, out, _ = run("--json", "problems")
    assert rc == 0 and [p["name"] for p in json.loads(out)] == [NAME]
    assert run("show", NAME)[0] == 0
    assert run("compile", str(EXAMPLE / "candidate.json"))[0] == 0

    rc, _, err = run("evaluate", NAME, str(EXAMPLE / "candidate.json"), "--record")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "needs a CUDA GPU" in err
    assert json.loads(run("--json", "attempts")[1]) == []  # nothing stored

    rc, out, err = run("optimize", "--problems", str(EXAMPLE / "problem"), "--budget-attempts", "1",
                       "--language", "cuda", "--json")
    assert rc == 0, err
    attempts = json.loads(run("--json", "attempts")[1])
    assert [a["status"] for a in attempts] == ["compiled"]

    html = tmp_path / "report.html"
    rc, _, err = run("report", "--html", str(html))
    assert rc == 0 and "nothing scored yet" in err
    assert "Nothing scored yet" in html.read_text()
    rc, out, _ = run("table", "--markdown")
    assert rc == 0 and f"| {NAME} |" in out and "unserved" in out

    rc, _, err = run("export", f"best:{NAME}", "--solution", str(tmp_path / "sol"))
    assert rc == 2 and len(err.strip().splitlines()) == 1
    rc, _, err = run("replay", attempts[0]["id"][:8])
    assert rc == 2 and "needs a CUDA GPU" in err
    assert run("doctor")[0] == 0
