"""A loop over experts that skips empty ones and accumulates a sum over the expert's rows
(`grad_w[e] += g[tok].t() @ x[tok]`, a backward pass): over no rows the sum is 0 and x + 0 is x, so
the size-oblivious branch leaves what the skipped one leaves (dynamic.check_oblivious). The slice
accumulator's functionalized form (a stale view, the live one read later) still rolls
(rolling.canonical_views). Problems written here, run through the g++ emulation."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.api import compile_problem
from solforge.compiler.check import check_problem

from .test_compiler import T, _compile_ok, make_problem

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

_AXES = {"M": {"type": "var"}, "H": {"type": "const", "value": 8}, "E": {"type": "const", "value": 12}}
_INPUTS = {"x": T("M", "H"), "g": T("M", "H"), "logits": T("M", "E"), "w": T("E", "H", "H")}


def _grad(tmp_path, name, update):
    return make_problem(tmp_path, name, _AXES, _INPUTS, {"gw": T("E", "H", "H")}, f"""
import torch
def run(x, g, logits, w):
    ids = logits.argmax(dim=-1)
    gw = torch.zeros_like(w)
    for e in range(w.shape[0]):
        tok = torch.nonzero(ids == e)[:, 0]
        if tok.numel() == 0:
            continue
        {update}
    return gw
""", [{"M": 5}, {"M": 11}])


def test_a_sum_over_an_experts_rows_added_to_its_slice(tmp_path):
    p = _grad(tmp_path, "grad_w", "gw[e] += g[tok].t() @ x[tok]")
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("nonzero") == 12, out.segments
    # traced short and rolled: one body of kernels, launched once per expert
    assert out.candidate.sources["kernel.cu"].count("_nonzero(") == 1
    _compile_ok(out.candidate)
    r = check_problem(p, cap=5)   # 5 tokens over 12 experts: most experts are empty
    assert r["ok"], r


def test_a_sum_over_the_rows_read_otherwise_is_refused(tmp_path):
    """Divided by the count, the sum over no rows is nan where the reference skips."""
    p = _grad(tmp_path, "grad_mean", "gw[e] += (g[tok].t() @ x[tok]) / tok.numel()")
    out = compile_problem(p)
    assert not out.ok
    assert "emptiness" in out.reason, out.reason
