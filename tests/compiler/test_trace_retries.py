"""Which retries a failed trace makes: one that stopped at a guard on values read back alone is
not traced again with the float scalars as constants (that retry reaches the same guard), and one
that stopped elsewhere still is. In-process, on problems written here."""

from __future__ import annotations

import pytest

from solforge.compiler import trace

from .test_compiler import T, make_problem

FLOAT = {"shape": None, "dtype": "float32"}

READ_BACK_BRANCH = """
import torch
def run(x, cu, scale):
    n = int(cu[0].item())
    if n == 3:            # a value read back against a constant: no rule decides it
        return x * scale
    return x * 2.0
"""

# `x.tolist()` of a tensor of symbolic size, then a list built in Python: not a guard on a value
# read back, so the constant-scalar retry is still made (and fails the same way here)
LISTED = """
import torch
def run(x, cu, scale):
    vals = x.tolist()
    return x * scale + float(len(vals))
"""


def _request(p) -> dict:
    wls = list(p.workloads)
    return {"definition": p.definition.model_dump(mode="json"),
            "workloads": trace.pick_workloads(p.definition, wls), "extra": [], "budget_s": 60.0}


def _traces(monkeypatch, p) -> tuple[dict, list]:
    calls = []
    orig = trace._trace_once

    def counted(defn, wl, sentinel, *a, **kw):
        calls.append(kw.get("symfloat", a[0] if a else True))
        return orig(defn, wl, sentinel, *a, **kw)

    monkeypatch.setattr(trace, "_trace_once", counted)
    return trace.sandbox_entry(_request(p)), calls


@pytest.mark.parametrize("ref,read_back", [(READ_BACK_BRANCH, True), (LISTED, False)])
def test_constant_scalar_retry_only_where_it_can_help(tmp_path, monkeypatch, ref, read_back):
    p = make_problem(tmp_path, "retry", {"L": {"type": "var"}, "D": {"type": "const", "value": 8}},
                     {"x": T("L", "D"), "cu": {"shape": ["L"], "dtype": "int32"}, "scale": FLOAT},
                     {"y": T("L", "D")}, ref, [{"L": 4}, {"L": 6}], scalars={"scale": 0.5})
    out, calls = _traces(monkeypatch, p)
    assert not out["ok"] and "data-dependent" in out["reason"], out
    # the first workload's top-level trace with the float scalar as a symbol, then (only where the
    # guard is not on values read back alone) the same with it as a constant
    assert calls[0] is True
    assert (False in calls) is (not read_back), calls
