"""workspace_zero on the GPU: a plan memsets only the declared bytes, and one kernel whose workspace
needs no memset is launched directly (no graph), with the same answers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stage(tmp_path_factory) -> Path:
    given = Path(os.environ.get("SOLFORGE_STAGE_DIR", REPO / ".carry" / "compile_stages"))
    if (given / "scale_twice_workspace" / "manifest.json").exists():
        return given / "scale_twice_workspace"
    from solforge.compile.gpu_check_stages import build_stages

    folder = tmp_path_factory.mktemp("stages")
    build_stages(folder)
    return folder / "scale_twice_workspace"


def _plan(stage: Path, **changes):
    from solforge.compile.launcher import load_stage

    cand = {**json.loads((stage / "candidate.json").read_text()), **changes}
    rt = load_stage(stage, cand)
    n = 5000
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    return rt.prepare({"x": x, "y": y}, {"n": n}, {}), x, y


def test_two_kernels_without_memset_still_one_graph(stage):
    plan, x, y = _plan(stage, workspace_zero="0")   # kernel 1 writes every workspace byte
    assert plan.zero_bytes == 0
    for _ in range(2):
        y.zero_()
        plan.run()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, x * 6.0)
    assert plan._graph_state == "on", plan.graph_note


def test_memset_of_a_prefix_only(stage):
    plan, x, y = _plan(stage, workspace_zero="n * 2")
    assert plan.zero_bytes == 5000 * 2 < plan.workspace.numel()
    plan.run()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 6.0)


def test_one_kernel_with_a_kept_workspace_is_a_direct_launch(stage):
    cand = json.loads((stage / "candidate.json").read_text())
    plan, x, _ = _plan(stage, workspace_zero="0", launches=cand["launches"][:1])
    plan.workspace.fill_(7)           # not zeroed by the harness: kernel 1 overwrites it all
    plan.run()
    torch.cuda.synchronize()
    assert plan._graph_state == "off"
    torch.testing.assert_close(plan.workspace.view(torch.float32), x * 2.0)
