"""Fixtures for the agents tests: a real problem from the shared tree, a real DuckDB store, a Lab
that compiles with NVRTC (no GPU needed), and real kernels the scripted model answers with."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RMSNORM_H128 = r'''
#include <cuda_bf16.h>
// one warp per row of 128 bf16: 4 elements per lane, fp32 sum of squares, shuffle reduction
extern "C" __global__ void rmsnorm_h128(const __nv_bfloat16* __restrict__ x,
                                        const __nv_bfloat16* __restrict__ w,
                                        __nv_bfloat16* __restrict__ y, int rows) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const __nv_bfloat16* xr = x + (size_t)row * 128;
    float v[4];
    float ss = 0.f;
    #pragma unroll
    for (int i = 0; i < 4; ++i) { v[i] = __bfloat162float(xr[lane + 32 * i]); ss += v[i] * v[i]; }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = rsqrtf(ss / 128.f + 1e-6f);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        int c = lane + 32 * i;
        y[(size_t)row * 128 + c] = __float2bfloat16(v[i] * inv * __bfloat162float(w[c]));
    }
}
'''

# The same kernel with two mistakes a model makes: an undeclared name and a missing semicolon.
RMSNORM_H128_BROKEN = (RMSNORM_H128.replace("float inv = rsqrtf(ss / 128.f + 1e-6f);",
                                            "float inv = rsqrtf(sum_sq / 128.f + 1e-6f)")
                       )


def candidate_json(source: str, problem: str = "021_rmsnorm_h128", block: int = 256) -> dict:
    return {"problem": problem, "language": "cuda", "sources": {"kernel.cu": source},
            "params": {"BLOCK": block},
            "launches": [{"kernel": "rmsnorm_h128", "grid": ["ceil_div(batch_size * 32, BLOCK)"],
                          "block": ["BLOCK"], "smem": "0",
                          "args": ["hidden_states", "weight", "output", "int32:batch_size"]}],
            "notes": "warp per row"}


def reply_with(cand: dict, text: str = "Here is the kernel.") -> str:
    return f"{text}\n\n```json\n{json.dumps(cand, indent=1)}\n```\n"


@pytest.fixture(scope="session")
def rmsnorm_problem(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    return load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / "021_rmsnorm_h128",
                            subset="FlashInfer-Bench")


@pytest.fixture(scope="session")
def gemm_problem(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    return load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / "004_gemm_n128_k2048",
                            subset="FlashInfer-Bench")


@pytest.fixture
def store(tmp_path):
    from solforge.store import Store

    s = Store(tmp_path / "agents.duckdb")
    yield s
    s.close()


@pytest.fixture
def cpu_lab(store, tmp_path, monkeypatch):
    from solforge.agents.lab import Lab

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))  # real compiles, fresh cache
    return Lab(arch="sm_90a", gpu_profile="h200", has_gpu=False, store=store)


def write_unservable_problem(folder):
    """A problem written here that nothing serves: the eigenvalues of each row's symmetric 4x4 matrix
    (an iterative eigensolver: no kernel family claims it and the compiler has no lowering for it)."""
    folder.mkdir(parents=True)
    ref = ("import torch\n\n\ndef run(x):\n"
           "    return torch.linalg.eigvalsh(x + x.transpose(-1, -2))\n")
    defn = {"name": "row_eigenvalues", "hf_id": "", "description": "eigenvalues of symmetric 4x4 blocks",
            "axes": {"rows": {"type": "var"}, "n": {"type": "const", "value": 4}},
            "custom_inputs_entrypoint": None,
            "inputs": {"x": {"shape": ["rows", "n", "n"], "dtype": "float32"}},
            "outputs": {"out": {"shape": ["rows", "n"], "dtype": "float32"}}, "reference": ref}
    (folder / "definition.json").write_text(json.dumps(defn, indent=1))
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"00000000-0000-4000-8000-00000000000{i}", "axes": {"rows": r},
                    "inputs": {"x": {"type": "random"}}}) + "\n" for i, r in enumerate((3, 17))))
    (folder / "reference.py").write_text(ref)
    return folder
