"""Softmax family: which shared problems it claims, rounding facts read from the reference, valid
candidates that compile with NVRTC for sm_90a, and the family.json gate (not offered until a GPU
run finds it correct)."""

from __future__ import annotations

import json

import pytest

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.compile import compile_candidate
from solforge.kernels import FamilyError, families_for, get_family, softmax
from solforge.kernels.base import CUDA_DIR
from solforge.problem.definition import Definition
from solforge.problem.loader import load_problem_dir

CLAIMED = ["L1/046_attention_softmax_with_softcapping_and_dropout"]


def _def(reference: str, dtype: str = "bfloat16", extra_inputs: dict | None = None) -> Definition:
    inputs = {"x": {"shape": ["b", "h", "n"], "dtype": dtype}, **(extra_inputs or {})}
    return Definition.model_validate({
        "name": "t_softmax",
        "axes": {"b": {"type": "var"}, "h": {"type": "const", "value": 8}, "n": {"type": "var"}},
        "inputs": inputs, "outputs": {"y": {"shape": ["b", "h", "n"], "dtype": dtype}},
        "reference": reference})


PLAIN = """
import torch
def run(x):
    return torch.softmax(x, dim=-1)
"""
CAP_FLOAT = """
import torch
import torch.nn.functional as F
def run(x):
    cap = 50.0
    z = torch.tanh(x.float() / cap) * cap
    return F.softmax(z, dim=-1).to(x.dtype)
"""
SCALED = """
import torch
def run(x):
    return torch.softmax(x * 0.125, dim=-1)
"""
METHOD = """
import torch
def run(x):
    return x.softmax(-1)
"""
WRONG_DIM = """
import torch
def run(x):
    return torch.softmax(x, dim=1)
"""
MASKED = """
import torch
def run(x, mask):
    return torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1)
"""
SOFTMAX_THEN_CAP = """
import torch
def run(x):
    p = torch.softmax(x, dim=-1)
    return torch.tanh(p / 30.0) * 30.0
"""


def _problem(sol_execbench_dir, rel):
    return load_problem_dir(sol_execbench_dir / rel)


def test_claims_exactly_the_plain_softmax_problems(sol_execbench_dir):
    fam = get_family("softmax")
    claimed = []
    for d in sorted(sol_execbench_dir.glob("*/*/definition.json")):
        if fam.matches(load_problem_dir(d.parent)):
            claimed.append(f"{d.parent.parent.name}/{d.parent.name}")
    assert claimed == CLAIMED


def test_reads_softcap_facts_from_046(sol_execbench_dir):
    spec = get_family("softmax").analyze(_problem(sol_execbench_dir, CLAIMED[0]).definition)
    # the reference divides, tanh-s and multiplies the bf16 tensor: each step rounds to bf16
    assert spec.fixed == {"DTYPE": 2, "SOFTCAP": 30.0, "SOFTCAP_ROUND": 1}
    assert spec.info["n"] == "seq_len_k"
    assert spec.info["rows"] == "batch_size*num_heads*seq_len_q"


@pytest.mark.parametrize("ref,dtype,fixed", [
    (PLAIN, "bfloat16", {"DTYPE": 2, "SOFTCAP": 0.0, "SOFTCAP_ROUND": 0}),
    (PLAIN, "float16", {"DTYPE": 1, "SOFTCAP": 0.0, "SOFTCAP_ROUND": 0}),
    (METHOD, "float32", {"DTYPE": 0, "SOFTCAP": 0.0, "SOFTCAP_ROUND": 0}),
    (CAP_FLOAT, "bfloat16", {"DTYPE": 2, "SOFTCAP": 50.0, "SOFTCAP_ROUND": 0}),
])
def test_synthetic_references_matched(ref, dtype, fixed):
    spec = get_family("softmax").analyze(_def(ref, dtype))
    assert spec is not None and spec.fixed == fixed


@pytest.mark.parametrize("ref", [SCALED, WRONG_DIM, SOFTMAX_THEN_CAP])
def test_other_functions_not_claimed(ref):
    assert not get_family("softmax").matches(_def(ref))


def test_masked_softmax_not_claimed():
    defn = _def(MASKED, extra_inputs={"mask": {"shape": ["b", "h", "n"], "dtype": "bool"}})
    assert not get_family("softmax").matches(defn)


def test_gate_read_from_family_json(sol_execbench_dir, monkeypatch):
    """Offered since the H200 run found it correct (family.json says so); closing the gate
    takes it out of the search but not out of get_family (for the next GPU check)."""
    data = json.loads((CUDA_DIR / "softmax" / "family.json").read_text())
    assert softmax.offered() is bool(data["offered"])
    problem = _problem(sol_execbench_dir, CLAIMED[0])
    assert ("softmax" in [f.name for f in families_for(problem)]) is bool(data["offered"])
    monkeypatch.setattr(softmax, "offered", lambda: False)
    assert "softmax" not in [f.name for f in families_for(problem)]
    assert get_family("softmax").matches(problem)  # still there for a GPU check


