"""The trace-driven compiler on problems written here (not taken from the shared set): trace in a
child process, lower, plan, and NVRTC-compile the candidate for sm_90a."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from solforge.compiler.api import compile_problem, _CACHE
from solforge.problem.loader import load_problem_dir


def make_problem(tmp: Path, name: str, axes: dict, inputs: dict, outputs: dict, reference: str,
                 workloads: list[dict], scalars: dict | None = None) -> object:
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    defn = {"name": name, "axes": axes, "inputs": inputs, "outputs": outputs,
            "reference": textwrap.dedent(reference)}
    (d / "definition.json").write_text(json.dumps(defn))
    rows = []
    for i, ax in enumerate(workloads):
        ins = {k: {"type": "random"} for k, v in inputs.items() if v["shape"] is not None}
        for k, v in (scalars or {}).items():
            ins[k] = {"type": "scalar", "value": v}
        rows.append(json.dumps({"uuid": f"{name}-{i}", "axes": ax, "inputs": ins}))
    (d / "workload.jsonl").write_text("\n".join(rows) + "\n")
    return load_problem_dir(d)


def with_custom_inputs(tmp: Path, name: str) -> object:
    """The problem make_problem wrote under tmp/name, its inputs made by the reference's
    `get_inputs` (custom inputs: values the reference's data-dependent sizes rely on)."""
    d = tmp / name
    defn = json.loads((d / "definition.json").read_text())
    defn["custom_inputs_entrypoint"] = "get_inputs"
    (d / "definition.json").write_text(json.dumps(defn))
    rows = [json.loads(line) for line in (d / "workload.jsonl").read_text().splitlines()]
    for r in rows:
        r["inputs"] = {k: {"type": "custom"} for k in r["inputs"]}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return load_problem_dir(d)


def _compile_ok(cand):
    from solforge.compile import compile_candidate

    res = compile_candidate(cand, arch="sm_90a")
    assert res.ok, res.log[:3000]
    return res


T = lambda *s: {"shape": list(s), "dtype": "float32"}  # noqa: E731
B = lambda *s: {"shape": list(s), "dtype": "bfloat16"}  # noqa: E731


@pytest.mark.slow
def test_linear_with_transposed_weight_and_bias(tmp_path):
    p = make_problem(tmp_path, "lin", {"M": {"type": "var"}, "K": {"type": "const", "value": 96},
                                       "N": {"type": "const", "value": 80}},
                     {"x": B("M", "K"), "w": B("N", "K"), "b": B("N")}, {"y": B("M", "N")},
                     """
                     import torch
                     def run(x, w, b):
                         return torch.nn.functional.linear(x, w, b)
                     """, [{"M": 7}, {"M": 33}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("matmul") == 1
    src = out.candidate.sources["kernel.cu"]
    # the transposed weight is read in place (w[n * 96 + k]), never copied
    assert "copy" not in "".join(l.kernel for l in out.candidate.launches)
    assert "p_w[" in src
    _compile_ok(out.candidate)


@pytest.mark.slow
def test_softmax_dim1_and_middle_reduction(tmp_path):
    p = make_problem(tmp_path, "sm", {"A": {"type": "var"}, "C": {"type": "const", "value": 24},
                                      "D": {"type": "var"}},
                     {"x": T("A", "C", "D")}, {"y": T("A", "C", "D"), "s": T("A", "D")},
                     """
                     import torch
                     def run(x):
                         return torch.softmax(x, dim=1), x.sum(dim=1)
                     """, [{"A": 3, "D": 5}, {"A": 4, "D": 9}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("reduction", 0) >= 3   # amax, sum(exp), sum(x)
    _compile_ok(out.candidate)


@pytest.mark.slow
def test_cumsum_gather_and_conv_stride2(tmp_path):
    p = make_problem(tmp_path, "mix", {"N": {"type": "var"}, "H": {"type": "var"},
                                       "C": {"type": "const", "value": 4},
                                       "O": {"type": "const", "value": 6},
                                       "HO": {"type": "expr", "expression": "(H - 1) // 2 + 1"}},
                     {"x": T("N", "C", "H", "H"), "w": T("O", "C", 3, 3), "idx": {"shape": ["N", 2],
                                                                                   "dtype": "int64"}},
                     {"y": T("N", "O", "HO", "HO"), "c": T("N", "C", "H", "H"),
                      "g": {"shape": ["N", 2], "dtype": "float32"}},
                     """
                     import torch
                     def run(x, w, idx):
                         y = torch.nn.functional.conv2d(x, w, stride=2, padding=1)
                         c = torch.cumsum(x, dim=3)
                         flat = x.reshape(x.shape[0], -1)
                         g = torch.gather(flat, 1, idx.clamp(0, 3))
                         return y, c, g
                     """, [{"N": 2, "H": 9}, {"N": 3, "H": 12}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("matmul") == 1 and out.segments.get("scan") == 1
    _compile_ok(out.candidate)


@pytest.mark.slow
def test_data_dependent_is_refused_with_a_reason(tmp_path):
    p = make_problem(tmp_path, "nz", {"N": {"type": "var"}}, {"x": T("N")}, {"y": T("N")},
                     """
                     import torch
                     def run(x):
                         if (x > 0).sum() > 3:   # a branch on a computed value
                             return x * 2
                         return x
                     """, [{"N": 5}, {"N": 9}])
    out = compile_problem(p)
    assert not out.ok
    assert out.stage == "trace" and "data-dependent" in out.reason


@pytest.mark.slow
def test_renamed_and_reordered_problem_gets_the_same_segments(tmp_path):
    """Metamorphic: another name, other variable names, independent statements swapped."""
    a = make_problem(tmp_path, "first", {"M": {"type": "var"}, "K": {"type": "const", "value": 32}},
                     {"x": T("M", "K"), "w": T("K", "K")}, {"y": T("M", "K"), "z": T("M")},
                     """
                     import torch
                     def run(x, w):
                         y = torch.relu(x @ w)
                         z = x.amax(dim=-1)
                         return y, z
                     """, [{"M": 5}, {"M": 11}])
    b = make_problem(tmp_path, "other_name", {"rows": {"type": "var"},
                                              "width": {"type": "const", "value": 32}},
                     {"inp": T("rows", "width"), "mat": T("width", "width")},
                     {"out0": T("rows", "width"), "out1": T("rows")},
                     """
                     import torch
                     def run(inp, mat):
                         m = inp.amax(dim=-1)
                         o = torch.relu(inp @ mat)
                         return o, m
                     """, [{"rows": 5}, {"rows": 11}])
    oa, ob = compile_problem(a), compile_problem(b)
    assert oa.ok and ob.ok, (oa.reason, ob.reason)
    assert oa.segments == ob.segments
    assert oa.ops == ob.ops
