"""An int scalar input that steers the reference's Python code (a mode flag) becomes a run-time
guard choosing between variants; a custom-made scalar takes its value from the workload axis of
its name. Run on the CPU through the g++ emulation, on problems written here."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem
from solforge.problem.loader import load_problem_dir

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

REF = """
import torch
def get_inputs(axes_and_scalars, device):
    n = axes_and_scalars["N"]
    return {"x": torch.randn(n, 8, device=device), "w": torch.randn(8, 8, device=device),
            "mode": axes_and_scalars["mode"]}
def run(x, w, mode):
    if mode == 1:
        return torch.relu(x @ w) + 1.0
    return torch.softmax(x, dim=-1) * 2.0
"""


def _problem(tmp_path, name, modes, custom: bool):
    axes = {"N": {"type": "var"}, "D": {"type": "const", "value": 8}}
    p = make_problem(tmp_path, name, axes, {"x": T("N", "D"), "w": T("D", "D"),
                                            "mode": {"shape": None, "dtype": "int64"}},
                     {"y": T("N", "D")}, REF,
                     [{"N": 5 + 4 * i} for i in range(len(modes))], scalars={"mode": 0})
    d = tmp_path / name
    rows = [json.loads(l) for l in (d / "workload.jsonl").read_text().splitlines()]
    for r, m in zip(rows, modes):
        if custom:   # the entrypoint makes every input; the mode is a workload axis
            r["axes"]["mode"] = m
            r["inputs"] = {k: {"type": "custom"} for k in ("x", "w", "mode")}
        else:
            r["inputs"]["mode"] = {"type": "scalar", "value": m}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    if custom:
        defn = json.loads((d / "definition.json").read_text())
        defn["custom_inputs_entrypoint"] = "get_inputs"
        (d / "definition.json").write_text(json.dumps(defn))
    return load_problem_dir(d)


@pytest.mark.parametrize("first_mode", [0, 1])
def test_int_mode_flag_selects_a_variant(tmp_path, first_mode):
    # the smallest workload (the one check_problem runs) has first_mode: each variant is checked
    p = _problem(tmp_path, f"m{first_mode}", [first_mode, 1 - first_mode, 1], custom=False)
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("variants") == 2
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


def test_custom_made_int_scalar_reads_its_workload_axis(tmp_path):
    p = _problem(tmp_path, "cu", [1, 0], custom=True)
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r


REF_CONST = """
import torch
def get_inputs(axes_and_scalars, device):
    n = axes_and_scalars["N"]
    return {"x": torch.randn(n, 8, device=device), "w": torch.randn(8, 8, device=device),
            "mode": 1}
def run(x, w, mode):
    if mode == 1:
        return torch.relu(x @ w) + 1.0
    return torch.softmax(x, dim=-1) * 2.0
"""


def test_custom_made_scalar_without_an_axis_takes_the_entrypoints_value(tmp_path):
    # the workload says only "custom" and no axis carries the value: the sandboxed tracer asks the
    # entrypoint itself (on the meta device) and traces the branch the entrypoint's value takes
    axes = {"N": {"type": "var"}, "D": {"type": "const", "value": 8}}
    p = make_problem(tmp_path, "cc", axes, {"x": T("N", "D"), "w": T("D", "D"),
                                            "mode": {"shape": None, "dtype": "int64"}},
                     {"y": T("N", "D")}, REF_CONST, [{"N": 5}, {"N": 9}], scalars={"mode": 0})
    d = tmp_path / "cc"
    rows = [json.loads(l) for l in (d / "workload.jsonl").read_text().splitlines()]
    for r in rows:
        r["inputs"] = {k: {"type": "custom"} for k in ("x", "w", "mode")}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    defn = json.loads((d / "definition.json").read_text())
    defn["custom_inputs_entrypoint"] = "get_inputs"
    (d / "definition.json").write_text(json.dumps(defn))
    p = load_problem_dir(d)
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=16, candidate=out.candidate)
    assert r["ok"], r
