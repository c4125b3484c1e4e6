"""Loops over segments whose bounds are read back from the device (`for i in range(len(cu) - 1):
s, e = cu[i].item(), cu[i + 1].item()`): traced for a few iterations, rolled into a loop of the
symbolic count with the cat of its outputs collected, and checked on the CPU (g++ emulation)
against the reference, on problems written here."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

# boundaries 0 = b_0 <= ... <= b_{S-1} = L, some equal (an empty segment) when there is room
GET_INPUTS = """
import torch
def get_inputs(axes_and_scalars, device):
    L, S = axes_and_scalars["L"], axes_and_scalars["S"]
    inner = torch.randint(0, L + 1, (S - 2,), generator=torch.Generator().manual_seed(L * 7 + S))
    if S > 3:
        inner[1] = inner[0]
    cu = torch.cat([torch.tensor([0]), inner.sort().values, torch.tensor([L])]).to(torch.int64)
    return {"x": torch.randn(4, L, 8, device=device), "cu": cu.to(device)}
"""

SEGMENT_ATTENTION = GET_INPUTS + """
def run(x, cu):
    outs = []
    for i in range(cu.shape[0] - 1):
        s = cu[i].item()
        e = cu[i + 1].item()
        if e - s == 0:
            continue
        q = x[:, s:e]
        a = torch.softmax(torch.matmul(q, q.transpose(1, 2)) * 0.25, dim=-1)
        outs.append(torch.matmul(a, q) + 1.0)
    y = torch.cat(outs, dim=1)
    return y.reshape(4, x.shape[1], 8) * 2.0
"""


def _custom(tmp_path, name: str, reference: str, workloads: list):
    from solforge.problem.loader import load_problem_dir

    make_problem(tmp_path, name, {"L": {"type": "var"}, "S": {"type": "var"}},
                 {"x": T(4, "L", 8), "cu": {"shape": ["S"], "dtype": "int64"}}, {"y": T(4, "L", 8)},
                 reference, workloads)
    d = tmp_path / name
    defn = json.loads((d / "definition.json").read_text())
    defn["custom_inputs_entrypoint"] = "get_inputs"
    (d / "definition.json").write_text(json.dumps(defn))
    rows = [json.loads(line) for line in (d / "workload.jsonl").read_text().splitlines()]
    for r in rows:
        r["inputs"] = {k: {"type": "custom"} for k in r["inputs"]}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_problem_dir(d)


def test_segment_loop_rolled_collected_and_emulated(tmp_path):
    from solforge.compiler.api import compile_problem

    from .test_compiler import _compile_ok

    p = _custom(tmp_path, "segattn", SEGMENT_ATTENTION, [{"L": 7, "S": 4}, {"L": 8, "S": 6}])
    out = compile_problem(p)
    assert out.ok, out.reason
    names = [launch.kernel for launch in out.candidate.launches]
    # one body, launched for the largest count (S - 1 = 5), each launch told its iteration
    assert len(set(names)) < len(names) - 8
    assert sum(n.endswith("_collect") for n in names) == 5
    src = out.candidate.sources["kernel.cu"]
    assert "<= 5LL" in src and "__trap()" in src   # a larger count fails on the device
    _compile_ok(out.candidate)   # NVRTC, sm_90a
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_segment_loop_reducing_over_a_tested_length_is_refused(tmp_path):
    """The branch on a segment being empty takes the non-empty side; a value reduced over the
    segment's length (here a sum over its rows, not kept per row) would then differ from the
    skipped branch, so the plan is refused in one line."""
    from solforge.compiler.api import compile_problem

    ref = GET_INPUTS + """
def run(x, cu):
    y = x * 0.0
    for i in range(cu.shape[0] - 1):
        s = cu[i].item()
        e = cu[i + 1].item()
        if e - s == 0:
            continue
        y = y + x[:, s:e].sum(dim=1, keepdim=True)
    return y
"""
    out = compile_problem(_custom(tmp_path, "segsum", ref, [{"L": 7, "S": 4}, {"L": 8, "S": 6}]))
    assert not out.ok and "\n" not in out.reason
