"""gemm_wgmma on a GPU: every tier, partial tiles (M not a multiple of BM) and split-K against
torch.matmul in float32, with fresh random inputs and a NaN-poisoned output.

The H200 benchmark (data/results/kernels_bench/kernels_wgmma_h200_by_m.txt) checked M = 1, 16, 64, 512, 4096;
this adds the odd sizes of the real workloads (partial tiles in tiers 1 and 2) and tier edges.
Compiles here (NVRTC from cuda-python) unless the stage folder is given in $SOLFORGE_WGMMA_STAGES
(built on the CPU side by build_stages below)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "sol_execbench" / "FlashInfer-Bench"
CASES = {  # problem -> M values: tier edges (skinny 16/17, 64/65; wgmma 128/129, 256/257), odd sizes
    "004_gemm_n128_k2048": [3, 16, 17, 64, 65, 93, 289, 952, 16294],
    "007_gemm_n4096_k4096": [1, 15, 35, 64, 65, 128, 129, 256, 257, 972, 2379],
    "008_gemm_n4096_k14336": [7, 129, 2053],
}


def build_stages(folder: Path) -> None:
    """Compile the first-guess variant of each case's problem into folder/<problem>/."""
    from solforge.compile.api import compile_candidate, stage
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    fam = get_family("gemm_wgmma")
    for name in CASES:
        problem = load_problem_dir(SHARED / name)
        cand = fam.instantiate(problem, fam.param_space(problem)[0])
        res = compile_candidate(cand)
        assert res.ok, res.log
        stage(cand, res, folder / name)


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> Path:
    given = os.environ.get("SOLFORGE_WGMMA_STAGES")
    if given and all((Path(given) / n / "manifest.json").exists() for n in CASES):
        return Path(given)
    folder = tmp_path_factory.mktemp("wgmma")
    build_stages(folder)
    return folder


@pytest.mark.parametrize("name", sorted(CASES))
def test_gemm_wgmma_matches_matmul(stages, name):
    from solforge.compile.launcher import load_stage

    rt = load_stage(stages / name)
    p = rt.candidate["params"]
    n, k = p["NN"], p["KK"]
    g = torch.Generator(device="cuda").manual_seed(7)
    for m in CASES[name]:
        a = torch.randn(m, k, device="cuda", generator=g).half()
        b = torch.randn(n, k, device="cuda", generator=g).half()
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.half)
        plan = rt.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k}, {})
        plan.run()
        plan.run()  # a second call on the same workspace / cluster shared memory gives the same C
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        assert not c.isnan().any(), f"M={m}: unwritten outputs"
        rel = ((c.float() - ref).norm() / ref.norm()).item()
        assert rel < 2e-3, f"{name} M={m}: relative error {rel:.2e}"
    rt.close()


# tall tier-1 tiles (BM = 256: two 64-row atoms per consumer warpgroup), unsplit and as a 2-CTA
# cluster split, up to M = 1024 (several 256-row M-tiles, a ragged last one)
TALL = {"unsplit": dict(T1_BM=256, T1_BN=64, T1_ST=5, T1_SPLIT=1, T1_MAXM=1024),
        "cluster2": dict(T1_BM=256, T1_BN=128, T1_ST=4, T1_SPLIT=2, T1_MAXM=1024)}
TALL_M = [129, 136, 192, 200, 256, 257, 600, 972, 1024]


@pytest.mark.parametrize("which", sorted(TALL))
def test_gemm_wgmma_tall_tiles_match_matmul(which):
    import tempfile

    from solforge.compile.api import compile_candidate, stage
    from solforge.compile.launcher import load_stage
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    problem = load_problem_dir(SHARED / "007_gemm_n4096_k4096")
    fam = get_family("gemm_wgmma")
    cand = fam.instantiate(problem, {**fam.param_space(problem)[0], **TALL[which]})
    res = compile_candidate(cand)
    assert res.ok, res.log
    with tempfile.TemporaryDirectory() as d:
        stage(cand, res, Path(d) / "tall")
        rt = load_stage(Path(d) / "tall")
        n, k = 4096, 4096
        g = torch.Generator(device="cuda").manual_seed(11)
        for m in TALL_M:
            a = torch.randn(m, k, device="cuda", generator=g).half()
            b = torch.randn(n, k, device="cuda", generator=g).half()
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.half)
            plan = rt.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k}, {})
            plan.run()
            plan.run()
            torch.cuda.synchronize()
            ref = a.float() @ b.float().T
            assert not c.isnan().any(), f"{which} M={m}: unwritten outputs"
            rel = ((c.float() - ref).norm() / ref.norm()).item()
            assert rel < 2e-3, f"{which} M={m}: relative error {rel:.2e}"
        rt.close()
