"""topk(sorted=False) returns its k elements in the order CUDA's ATen does (indices are compared
element by element, so the order is part of the answer): first those strictly better than the k-th
value, in index order, then those equal to it, in index order. Checked against a model of that rule
written here, on rows with ties, both directions, through the compiled kernel run on the CPU."""

from __future__ import annotations

import shutil

import pytest

from .test_compiler import T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

K = 4


def cuda_unsorted_topk(x, k: int, largest: bool):
    """The rule of ATen's gatherTopK, row by row (no torch sort involved)."""
    import torch

    rows_v, rows_i = [], []
    for row in x.tolist():
        kth = sorted(row, reverse=largest)[k - 1]
        better = [i for i, v in enumerate(row) if (v > kth if largest else v < kth)]
        equal = [i for i, v in enumerate(row) if v == kth][: k - len(better)]
        order = better + equal
        rows_i.append(order)
        rows_v.append([row[i] for i in order])
    return torch.tensor(rows_v, dtype=x.dtype), torch.tensor(rows_i, dtype=torch.int64)


@pytest.mark.parametrize("largest", [True, False])
def test_unsorted_topk_takes_cudas_order(tmp_path, largest):
    import torch

    from solforge.compiler.api import compile_problem
    from solforge.compiler.emulate import emulate

    p = make_problem(tmp_path, f"tk{int(largest)}", {"R": {"type": "var"}, "L": {"type": "const", "value": 12}},
                     {"x": T("R", "L")}, {"v": T("R", K), "ix": {"shape": ["R", K], "dtype": "int64"}},
                     f"""
                     import torch
                     def run(x):
                         v, ix = torch.topk(x, {K}, dim=-1, largest={largest}, sorted=False)
                         return v, ix
                     """, [{"R": 3}])
    out = compile_problem(p)
    assert out.ok, out.reason
    x = torch.tensor([
        [0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.0, 0.4, 0.6, 0.5, -0.1, 0.05],   # distinct values
        [0.5, 0.9, 0.5, 0.1, 0.5, 0.2, 0.9, 0.5, 0.0, 0.3, 0.5, 0.4],     # the k-th value tied 5 times
        [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2],     # all equal
    ])
    if not largest:
        x = -x
    v, ix = torch.empty(3, K), torch.empty(3, K, dtype=torch.int64)
    emulate(out.candidate, {"x": x, "v": v, "ix": ix}, {"R": 3}, {})
    want_v, want_i = cuda_unsorted_topk(x, K, largest)
    assert torch.equal(ix, want_i), (ix, want_i)
    assert torch.equal(v, want_v)
    # and not the sorted order: the first row's best element (index 1) is not first here
    assert ix[0].tolist() != sorted(range(12), key=lambda i: -x[0, i] if largest else x[0, i])[:K]


def test_sorted_topk_keeps_the_sorted_order(tmp_path):
    import torch

    from solforge.compiler.api import compile_problem
    from solforge.compiler.emulate import emulate

    p = make_problem(tmp_path, "tks", {"R": {"type": "var"}, "L": {"type": "const", "value": 12}},
                     {"x": T("R", "L")}, {"ix": {"shape": ["R", K], "dtype": "int64"}},
                     f"""
                     import torch
                     def run(x):
                         return torch.topk(x, {K}, dim=-1)[1]
                     """, [{"R": 2}])
    out = compile_problem(p)
    assert out.ok, out.reason
    x = torch.randn(2, 12)
    ix = torch.empty(2, K, dtype=torch.int64)
    emulate(out.candidate, {"x": x, "ix": ix}, {"R": 2}, {})
    assert torch.equal(ix, torch.topk(x, K, dim=-1).indices)


def test_the_cpu_check_runs_the_reference_with_cudas_order(tmp_path):
    """compiler.check runs the reference on the CPU, whose topk(sorted=False) order is its own: the
    check gives it CUDA's, so that it predicts the GPU's verdict."""
    from solforge.compiler.check import check_problem

    p = make_problem(tmp_path, "tkc", {"R": {"type": "var"}, "L": {"type": "const", "value": 40}},
                     {"x": T("R", "L")}, {"ix": {"shape": ["R", 6], "dtype": "int64"}},
                     """
                     import torch
                     def run(x):
                         return torch.topk((x * 3).floor(), 6, dim=-1, sorted=False)[1]  # many ties
                     """, [{"R": 5}])
    r = check_problem(p, cap=16)
    assert r["ok"], r
