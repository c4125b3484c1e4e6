"""Every adversarial candidate through the real runner (staged directory, spawned driver process).

CPU (CI): the host-side candidates, correctness-side guards (timing is off without a GPU).
GPU: everything, including CUDA kernels and the timing-side guards (side stream, caching, SOL floor).
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

try:
    import torch

    HAS_GPU = torch.cuda.is_available()
except Exception:  # noqa: BLE001
    HAS_GPU = False

ADVERSARIES = harness.all_adversaries()
CPU_ADVERSARIES = [a for a in ADVERSARIES if a.kind == "host" and not a.needs_cubins]
GPU_WORKLOADS = ["adv-1m"]
CPU_WORKLOADS = ["adv-4k"]


def _run(adv, root: Path, workloads, extra_pythonpath=None):
    from solforge.evaluate.runner import run_stage

    timeout = 40.0 if adv.expect_status == "timeout" else 240.0
    stage = harness.stage(adv, root, workloads)
    return run_stage(stage, timeout_s=timeout, workload_timeout_s=30.0 if adv.expect_status ==
                     "timeout" else None, extra_pythonpath=extra_pythonpath)


@pytest.fixture(scope="module")
def cpu_reports(tmp_path_factory):
    if HAS_GPU:
        pytest.skip("the GPU run covers these")
    root = tmp_path_factory.mktemp("adv_cpu")
    # The drivers run as on the bare GPU box: store/orchestration packages unimportable.
    bare = [str(harness.bare_box_site(root / "bare_box"))]
    # Each candidate is its own process, and starting one is mostly waiting for torch's import
    # (I/O), so they all start at once, the honest control with them.
    with ThreadPoolExecutor(max_workers=len(CPU_ADVERSARIES) + 1) as pool:
        futs = {a.name: pool.submit(_run, a, root, CPU_WORKLOADS, bare) for a in CPU_ADVERSARIES}
        futs["honest"] = pool.submit(_run_honest, root, bare)
        return {k: f.result() for k, f in futs.items()}


HONEST = ("import torch\n"
          "def run(inputs, outputs, ctx):\n"
          "    z = inputs['x']\n"
          "    for _ in range(64):\n"
          "        z = torch.sin(z) + inputs['y']\n"
          "    outputs['out'].copy_(z)\n")


def _run_honest(root: Path, extra_pythonpath=None):
    from solforge.evaluate.runner import run_stage, stage_candidate
    from solforge.problem import load_problem_dir

    st = stage_candidate(root / "honest", load_problem_dir(harness.PROBLEM_DIR), host_source=HONEST,
                         job={"allow_torch": True, "workloads": CPU_WORKLOADS})
    return run_stage(st, timeout_s=240, extra_pythonpath=extra_pythonpath)


def _assert_expected(adv, report):
    r = report.results[0]
    got = (r.status.value, r.guard)
    want = (adv.expect_status, adv.expect_guard)
    assert got == want, f"{adv.name}: expected {want}, got {got}: {r.message}\n{report.stderr_tail[-1500:]}"


@pytest.mark.parametrize("adv", CPU_ADVERSARIES, ids=lambda a: a.name)
def test_host_adversary_caught_on_cpu(adv, cpu_reports):
    _assert_expected(adv, cpu_reports[adv.name])


def test_cpu_control_passes(cpu_reports):
    """The same machinery passes an honest host candidate: the guards are not blanket rejections.
    Its driver ran with the bare box's packages only (harness.bare_box_site)."""
    rep = cpu_reports["honest"]
    r = rep.results[0]
    assert r.status.value == "passed", r.message + rep.stderr_tail
    assert r.correct and r.rounds == 3 and r.max_abs_err is not None


@pytest.mark.gpu
@pytest.mark.parametrize("adv", ADVERSARIES, ids=lambda a: a.name)
def test_adversary_caught_on_gpu(adv, tmp_path):
    rep = _run(adv, tmp_path, GPU_WORKLOADS)
    _assert_expected(adv, rep)
    if adv.expect_status == "passed":
        r = rep.results[0]
        assert r.median_ms and r.median_ms > 0 and r.timing_method in ("cupti", "events")
