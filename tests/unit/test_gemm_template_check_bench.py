"""benchmarks/gemm_template_check.py without a GPU: the candidates it builds resolve their launch
arguments in the launcher (workspace included) at every size its cases run."""

from __future__ import annotations

import random

import pytest

from tests.unit import bench_module


@pytest.fixture(scope="module")
def bench():
    return bench_module.load("gemm_template_check")


def _resolve_args(cand: dict, axes: dict) -> None:
    """What CandidateRuntime.prepare does before touching the GPU: the workspace's bytes at these
    sizes (a CPU buffer when above 0, as prepare allocates none at 0) and every launch's arguments
    (CPU tensors stand in for the operands: only their presence and layout are checked)."""
    import torch

    from solforge.compile.launcher import CandidateRuntime, _axis_expr, launch_env

    env = launch_env(axes, {}, cand.get("params", {}))
    ax = _axis_expr()
    ws_bytes = int(ax.evaluate(str(cand.get("workspace", "0")), env))
    workspace = torch.zeros(ws_bytes, dtype=torch.uint8) if ws_bytes > 0 else None
    rt = object.__new__(CandidateRuntime)
    rt._cubins = {}
    for i, launch in enumerate(cand["launches"]):
        if launch.get("when") and not ax.evaluate(str(launch["when"]), env):
            continue
        tensors = {a.strip(): torch.zeros(1) for a in launch["args"]
                   if ":" not in a and a.strip() != "workspace"}
        rt._arg_values(launch, {}, tensors, workspace, env, i)


def test_m_tiered_kernel_gets_a_workspace_at_every_m(bench):
    """The M-tiered case: one kernel whose tier is picked from M at run time takes the workspace
    pointer (its small-M tiers split K) though the template's workspace is 0 bytes past the largest
    max_m (the last tier does not split). M=3000 used to fail with "'workspace' is passed but the
    workspace is 0 bytes"; the candidate now asks for a few bytes there."""
    from solforge.compile.launcher import _axis_expr
    from solforge.compiler.templates import gemm as G

    cases = [c for c in bench.gemm_cases(random.Random(0)) if c.get("tiers")]
    assert 3000 in {c["M"] for c in cases}
    for c in cases:
        cand, params = bench.build(c, f"tiered_m{c['M']}")
        tiers = G.tiers_of(params)
        assert any(t["SPLIT"] > 1 for t in tiers) and tiers[-1]["SPLIT"] == 1 and "max_m" not in tiers[-1]
        assert any("workspace" in la["args"] for la in cand["launches"])
        axes = {"M": c["M"], "N": c["N"], "K": c["K"]}
        assert _axis_expr().evaluate(cand["workspace"], axes) > 0
        _resolve_args(cand, axes)


def test_a_workspace_without_a_workspace_argument_is_kept(bench):
    """A case whose kernel takes no workspace (no split-K) keeps the template's expression."""
    c = dict(kind="gemm", dtype="bfloat16", M=64, N=256, K=256, batch=1, ta=False, tb=False, bias=False,
             epi="", alpha=None,
             params={"tier": "mma", "BM": 64, "BN": 64, "BK": 32, "WM": 2, "WN": 2, "ST": 3, "SPLIT": 1})
    cand, _ = bench.build(c, "nosplit")
    assert cand["workspace"] == "0" and not any("workspace" in la["args"] for la in cand["launches"])
    _resolve_args(cand, {"M": 64, "N": 256, "K": 256})
