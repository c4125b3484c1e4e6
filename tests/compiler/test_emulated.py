"""Each segment kind run on the CPU (the candidate's kernel.cu built with g++ against a CUDA shim)
and compared with the reference under the evaluator's comparison, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import B, T, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def _check(p):
    r = check_problem(p, cap=16)
    assert r["ok"], r


def test_linear_bias_gelu_bf16(tmp_path):
    _check(make_problem(tmp_path, "lin", {"M": {"type": "var"}, "K": {"type": "const", "value": 40},
                                          "N": {"type": "const", "value": 72}},
                        {"x": B("M", "K"), "weight": B("N", "K"), "bias": B("N")}, {"y": B("M", "N")},
                        """
                        import torch
                        def run(x, weight, bias):
                            return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias))
                        """, [{"M": 13}]))


def test_softmax_layernorm_middle_sum(tmp_path):
    _check(make_problem(tmp_path, "sm", {"A": {"type": "var"}, "C": {"type": "const", "value": 24},
                                         "D": {"type": "var"}},
                        {"x": T("A", "C", "D"), "w": T("D")},
                        {"y": T("A", "C", "D"), "s": T("A", "D"), "n": T("A", "C", "D")},
                        """
                        import torch
                        def run(x, w):
                            n = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, None, 1e-5)
                            return torch.softmax(x, dim=1), x.sum(dim=1), n
                        """, [{"A": 3, "D": 5}]))


def test_conv_cumsum_gather_bmm(tmp_path):
    _check(make_problem(tmp_path, "mix", {"N": {"type": "var"}, "H": {"type": "var"},
                                          "C": {"type": "const", "value": 4},
                                          "O": {"type": "const", "value": 6},
                                          "HO": {"type": "expr", "expression": "(H - 1) // 2 + 1"}},
                        {"x": T("N", "C", "H", "H"), "w": T("O", "C", 3, 3), "b": T("O"),
                         "idx": {"shape": ["N", 2], "dtype": "int64"}},
                        {"y": T("N", "O", "HO", "HO"), "c": T("N", "C", "H", "H"),
                         "g": T("N", 2), "m": T("N", "C", "C")},
                        """
                        import torch
                        def run(x, w, b, idx):
                            y = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
                            c = torch.cumsum(x, dim=3)
                            flat = x.reshape(x.shape[0], -1)
                            g = torch.gather(flat, 1, idx.abs() % 7)
                            f = x.flatten(2)
                            m = torch.bmm(f, f.transpose(1, 2))
                            return y, c, g, m
                        """, [{"N": 2, "H": 9}]))


def test_topk_sort_scatter_add_index_put(tmp_path):
    _check(make_problem(tmp_path, "tk", {"R": {"type": "var"}, "L": {"type": "const", "value": 37}},
                        {"x": T("R", "L"), "i": {"shape": ["R", 5], "dtype": "int64"}},
                        {"v": T("R", 4), "ix": {"shape": ["R", 4], "dtype": "int64"},
                         "s": T("R", "L"), "a": T("R", "L"), "p": T("R", "L")},
                        """
                        import torch
                        def run(x, i):
                            v, ix = torch.topk(x, 4, dim=-1)
                            s, _ = torch.sort(x, dim=-1)
                            j = i.abs() % 37
                            a = torch.zeros_like(x).scatter_add(1, j, torch.ones_like(j, dtype=x.dtype))
                            p = x.clone()
                            p[:, 3] = 0.5
                            return v, ix, s, a, p
                        """, [{"R": 6}]))


def test_scalar_inputs_masks_and_counts(tmp_path):
    """A float scalar used in Python arithmetic, int() of a size, t[mask] = v, a float .item(),
    a one-hot count and a 3-D linear with bias (its ATen path reads concrete sizes)."""
    _check(make_problem(tmp_path, "sc", {"B": {"type": "var"}, "S": {"type": "var"},
                                         "H": {"type": "const", "value": 16}},
                        {"x": T("B", "S", "H"), "w": T("H", "H"), "b": T("H"),
                         "ids": {"shape": ["B"], "dtype": "int64"}, "p": {"shape": None, "dtype": "float32"}},
                        {"y": T("B", "S", "H"), "c": {"shape": [8], "dtype": "int64"}},
                        """
                        import torch
                        def run(x, w, b, ids, p):
                            n = int(x.shape[1])
                            y = torch.nn.functional.linear(x, w, b) * (1.0 / (1.0 - p)) / n
                            y[y > 0.5] = 0.5
                            y = y * x.abs().max().item()
                            c = torch.nn.functional.one_hot(ids.abs() % 8, 8).sum(0)
                            return y, c
                        """, [{"B": 3, "S": 5}], scalars={"p": 0.25}))


def test_max_pool_with_padding_and_avg_pool(tmp_path):
    _check(make_problem(tmp_path, "mp", {"N": {"type": "var"}, "C": {"type": "const", "value": 3},
                                         "H": {"type": "var"},
                                         "HO": {"type": "expr", "expression": "(H + 2 - 3) // 2 + 1"},
                                         "HA": {"type": "expr", "expression": "H // 2"}},
                        {"x": T("N", "C", "H", "H")},
                        {"m": T("N", "C", "HO", "HO"), "a": T("N", "C", "HA", "HA")},
                        """
                        import torch
                        def run(x):
                            m = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1)
                            a = torch.nn.functional.avg_pool2d(x, 2)
                            return m, a
                        """, [{"N": 2, "H": 9}]))