@pytest.mark.parametrize("rel", CLAIMED)
def test_claimed_problem_compiles(sol_execbench_dir, rel):
    problem = _problem(sol_execbench_dir, rel)
    fam = get_family("softmax")
    space = fam.param_space(problem)
    assert len(space) >= 10
    longest = max(w.axes["seq_len_k"] for w in problem.workloads)
    assert space[0]["TPR"] * space[0]["VEC"] * space[0]["NPT"] >= longest  # single pass first
    # best guess, last, one warp per row, one block per row with the widest register cache
    picks = [space[0], space[-1], {"TPR": 32, "ROWS": 8, "VEC": 8, "NPT": 4},
             {"TPR": 256, "ROWS": 1, "VEC": 8, "NPT": 8}]
    for params in picks:
        cand = fam.instantiate(problem, params)
        Candidate.model_validate_json(cand.model_dump_json())
        for w in problem.workloads:  # launch expressions cover every row on every workload
            env = launch_env(w.axes, w.scalars(), cand.params)
            launch = cand.launches[0]
            rows = eval_expr(launch.args[2].split(":", 1)[1], env)
            assert eval_expr(launch.grid[0], env) * params["ROWS"] >= rows
            assert eval_expr(launch.block[0], env) == params["TPR"] * params["ROWS"] <= 1024
        res = compile_candidate(cand, arch="sm_90a")
        assert res.ok, res.log  # the compile step also checks args against the kernel signature


def test_launch_args_checked_against_kernel(sol_execbench_dir):
    cand = get_family("softmax").instantiate(_problem(sol_execbench_dir, CLAIMED[0]))
    data = cand.model_dump()
    data["launches"][0]["args"] = data["launches"][0]["args"][:3]  # `n` left out
    res = compile_candidate(Candidate.model_validate(data), arch="sm_90a", use_cache=False)
    assert not res.ok and "parameter" in res.log


@pytest.mark.parametrize("bad", [{"TPR": 48}, {"TPR": 1024, "ROWS": 2}, {"VEC": 16},
                                 {"NPT": 16}, {"VEC": 3}])
def test_bad_params_rejected(bad):
    defn = _def(PLAIN)
    base = {"TPR": 32, "ROWS": 8, "VEC": 8, "NPT": 2}
    with pytest.raises(FamilyError):
        get_family("softmax").instantiate(defn, {**base, **bad})
    with pytest.raises(FamilyError):
        get_family("softmax").instantiate(defn, {**base, "SOFTCAP": 1.0})  # fixed, not tunable


def _emulate(x, fixed):
    """The kernel's arithmetic in torch on the CPU (float32 steps, dtype roundings where it rounds)."""
    import torch
    dt = x.dtype
    f = x.float()
    c = fixed["SOFTCAP"]
    if c and fixed["SOFTCAP_ROUND"]:
        f = (f * (1.0 / c)).to(dt).float()
        f = torch.tanh(f).to(dt).float()
        f = (f * c).to(dt).float()
    elif c:
        f = torch.tanh(f / c) * c
    m = f.amax(-1, keepdim=True)
    e = torch.exp(f - m)
    return (e / e.sum(-1, keepdim=True)).to(dt)


def test_fixed_params_reproduce_reference_on_cpu(sol_execbench_dir):
    """The facts read from 046's reference, run through the kernel's arithmetic, give the reference's
    output within its tolerance (the CUDA code itself is unverified until the GPU run)."""
    import torch
    problem = _problem(sol_execbench_dir, CLAIMED[0])
    spec = get_family("softmax").analyze(problem.definition)
    ns: dict = {}
    exec(compile(problem.definition.reference, "reference.py", "exec"), ns)
    torch.manual_seed(0)
    x = (torch.randn(2, 8, 33, 691) * 40).to(torch.bfloat16)  # wide logits: the cap matters
    want = ns["run"](x).float()
    got = _emulate(x, spec.fixed).float()
    tol = problem.workloads[0].workload.tolerance
    assert torch.allclose(got, want, atol=tol.max_atol, rtol=tol.max_rtol)
    # the cap's per-step bf16 rounding matters (a float32 cap is off by ~14% on wide logits),
    # and so does the cap value: the same comparison catches either mistake
    assert not torch.allclose(_emulate(x, {**spec.fixed, "SOFTCAP_ROUND": 0}).float(), want,
                              atol=tol.max_atol, rtol=tol.max_rtol)
    assert not torch.allclose(_emulate(x, {**spec.fixed, "SOFTCAP": 3.0}).float(), want,
                              atol=tol.max_atol, rtol=tol.max_rtol)
