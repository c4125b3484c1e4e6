"""Workloads with a size of one (`batch_size == 1`: torch specialises it, so they trace to a graph
of their own).

- Where that graph is the other workloads' graph at batch_size = 1 (a linear over [B, S, K]: torch
  views the input as [B * S, K] either way), the two structures are one: no variant, one set of
  kernels (trace._merge_specialised).
- Where it is not (the reference branches on the size), the batch-of-one variant is lowered with
  the size as the constant in its inputs' and outputs' shapes (trace._pins, Lowering.pins): its
  `x.view(s, k)` of an input [B, S, K] is then a view. Without it the element counts differ unless
  B is 1, and a copy of the whole input ran ahead of the matmul on every such workload."""

from __future__ import annotations

import re
import shutil

import pytest

from solforge.compiler.api import compile_problem, lower_ir
from solforge.compiler.trace import trace_definition

from .test_compiler import B, make_problem

LINEAR = """
import torch
def run(x, w):
    b, s, _ = x.shape
    y = torch.nn.functional.linear(x, w)
    return y.view(b, s, 4, 8).transpose(1, 2).contiguous()
"""

# a path of its own for a batch of one (scaled by 2 and back: the same values, another graph)
BRANCHED = """
import torch
def run(x, w):
    b, s, k = x.shape
    if b == 1:
        y = ((x.view(s, k) * 2.0) @ w.t() * 0.5).view(1, s, -1)
    else:
        y = torch.nn.functional.linear(x, w)
    return y.view(b, s, 4, 8).transpose(1, 2).contiguous()
"""

# the smallest workload (the one check_problem emulates) is the one of batch 1
WORKLOADS = [{"B": 1, "S": 6}, {"B": 3, "S": 16}, {"B": 2, "S": 40}]


def _problem(tmp_path, name, reference):
    return make_problem(tmp_path, name, {"B": {"type": "var"}, "S": {"type": "var"},
                                         "K": {"type": "const", "value": 40},
                                         "N": {"type": "const", "value": 32}},
                        {"x": B("B", "S", "K"), "w": B("N", "K")}, {"y": B("B", 4, "S", 8)},
                        reference, WORKLOADS)


def _kinds_by_variant(cand) -> dict:
    out: dict = {}
    for launch in cand.launches:
        m = re.match(r"v?(\d*)k\d+_(\w+)", launch.kernel)
        if m:
            out.setdefault((m.group(1), launch.when), []).append(m.group(2))
    return out


def test_a_batch_of_one_taking_the_same_graph_is_no_variant(tmp_path):
    p = _problem(tmp_path, "proj", LINEAR)
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    assert "variants" not in tr.ir, "the batch of one is the same graph at B = 1"
    # the guards that only the other workloads met (B != 1) are not claimed for the merged graph
    assert not any("Unequality(Symbol('B'" in g and "Integer(1)" in g for g in tr.ir["guards"]), \
        tr.ir["guards"]
    out = lower_ir(p.definition, tr.ir)
    assert out.ok, out.reason
    assert all(launch.when is None for launch in out.candidate.launches)


def test_a_batch_of_one_on_its_own_path_pins_its_size(tmp_path):
    p = _problem(tmp_path, "branched", BRANCHED)
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    assert "variants" in tr.ir, "the batch of one takes its own path"
    assert [v.get("pins") for v in tr.ir["variants"] if v.get("pins")] == [{"B": 1}]
    out = lower_ir(p.definition, tr.ir)
    assert out.ok, out.reason
    kinds = _kinds_by_variant(out.candidate)
    assert len([when for (_, when) in kinds if when and "== (1)" in when]) == 1, kinds
    # no copy of the input ahead of the matmul: its view of x is a view the matmul reads
    readers = [launch.kernel for launch in out.candidate.launches
               if launch.when and "== (1)" in launch.when and "x" in launch.args]
    assert len(readers) == 1 and readers[0].endswith("_mm"), (readers, kinds)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("reference", [LINEAR, BRANCHED], ids=["merged", "pinned"])
def test_the_batch_of_one_is_right_on_the_cpu(tmp_path, reference):
    from solforge.compiler.check import check_problem

    p = _problem(tmp_path, "p", reference)
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=64, candidate=out.candidate)
    assert r["axes"]["B"] == 1, r
    assert r["ok"], r


def _ir(nodes, guards):
    return {"inputs": [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": ["B", "S", "40"]}],
            "nodes": nodes, "outputs": [{"ref": "n0"}], "guards": guards}


def _view(shape_args, shape):
    return {"name": "n0", "op": "aten.view.default", "args": [{"ref": "x"}, shape_args],
            "kwargs": {}, "dtype": "float32", "shape": shape}


EQ_B1 = "Equality(Symbol('B', integer=True, nonnegative=True), Integer(1))"
NE_B1 = "Unequality(Symbol('B', integer=True, nonnegative=True), Integer(1))"


def test_merging_compares_the_graphs_at_the_pinned_sizes():
    from solforge.compiler.trace import _merge_specialised, _structure

    general = _ir([_view([{"sym": "(B * S)"}, 40], ["(B * S)", "40"])], [NE_B1])
    one = _ir([_view([{"sym": "S"}, 40], ["S", "40"])], [EQ_B1])
    other_op = _ir([dict(_view([{"sym": "S"}, 40], ["S", "40"]), op="aten.reshape.default")], [EQ_B1])

    def groups(*pairs):
        return [[_structure(ir), ir, vals] for ir, vals in pairs]

    g = groups((general, [{"B": 2, "S": 5}]), (one, [{"B": 1, "S": 7}, {"B": 1, "S": 3}]))
    merged = _merge_specialised(g)
    assert len(merged) == 1 and merged[0][1] is general
    assert merged[0][2] == [{"B": 2, "S": 5}, {"B": 1, "S": 7}, {"B": 1, "S": 3}]
    assert len(g[0][2]) == 1            # the caller's groups are left as they were
    # another op at B = 1: two graphs
    assert len(_merge_specialised(groups((general, [{"B": 2, "S": 5}]),
                                         (other_op, [{"B": 1, "S": 7}])))) == 2
    # a guard B == 1 that not every workload of the group meets pins nothing
    assert len(_merge_specialised(groups((general, [{"B": 2, "S": 5}]),
                                         (one, [{"B": 1, "S": 7}, {"B": 4, "S": 3}])))) == 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_check_command_takes_named_workloads(tmp_path):
    # `python -m solforge.compiler.check DIR --workload UUID...`: one row per workload, each the
    # compiler's plan emulated there (shrunk to --cap) against the reference
    from solforge.compiler.check import _one

    _problem(tmp_path, "p", BRANCHED)
    rows = _one(str(tmp_path / "p"), 64, None, workloads=["p-0", "p-1"])
    assert [(r["workload"], r["axes"]["B"], r["ok"]) for r in rows] == [("p-0", 1, True),
                                                                       ("p-1", 3, True)], rows
