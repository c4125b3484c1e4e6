"""Cubins compiled on the CPU machine load and run correctly through launcher.py on a GPU.

The stages come from $SOLFORGE_STAGE_DIR or .carry/compile_stages (built on the CPU side with
`python -c "from solforge.compile.gpu_check_stages import build_stages; build_stages('.carry/compile_stages')"`),
else they are compiled here. Only stdlib, torch and cuda-python are needed when stages are given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> Path:
    given = Path(os.environ.get("SOLFORGE_STAGE_DIR", REPO / ".carry" / "compile_stages"))
    if (given / "scale" / "manifest.json").exists():
        return given
    from solforge.compile.gpu_check_stages import build_stages

    folder = tmp_path_factory.mktemp("stages")
    build_stages(folder)
    return folder


def _runtime(stages: Path, case: str):
    from solforge.compile.launcher import load_stage

    if not (stages / case / "manifest.json").exists():
        pytest.fail(f"stage {case} is missing (its compile failed on the CPU side?)")
    return load_stage(stages / case)


def test_scale(stages):
    rt = _runtime(stages, "scale")
    n = 1000
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    rt.launch_all({"x": x, "y": y}, {"n": n}, {})
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 2.0)
    rt.close()


def test_two_launches_through_a_zeroed_workspace(stages):
    rt = _runtime(stages, "scale_twice_workspace")
    n = 5000
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    plan = rt.prepare({"x": x, "y": y}, {"n": n}, {})
    assert plan.workspace is not None and plan.workspace.numel() == n * 4
    plan.run()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 6.0)
    # memset + two kernels went out as one CUDA graph (no Python time between them)
    assert plan._graph_state == "on", plan.graph_note
    y.zero_()
    plan.run()  # a plan is reusable (timing loops)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 6.0)


def test_graph_launch_off_gives_the_same_answer(stages, monkeypatch):
    monkeypatch.setenv("SOLFORGE_GRAPH_LAUNCH", "0")
    rt = _runtime(stages, "scale_twice_workspace")
    n = 5000
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    plan = rt.prepare({"x": x, "y": y}, {"n": n}, {})
    plan.run()
    torch.cuda.synchronize()
    assert plan._graph_state == "off"
    torch.testing.assert_close(y, x * 6.0)


def test_fp8_to_bf16_with_headers(stages):
    rt = _runtime(stages, "dequant")
    n = 4099
    q = (torch.randn(n, device="cuda") * 4).to(torch.float8_e4m3fn)
    scale = torch.tensor([0.5], device="cuda")
    out = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
    rt.launch_all({"q": q, "scale": scale, "out": out}, {"n": n}, {})
    torch.cuda.synchronize()
    torch.testing.assert_close(out, (q.float() * 0.5).to(torch.bfloat16))


def test_cluster_launch_with_more_than_48kb_smem(stages):
    rt = _runtime(stages, "cluster_smem")
    tile, n = 16384, 16384 * 6
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    ranks = torch.full((6,), -1, device="cuda", dtype=torch.int32)
    rt.launch_all({"x": x, "y": y, "ranks": ranks}, {"n": n}, {})
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x.view(6, tile).flip(1).reshape(-1) + 1.0)
    assert ranks.tolist() == [0, 1, 0, 1, 0, 1]


def test_cute_dsl_cubin_without_the_dsl(stages):
    rt = _runtime(stages, "cute_scale")
    manifest = json.loads((stages / "cute_scale" / "manifest.json").read_text())
    assert manifest["entries"]["scale_cute"]["params"]  # launched from the recorded param layout
    n = 3001
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    rt.launch_all({"x": x, "y": y}, {"n": n}, {})
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 2.0)


def test_bad_launch_raises_with_the_driver_error(stages):
    from solforge.compile.launcher import LaunchError

    rt = _runtime(stages, "scale")
    x = torch.randn(10, device="cuda")
    with pytest.raises(LaunchError, match="CUDA_ERROR_INVALID_VALUE|block"):
        rt.candidate["launches"][0]["block"] = ["4096"]  # more threads than a block may have
        rt.launch_all({"x": x, "y": x}, {"n": 10}, {})
