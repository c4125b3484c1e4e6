"""Guards on values read back outside the loops that roll them, and outputs returned by name: an
`assert` of a size against a value read back (assumed, checked on the device), `if s >= e:
continue` over two offsets read back (the segment's emptiness test), and a reference that returns
a dict. Checked on the CPU (g++ emulation) against the reference, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem
from solforge.compiler.trace import trace_definition

from .test_compiler import T, make_problem
from .test_counted_loops import GET_INPUTS, _custom

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

ASSERTED_SEGMENTS = GET_INPUTS + """
def run(x, cu):
    assert x.shape[1] == cu[-1].item()
    outs = []
    for i in range(cu.shape[0] - 1):
        s = int(cu[i].item())
        e = int(cu[i + 1].item())
        if s >= e:
            continue
        outs.append(x[:, s:e] * 2.0 + 1.0)
    return torch.cat(outs, dim=1)
"""


def test_asserted_total_and_skipped_empty_segments(tmp_path):
    # S = 2: one segment, a loop of one iteration the trace unrolls (its `s >= e` outside any
    # counted loop); S = 4 and 6: a rolled loop with an empty segment (GET_INPUTS)
    p = _custom(tmp_path, "asserted", ASSERTED_SEGMENTS,
                [{"L": 5, "S": 2}, {"L": 7, "S": 4}, {"L": 8, "S": 6}])
    tr = trace_definition(p.definition, list(p.workloads))
    assert tr.ok, tr.reason
    graphs = [tr.ir] + [v["ir"] for v in tr.ir.get("variants", [])] if "variants" in tr.ir \
        else [tr.ir]
    assert any(g.get("assumed") for g in graphs), "the assert is checked on the device"
    out = compile_problem(p)
    assert out.ok, out.reason
    for w in p.workloads:
        r = check_problem(p, cap=8, uuid=w.uuid)
        assert r["ok"], (w.axes, r)


def test_outputs_returned_by_name_in_another_order(tmp_path):
    p = make_problem(tmp_path, "named", {"M": {"type": "var"}}, {"x": T("M", 8)},
                     {"a": T("M", 8), "b": T("M")},
                     """
                     import torch
                     def run(x):
                         return {"b": x.sum(dim=1), "a": x * 2.0}
                     """, [{"M": 4}, {"M": 9}])
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_outputs_by_name_are_read_as_the_evaluator_reads_them(tmp_path):
    """Keys beyond the definition's outputs are ignored; an output the dict lacks refuses the
    trace in one line (the evaluator refuses such a reference too)."""
    extra = make_problem(tmp_path, "extra", {"M": {"type": "var"}}, {"x": T("M", 8)},
                         {"a": T("M", 8)},
                         """
                         import torch
                         def run(x):
                             return {"debug": x.sum(), "a": x * 2.0}
                         """, [{"M": 4}])
    tr = trace_definition(extra.definition, list(extra.workloads))
    assert tr.ok, tr.reason
    assert len(tr.ir["outputs"]) == 1
    lacking = make_problem(tmp_path, "lacking", {"M": {"type": "var"}}, {"x": T("M", 8)},
                           {"a": T("M", 8), "b": T("M")},
                           """
                           import torch
                           def run(x):
                               return {"a": x * 2.0}
                           """, [{"M": 4}])
    tr = trace_definition(lacking.definition, list(lacking.workloads))
    assert not tr.ok and "without ['b']" in tr.reason and "\n" not in tr.reason, tr.reason
