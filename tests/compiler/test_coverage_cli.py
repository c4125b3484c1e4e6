"""`solforge coverage DIR --compile --emulate --json` on problems written here: a served problem's
plan compiles (NVRTC, sm_90a) and its CPU emulation matches the sandboxed reference; an unserved one
says why in one line and is not emulated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

ROOT = Path(__file__).resolve().parents[2]


def _write(root: Path, name: str, ref: str, out_shape: list) -> None:
    d = root / "mine" / name
    d.mkdir(parents=True)
    (d / "definition.json").write_text(json.dumps({
        "name": name, "axes": {"R": {"type": "var"}, "C": {"type": "const", "value": 48}},
        "inputs": {"x": {"shape": ["R", "C"], "dtype": "float32"}},
        "outputs": {"y": {"shape": out_shape, "dtype": "float32"}}, "reference": ref}))
    (d / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"{name}-{i}", "axes": {"R": r}, "inputs": {"x": {"type": "random"}}}) + "\n"
        for i, r in enumerate((5, 33))))


def test_coverage_compiles_and_emulates_what_it_serves(tmp_path):
    _write(tmp_path, "scaled_softmax", "import torch\ndef run(x):\n"
           "    return torch.softmax(x * 0.5, dim=-1) + 1.0\n", ["R", "C"])
    # an op the compiler has no lowering for (a symmetric eigensolver): unserved, with its reason
    _write(tmp_path, "eigen", "import torch\ndef run(x):\n"
           "    return torch.linalg.eigvalsh(x[:, :1].reshape(-1, 1, 1).expand(-1, 2, 2).contiguous())\n",
           ["R", "2"])
    env = dict(os.environ, PYTHONPATH=str(ROOT), SOLFORGE_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "solforge.cli", "coverage", str(tmp_path / "mine"),
                        "--compile", "--emulate", "--emulate-cap", "16", "--json"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    by = {p["problem"]: p for p in doc["problems"]}
    ok = by["scaled_softmax"]
    assert ok["served"] and ok["first"] == "compiler" and ok["compiles"] is True, ok
    assert ok["emulated"] is True, ok
    bad = by["eigen"]
    assert not bad["served"] and bad["reason"] and "\n" not in bad["reason"], bad
    assert "emulated" not in bad
    s = doc["summary"]
    assert (s["problems"], s["served"], s["served_and_compiles"], s["emulated"], s["emulated_correct"]) == \
        (2, 1, 1, 1, 1), s


def test_coverage_selects_problems_as_every_command_does_and_counts_launches(tmp_path):
    _write(tmp_path, "scaled_softmax", "import torch\ndef run(x):\n"
           "    return torch.softmax(x * 0.5, dim=-1) + 1.0\n", ["R", "C"])
    _write(tmp_path, "doubled", "import torch\ndef run(x):\n    return x * 2.0\n", ["R", "C"])
    _write(tmp_path, "halved", "import torch\ndef run(x):\n    return x * 0.5\n", ["R", "C"])
    (tmp_path / "list.txt").write_text("# one a line\nscaled_softmax\nhalv*  # a glob\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), SOLFORGE_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "solforge.cli", "coverage", str(tmp_path / "mine"),
                        "--worker", "compiler", "--problems", f"@{tmp_path / 'list.txt'}", "--json"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    by = {p["problem"]: p for p in json.loads(r.stdout)["problems"]}
    assert set(by) == {"scaled_softmax", "halved"}
    # one structure: every launch under "all"; the softmax is at least its reduction and the output
    assert by["halved"]["launches"] == {"all": 1}
    assert set(by["scaled_softmax"]["launches"]) == {"all"}
    assert by["scaled_softmax"]["launches"]["all"] >= 1
    # no matmul: the generic lowering is the first plan's
    assert by["halved"]["gemm_first"] == "generic"
