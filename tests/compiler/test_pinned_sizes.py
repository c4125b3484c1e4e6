"""A variant selected by a size equal to a constant (`batch_size == 1`: torch specialises a size of
one, so those workloads trace to a graph of their own) is lowered with that size as the constant in
its inputs' and outputs' shapes. Without it the graph's `view(x, [seq_len, K])` of an input
[batch_size, seq_len, K] could not be proven a reshape (the element counts differ unless
batch_size is 1) and a copy of the whole input ran before the matmul on every such workload."""

from __future__ import annotations

import re
import shutil

import pytest

from solforge.compiler.api import compile_problem, lower_ir
from solforge.compiler.trace import trace_definition

from .test_compiler import B, make_problem

REFERENCE = """
import torch
def run(x, w):
    b, s, _ = x.shape
    y = torch.nn.functional.linear(x, w)
    return y.view(b, s, 4, 8).transpose(1, 2).contiguous()
"""

# the smallest workload (the one check_problem emulates) is the one of batch 1
WORKLOADS = [{"B": 1, "S": 6}, {"B": 3, "S": 16}, {"B": 2, "S": 40}]


def _problem(tmp_path):
    return make_problem(tmp_path, "proj", {"B": {"type": "var"}, "S": {"type": "var"},
                                           "K": {"type": "const", "value": 40},
                                           "N": {"type": "const", "value": 32}},
                        {"x": B("B", "S", "K"), "w": B("N", "K")}, {"y": B("B", 4, "S", 8)},
                        REFERENCE, WORKLOADS)


def _kinds_by_variant(cand) -> dict:
    out: dict = {}
    for launch in cand.launches:
        m = re.match(r"v(\d+)k\d+_(\w+)", launch.kernel)
        if m:
            out.setdefault((m.group(1), launch.when), []).append(m.group(2))
    return out


def test_the_batch_of_one_variant_pins_its_size(tmp_path):
    p = _problem(tmp_path)
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    assert "variants" in tr.ir, "the batch of one should trace to its own graph"
    pinned = [v for v in tr.ir["variants"] if v.get("pins")]
    assert [v["pins"] for v in pinned] == [{"B": 1}]
    out = lower_ir(p.definition, tr.ir)
    assert out.ok, out.reason
    kinds = _kinds_by_variant(out.candidate)
    one = [k for (v, when), k in kinds.items() if when and "== (1)" in when]
    rest = [k for (v, when), k in kinds.items() if not (when and "== (1)" in when)]
    assert len(one) == 1 and len(rest) == 1, kinds
    # the same kernels as any other batch: no copy of the input ahead of the matmul
    assert "copy" not in one[0] and len(one[0]) <= len(rest[0]), kinds
    assert sorted(one[0]) == sorted(rest[0]), kinds


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_pinned_variant_is_right_on_the_cpu(tmp_path):
    from solforge.compiler.check import check_problem

    p = _problem(tmp_path)
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=64, candidate=out.candidate)
    assert r["axes"]["B"] == 1, r
    assert r["ok"], r
