"""A trace that fails with the float scalars as symbols is made again with them as constants, even
where it stopped at a guard on values read back alone: a float that flows into a tensor and then
into a data-dependent test (`torch.tensor(p)`, `if (t < c).any():`) traces past that guard only as a
constant. In-process, on a problem written here."""

from __future__ import annotations

from solforge.compiler import trace

from .test_compiler import T, make_problem

FLOAT_INTO_A_MASK = """
import torch
def run(x, p):
    t = torch.tensor(p, dtype=torch.float32, device=x.device)
    r = torch.zeros_like(t)
    m = t < 0.5
    if m.any():
        r[m] = t[m] * 2.0
    return x * r
"""


def test_float_into_a_data_dependent_test_traces_as_a_constant(tmp_path, monkeypatch):
    p = make_problem(tmp_path, "floatmask", {"L": {"type": "var"}, "D": {"type": "const", "value": 8}},
                     {"x": T("L", "D"), "p": {"shape": None, "dtype": "float32"}}, {"y": T("L", "D")},
                     FLOAT_INTO_A_MASK, [{"L": 4}, {"L": 6}], scalars={"p": 0.25})
    calls = []
    orig = trace._trace_once

    def counted(defn, wl, sentinel, *a, **kw):
        calls.append(kw.get("symfloat", a[0] if a else True))
        return orig(defn, wl, sentinel, *a, **kw)

    monkeypatch.setattr(trace, "_trace_once", counted)
    wls = list(p.workloads)
    out = trace.sandbox_entry({"definition": p.definition.model_dump(mode="json"),
                               "workloads": trace.pick_workloads(p.definition, wls), "extra": [],
                               "budget_s": 60.0})
    assert out["ok"], out
    assert calls[0] is True and False in calls, calls   # the symbol's trace failed; the constant's ran
