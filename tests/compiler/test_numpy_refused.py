"""`.numpy()` of a traced tensor: the trace's fake tensors have no values (numpy would read
uninitialised memory and bake it into the graph as if it were data). Float values are refused at
`.numpy()`; integer counts are read element by element as `.item()` (sizes on the device, as
`.tolist()` reads them), so a count used as a value is refused where `.item()` would be, never baked."""

from __future__ import annotations

import pytest

from solforge.compiler.trace import trace_definition

from .test_compiler import T, make_problem


@pytest.mark.slow
def test_values_read_into_numpy_are_refused(tmp_path):
    p = make_problem(tmp_path, "np", {"N": {"type": "var"}, "C": {"type": "const", "value": 4}},
                     {"x": T("N", "C")}, {"y": T("N", "C")},
                     """
                     import torch
                     def run(x):
                         counts = (x > 0).sum(0).cpu().numpy()
                         return x * float(int(counts[0]) + 1)
                     """, [{"N": 5}, {"N": 7}])
    tr = trace_definition(p.definition, list(p.workloads))
    assert not tr.ok
    assert "data-dependent" in tr.reason, tr.reason   # the count read as .item(), not a baked value


@pytest.mark.slow
def test_float_values_read_into_numpy_are_refused_at_numpy(tmp_path):
    p = make_problem(tmp_path, "npf", {"N": {"type": "var"}, "C": {"type": "const", "value": 4}},
                     {"x": T("N", "C")}, {"y": T("N", "C")},
                     """
                     import torch
                     def run(x):
                         m = x.amax().cpu().numpy()
                         return x * float(m)
                     """, [{"N": 5}, {"N": 7}])
    tr = trace_definition(p.definition, list(p.workloads))
    assert not tr.ok
    assert ".numpy()" in tr.reason, tr.reason
