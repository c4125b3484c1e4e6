"""An int scalar input that indexes a tensor (`w[:, offset + k]`, an expert offset) stays symbolic:
one graph for every value (symint_index.py; the symbols are tried before baking each value in).
Problems written here, run through the g++ emulation."""

from __future__ import annotations

import json
import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem
from solforge.problem.loader import load_problem_dir

from .test_compiler import T, _compile_ok, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def test_an_int_offset_indexing_columns_is_one_graph(tmp_path):
    make_problem(tmp_path, "offset", {"N": {"type": "var"}, "E": {"type": "const", "value": 16}},
                 {"x": T("N", "E"), "offset": {"shape": None, "dtype": "int32"}}, {"y": T("N")},
                 """
                 import torch
                 def run(x, offset):
                     out = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
                     start = int(offset)
                     for k in range(4):
                         e = start + k
                         if e < 0 or e >= x.shape[1]:
                             continue
                         hit = (x.argmax(dim=1) == e).to(x.dtype)
                         out = out + x[:, e] * hit + 0.5 * x[:, e]
                     return out
                 """, [{"N": 5}, {"N": 9}, {"N": 12}, {"N": 20}], scalars={"offset": 0})
    d = tmp_path / "offset"
    rows = [json.loads(l) for l in (d / "workload.jsonl").read_text().splitlines()]
    for r, v in zip(rows, [4, 0, 8, 12]):
        r["inputs"]["offset"] = {"type": "scalar", "value": v}
    (d / "workload.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    p = load_problem_dir(d)
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "variants" not in out.segments, out.segments   # the offset is a kernel argument
    _compile_ok(out.candidate)
    res = check_problem(p, cap=16)
    assert res["ok"], res
