"""`solforge compile`: exit codes, JSON output, staging, clear input errors."""

from __future__ import annotations

import json
import subprocess
import sys

from solforge.compile import samples


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "solforge.cli", *args], capture_output=True, text=True,
                          cwd=cwd)


def test_compile_json_and_stage(tmp_path, monkeypatch):
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps(samples.candidate(samples.SCALE_CU, "scale")))
    out = _run("--json", "compile", str(cand), "--out", str(tmp_path / "stage"), "--arch", "sm_100a")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["status"] == "ok" and summary["arch"] == "sm_100a" and summary["cubin_sizes"]["kernel.cu"] > 0
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == ["candidate.json", "kernel.cu.cubin",
                                                                      "manifest.json"]


def test_compile_error_exit_code_and_log(tmp_path):
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps(samples.candidate("extern \"C\" __global__ void scale() { oops; }", "scale",
                                                 args=[])))
    out = _run("compile", str(cand), "--no-cache")
    assert out.returncode == 1
    assert "kernel.cu(1): error" in out.stderr


def test_bad_candidate_file_names_file_and_field(tmp_path):
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps({"problem": "p", "sources": {"k.cu": ""}, "launches": [{"kernel": "k"}]}))
    out = _run("compile", str(cand))
    assert out.returncode == 2
    assert str(cand) in out.stderr and "launches" in out.stderr
